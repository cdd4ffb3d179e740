// The launchers of the linear-attention kernels, as the registry (registry.ts) names them: each a
// class template <class T, int D, int Tile> with its argument type and a launch function, defined
// beside its kernel and instantiated per registry row by the build. No kernel code here: the
// dispatchers and the launch table include this header only.
#pragma once

#include <cuda_runtime.h>

#include "linear/delta/bwd/fast.cuh"
#include "linear/delta/fwd/params.h"

namespace ak::linear::cuda {

#define AK_LINEAR_LAUNCHER(Name, ArgsType)                 \
  template <class T, int D, int Tile>                      \
  struct Name {                                            \
    using Args = ArgsType;                                 \
    static void launch(const Args& a, cudaStream_t stream); \
  };

// ---- the chunked forward of the delta rule (fwd/) ----
// Stage 1 (gate cumsum, K K^T with decay, (I + L)^-1, w, u), mma.sync.
AK_LINEAR_LAUNCHER(FwdPrep, fwd::PrepParams<T>)
// Stage 2 (the state pass fused with the output) on mma.sync, Tile = the V columns a block.
AK_LINEAR_LAUNCHER(FwdStateMma, fwd::StateArgs<T>)
// Stage 2 on wgmma, two warpgroups sharing every chunk step.
AK_LINEAR_LAUNCHER(FwdStateWgmma, fwd::StateArgs<T>)
// Stage 2 on wgmma with the state chain and the output on their own warpgroups.
AK_LINEAR_LAUNCHER(FwdStateSplit, fwd::StateArgs<T>)
// The general forward: the token-by-token recurrence in fp32, and the fp32 WY factors.
AK_LINEAR_LAUNCHER(FwdRecurrent, fwd::RecurrentParams<T>)
AK_LINEAR_LAUNCHER(FwdWyGeneral, fwd::WyParams<T>)
// One decode step per sequence.
AK_LINEAR_LAUNCHER(Decode, fwd::DecodeArgs<T>)

// ---- the backward of the delta rule (bwd/) ----
AK_LINEAR_LAUNCHER(BwdPrep, bwd::StageArgs<T>)
AK_LINEAR_LAUNCHER(BwdStates, bwd::StageArgs<T>)
AK_LINEAR_LAUNCHER(BwdDStates, bwd::StageArgs<T>)
AK_LINEAR_LAUNCHER(BwdGrads, bwd::StageArgs<T>)
AK_LINEAR_LAUNCHER(BwdGrads256, bwd::StageArgs<T>)

struct BwdGeneralArgs {
  bwd::Problem p;
  int device = 0;
};
AK_LINEAR_LAUNCHER(BwdGeneral, BwdGeneralArgs)

#undef AK_LINEAR_LAUNCHER

}  // namespace ak::linear::cuda
