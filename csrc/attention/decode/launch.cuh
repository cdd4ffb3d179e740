// The launcher of the split-key decode (registry row attention.decode.split): the tiled block's kernel at a
// fixed head dim, one block per (split, KV head, sequence), then, when the keys were split, the combine.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "attention/decode/source.h"
#include "cuda/runtime.cuh"
#include "generated/attention_launchers.h"

namespace ak::attention::cuda {

namespace decode_kernels {

template <int kD>
__global__ void __launch_bounds__(tiled::kThreads) split(decode::Problem p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const decode::DecodeSource source(p, blockIdx.x, blockIdx.y, blockIdx.z);
  tiled::Block<decode::DecodeSource, kD>(source).run_on_device(smem);
}

// One block per (sequence, KV head, row), a thread per output column.
__global__ void combine(decode::Problem p) {
  const int64_t R = p.rows(), x = blockIdx.x;
  const int64_t r = x % R, hk = (x / R) % p.Hkv, b = x / (R * p.Hkv);
  for (int64_t c = threadIdx.x; c < p.D; c += blockDim.x) decode::combine(p, b, hk, r, c);
}

}  // namespace decode_kernels

template <class T, int D, int Tile>
void DecodeSplit<T, D, Tile>::launch(const Args& problem, cudaStream_t stream) {
  decode::Problem p = problem;
  const int64_t R = p.rows();
  const int smem = static_cast<int>(tiled::Shared::bytes(R, D));
  AK_CUDA_CHECK(cudaFuncSetAttribute(decode_kernels::split<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const int64_t floats = p.splits > 1 ? p.splits * p.B * p.Hkv * R * (D + 1) : 1;
  ::ak::cuda::Scratch scratch(p.device, static_cast<size_t>(floats) * sizeof(float));
  if (p.splits > 1) {
    p.partial = scratch.as<float>();
    p.partial_lse = p.partial + p.splits * p.B * p.Hkv * R * D;
  }
  const dim3 grid(static_cast<unsigned>(p.splits), static_cast<unsigned>(p.Hkv), static_cast<unsigned>(p.B));
  decode_kernels::split<D><<<grid, tiled::kThreads, smem, stream>>>(p);
  ::ak::cuda::check_launch("attention.decode.split");
  if (p.splits == 1) return;
  decode_kernels::combine<<<static_cast<unsigned>(p.B * p.Hkv * R), 128, 0, stream>>>(p);
  ::ak::cuda::check_launch("attention.decode.split (combine)");
}

}  // namespace ak::attention::cuda
