// The one architecture guard of the kernel code. Device code is compiled once per target of the build;
// a primitive whose instruction a target lacks compiles to nothing there (the planner never launches
// such code on that GPU), so every target of the build still compiles.
//   AK_ARCH_SM80   1 in a device pass for compute capability 8.0 or newer (mma.sync, ldmatrix, cp.async)
//   AK_ARCH_SM90A  1 in a device pass for sm_90a (wgmma, TMA, mbarrier transactions, setmaxnreg)
// Both are 0 in the host pass.
#pragma once

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define AK_ARCH_SM80 1
#else
#define AK_ARCH_SM80 0
#endif

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define AK_ARCH_SM90A 1
#else
#define AK_ARCH_SM90A 0
#endif

// One asm statement that only the passes of its architecture emit; elsewhere it is nothing.
#if AK_ARCH_SM80
#define AK_ASM_SM80(...) asm volatile(__VA_ARGS__)
#else
#define AK_ASM_SM80(...) ((void)0)
#endif
#if AK_ARCH_SM90A
#define AK_ASM_SM90A(...) asm volatile(__VA_ARGS__)
#else
#define AK_ASM_SM90A(...) ((void)0)
#endif
