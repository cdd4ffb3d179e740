// The launchers of the split-key decode (registry rows attention.decode.tiled and .mma): the tiled block's
// kernel, on CUDA cores or on tensor cores, at a fixed head dim, one block per (split, KV head, sequence),
// then, when the keys were split, the combine.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "attention/decode/source.h"
#include "attention/tiled/mma_block.h"
#include "cuda/runtime.cuh"
#include "generated/attention_launchers.h"

namespace ak::attention::cuda {

namespace decode_kernels {

template <template <class, int> class Block, int kD>
__global__ void __launch_bounds__(tiled::kThreads) split(decode::Problem p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const decode::DecodeSource source(p, blockIdx.x, blockIdx.y, blockIdx.z);
  Block<decode::DecodeSource, kD>(source).run_on_device(smem);
}

// One block per (sequence, KV head, row), a thread per output column. (A template, so that the units
// instantiating the launchers for each dtype share one definition.)
template <int kUnused = 0>
__global__ void combine(decode::Problem p) {
  const int64_t R = p.rows(), x = blockIdx.x;
  const int64_t r = x % R, hk = (x / R) % p.Hkv, b = x / (R * p.Hkv);
  for (int64_t c = threadIdx.x; c < p.D; c += blockDim.x) decode::combine(p, b, hk, r, c);
}

// The split kernel with block `Block` (its shared memory `smem` bytes), then the combine when split.
template <template <class, int> class Block, int D>
void run_split(const decode::Problem& problem, int smem, cudaStream_t stream, const char* name) {
  decode::Problem p = problem;
  const int64_t R = p.rows();
  AK_CUDA_CHECK(cudaFuncSetAttribute(split<Block, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const int64_t floats = p.splits > 1 ? p.splits * p.B * p.Hkv * R * (D + 1) : 1;
  ::ak::cuda::Scratch scratch(p.device, static_cast<size_t>(floats) * sizeof(float));
  if (p.splits > 1) {
    p.partial = scratch.as<float>();
    p.partial_lse = p.partial + p.splits * p.B * p.Hkv * R * D;
  }
  const dim3 grid(static_cast<unsigned>(p.splits), static_cast<unsigned>(p.Hkv), static_cast<unsigned>(p.B));
  split<Block, D><<<grid, tiled::kThreads, smem, stream>>>(p);
  ::ak::cuda::check_launch(name);
  if (p.splits == 1) return;
  combine<0><<<static_cast<unsigned>(p.B * p.Hkv * R), 128, 0, stream>>>(p);
  ::ak::cuda::check_launch("attention.decode (combine)");
}

}  // namespace decode_kernels

template <class T, int D, int Tile>
void DecodeTiled<T, D, Tile>::launch(const Args& p, cudaStream_t stream) {
  decode_kernels::run_split<tiled::Block, D>(p, static_cast<int>(tiled::Shared::bytes(p.rows(), D)), stream,
                                            "attention.decode.tiled");
}

template <class T, int D, int Tile>
void DecodeMma<T, D, Tile>::launch(const Args& p, cudaStream_t stream) {
  decode_kernels::run_split<tiled::MmaBlock, D>(p, static_cast<int>(tiled::MmaShared::bytes(D)), stream,
                                               "attention.decode.mma");
}

}  // namespace ak::attention::cuda
