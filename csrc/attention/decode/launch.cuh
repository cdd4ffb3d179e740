// The launchers of the split-key decode (registry rows attention.decode.tiled, .warp, .mma and .pipe): a
// tiled block's kernel (CUDA cores in phases, CUDA cores a warp at a time, tensor cores in phases, or tensor
// cores over a ring of stages) at a fixed head dim, one block per (split, KV head, sequence), then, when the
// keys were split, the combine.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "arch/sm90.cuh"
#include "attention/decode/source.h"
#include "attention/tiled/mma_block.h"
#include "attention/tiled/pipe_block.h"
#include "attention/tiled/split_merge.cuh"
#include "attention/tiled/warp_block.h"
#include "cuda/runtime.cuh"
#include "generated/attention_launchers.h"

namespace ak::attention::cuda {

namespace decode_kernels {

template <template <class, int> class Block, int kD>
__global__ void __launch_bounds__(tiled::kThreads) split(decode::Problem p) {
  extern __shared__ __align__(16) unsigned char smem[];
  ak::arch::launch_dependents();  // the merge's blocks may take their places; they wait for this grid
  const decode::DecodeSource source(p, blockIdx.x, blockIdx.y, blockIdx.z);
  Block<decode::DecodeSource, kD>(source).run_on_device(smem);
}

template <int kD, int kR, int kDtype>
__global__ void __launch_bounds__(tiled::kThreads) warp_split(decode::Problem p) {
  extern __shared__ __align__(16) float warp_smem[];
  ak::arch::launch_dependents();
  const decode::DecodeSource source(p, blockIdx.x, blockIdx.y, blockIdx.z);
  tiled::WarpBlock<decode::DecodeSource, kD, kR, kDtype>(source).run_on_device(warp_smem);
}

template <int kD, int kDtype>
__global__ void __launch_bounds__(tiled::kThreads) pipe_split(decode::Problem p) {
  extern __shared__ __align__(16) unsigned char pipe_smem[];
  ak::arch::launch_dependents();
  const decode::DecodeSource source(p, blockIdx.x, blockIdx.y, blockIdx.z);
  tiled::PipeBlock<decode::DecodeSource, kD, kDtype>(source).run_on_device(pipe_smem);
}

// One block per (sequence, KV head, row), its columns merged over the splits. (A template, so that the
// units instantiating the launchers for each dtype share one definition.)
template <int kUnused = 0>
__global__ void combine(decode::Problem p) {
  extern __shared__ float merge_smem[];
  ak::arch::wait_prerequisites();  // launched early (see run_split): the split kernel's partials
  const int64_t R = p.rows(), x = blockIdx.x;
  const int64_t r = x % R, hk = (x / R) % p.Hkv, b = x / (R * p.Hkv);
  const int64_t G = p.H / p.Hkv, at = (b * p.Hkv + hk) * R + r;
  uint16_t* out = static_cast<uint16_t*>(p.output) + ((b * p.Sq + r / G) * p.H + hk * G + r % G) * p.D;
  const bool bf16 = p.dtype == AK_BFLOAT16;
  tiled::merge_split_row(p.partial_lse + at, p.partial + at * p.D, p.B * p.Hkv * R, p.splits, p.D, merge_smem,
                         [&](int64_t c, float o) { out[c] = bf16 ? float_to_bf16(o) : float_to_f16(o); });
}

// The split kernel `kernel` (its shared memory `smem` bytes), then the combine when split.
inline void run_split(const decode::Problem& problem, void (*kernel)(decode::Problem), int smem,
                      cudaStream_t stream, const char* name) {
  decode::Problem p = problem;
  const int64_t R = p.rows(), D = p.D;
  AK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const int64_t floats = p.splits > 1 ? p.splits * p.B * p.Hkv * R * (D + 1) : 1;
  ::ak::cuda::Scratch scratch(p.device, static_cast<size_t>(floats) * sizeof(float));
  if (p.splits > 1) {
    p.partial = scratch.as<float>();
    p.partial_lse = p.partial + p.splits * p.B * p.Hkv * R * D;
  }
  const dim3 grid(static_cast<unsigned>(p.splits), static_cast<unsigned>(p.Hkv), static_cast<unsigned>(p.B));
  kernel<<<grid, tiled::kThreads, smem, stream>>>(p);
  ::ak::cuda::check_launch(name);
  if (p.splits == 1) return;
  // On Hopper the merge launches while the split kernel runs (programmatic dependent launch), so its blocks
  // are in place when the partials are; elsewhere it follows in stream order.
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(p.B * p.Hkv * R));
  config.blockDim = dim3(128);
  config.dynamicSmemBytes = static_cast<size_t>(tiled::split_merge_bytes(p.splits));
  config.stream = stream;
  cudaLaunchAttribute early = {};
  early.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  early.val.programmaticStreamSerializationAllowed = 1;
  if (::ak::cuda::props(p.device).major >= 9) config.attrs = &early, config.numAttrs = 1;
  AK_CUDA_CHECK(cudaLaunchKernelEx(&config, combine<0>, p));
  ::ak::cuda::check_launch("attention.decode (combine)");
}

template <class T, int kD, int kR>
void run_warp(const decode::Problem& p, cudaStream_t stream) {
  constexpr int kDtype = tiled::kHalfDtype<T>;
  using Block = tiled::WarpBlock<decode::DecodeSource, kD, kR, kDtype>;
  run_split(p, warp_split<kD, kR, kDtype>, static_cast<int>(Block::shared_bytes()), stream,
            "attention.decode.warp");
}

}  // namespace decode_kernels

template <class T, int D, int Tile>
void DecodeTiled<T, D, Tile>::launch(const Args& p, cudaStream_t stream) {
  decode_kernels::run_split(p, decode_kernels::split<tiled::Block, D>,
                            static_cast<int>(tiled::Shared::bytes(p.rows(), D)), stream, "attention.decode.tiled");
}

template <class T, int D, int Tile>
void DecodeMma<T, D, Tile>::launch(const Args& p, cudaStream_t stream) {
  constexpr int kDtype = tiled::kHalfDtype<T>;
  decode_kernels::run_split(p, decode_kernels::split<tiled::MmaBlockOf<kDtype>::template Block, D>,
                            static_cast<int>(tiled::MmaShared::bytes(D)), stream, "attention.decode.mma");
}

template <class T, int D, int Tile>
void DecodePipe<T, D, Tile>::launch(const Args& p, cudaStream_t stream) {
  constexpr int kDtype = tiled::kHalfDtype<T>;
  decode_kernels::run_split(p, decode_kernels::pipe_split<D, kDtype>, static_cast<int>(tiled::PipeShared::bytes(D)),
                            stream, "attention.decode.pipe");
}

template <class T, int D, int Tile>
void DecodeWarp<T, D, Tile>::launch(const Args& p, cudaStream_t stream) {
  switch (tiled::warp_rows(p.rows())) {
    case 1: return decode_kernels::run_warp<T, D, 1>(p, stream);
    case 2: return decode_kernels::run_warp<T, D, 2>(p, stream);
    case 4: return decode_kernels::run_warp<T, D, 4>(p, stream);
    default: return decode_kernels::run_warp<T, D, 8>(p, stream);
  }
}

}  // namespace ak::attention::cuda
