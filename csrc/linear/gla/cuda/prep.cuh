// The split chunked forward of the gated linear family, part 1 of 2: everything within a chunk that
// needs no state, for all chunks at once (a block per chunk and value head): with gc the cumulated
// decay (per key channel, or per token) and gL its last row,
//   p  = the causal scale q k scores with the decay            (intra_scores, stages.cuh)
//   qd = scale Q exp(gc),  kd = K exp(gL - gc),  el = exp(gL)
// stored per (chunk, head) for the state pass (pass.cuh).
#pragma once

#include "cuda/runtime.cuh"
#include "generated/linear_launchers.h"
#include "linear/gla/cuda/stages.cuh"

namespace ak::linear::cuda::gla {

// Copies a shared 16-bit tile [64][pitch16(W)] to a contiguous global one [64][ld] (16-byte pieces).
template <class T, int W>
__device__ __forceinline__ void store_tile(T* g, int64_t ld, const T* s, int tid) {
  constexpr int kPer = W / 8;
  for (int e = tid; e < kChunk * kPer; e += kThreads) {
    const int r = e / kPer, c = (e - r * kPer) * 8;
    *reinterpret_cast<uint4*>(g + r * ld + c) = *reinterpret_cast<const uint4*>(s + r * pitch16(W) + c);
  }
}

// Q -> scale Q exp(gc) and K -> K exp(gL - gc) in place; el = exp(gL) to global. Ends with a barrier.
template <class T, int KD, bool kChannel>
__device__ __forceinline__ void decay_rows(T* Qs, T* Ks, const float* gc, float scale, float* el, int tid) {
  for (int e = tid; e < kChunk * (KD / 2); e += kThreads) {
    const int r = e / (KD / 2), cc = (e - r * (KD / 2)) * 2;
    const float g0 = gc_at<KD, kChannel>(gc, r, cc), g1 = gc_at<KD, kChannel>(gc, r, cc + 1);
    const float l0 = gc_at<KD, kChannel>(gc, kChunk - 1, cc), l1 = gc_at<KD, kChannel>(gc, kChunk - 1, cc + 1);
    uint32_t* kp = reinterpret_cast<uint32_t*>(Ks + r * pitch16(KD) + cc);
    const float2 kk = unpack2<T>(*kp);
    *kp = pack2<T>(kk.x * __expf(l0 - g0), kk.y * __expf(l1 - g1));
    uint32_t* qp = reinterpret_cast<uint32_t*>(Qs + r * pitch16(KD) + cc);
    const float2 qq = unpack2<T>(*qp);
    *qp = pack2<T>(scale * qq.x * __expf(g0), scale * qq.y * __expf(g1));
  }
  if (tid < KD) el[tid] = __expf(gc_at<KD, kChannel>(gc, kChunk - 1, tid));
  __syncthreads();
}

template <class T, int KD, bool kChannel>
__global__ void __launch_bounds__(kThreads, (PrepLayout<KD, kChannel>::kMinBlocks)) gla_prep_kernel(const SplitParams<T> sp) {
  using Lay = PrepLayout<KD, kChannel>;
  const FwdParams<T>& p = sp.f;
  const ChunkOperands<T>& ops = sp.ops;
  extern __shared__ __align__(128) unsigned char smem[];
  T* Qs = reinterpret_cast<T*>(smem + Lay::kQ);
  T* Ks = reinterpret_cast<T*>(smem + Lay::kK);
  T* Xs = reinterpret_cast<T*>(smem + Lay::kX);
  T* Ps = reinterpret_cast<T*>(smem + Lay::kP);
  float* gc = reinterpret_cast<float*>(smem + Lay::kGc);
  float* gs = reinterpret_cast<float*>(smem + Lay::kGs);

  const int g = blockIdx.x, h = blockIdx.y, hk = h / p.group;
  const int tid = threadIdx.x;
  const int4 ci = p.map.chunk_of(g);
  const int row = ci.x, t0 = ci.y, len = ci.z;
  if (len == 0) return;  // an empty chunk past a packed call's live ones
  const int64_t slot = ops.slot(g, h);

  load_rows<T, KD>(Qs, p.q, row, t0, len, hk, p.K, tid);
  load_rows<T, KD>(Ks, p.k, row, t0, len, hk, p.K, tid);
  if constexpr (kChannel) load_gk<KD>(gc, p.d, row, t0, len, h, p.K, tid);
  cp_async_commit();
  cp_async_wait<0>();
  gate_cumsum<KD, kChannel>(gc, gs, p.d, row, t0, len, h, tid);  // barrier inside
  intra_scores<T, KD, kChannel>(Ps, Qs, Ks, gc, Xs, p.scale, tid);  // barrier inside
  store_tile<T, 64>(ops.p + slot * Operands<KD>::kScores, kChunk, Ps, tid);
  decay_rows<T, KD, kChannel>(Qs, Ks, gc, p.scale, ops.el + slot * KD, tid);  // barrier inside
  store_tile<T, KD>(ops.kd + slot * Operands<KD>::kRowsK, KD, Ks, tid);
  store_tile<T, KD>(ops.qd + slot * Operands<KD>::kRowsK, KD, Qs, tid);
}

template <class T, int KD, bool kChannel>
void launch_prep(const SplitParams<T>& sp, cudaStream_t stream) {
  if (sp.chunks == 0 || sp.f.H == 0) return;
  constexpr int kSmem = PrepLayout<KD, kChannel>::kBytes;
  auto kernel = gla_prep_kernel<T, KD, kChannel>;
  AK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const dim3 grid(static_cast<unsigned>(sp.chunks), static_cast<unsigned>(sp.f.H));
  kernel<<<grid, kThreads, kSmem, stream>>>(sp);
  ak::cuda::check_launch("gla_prep_kernel");
}

}  // namespace ak::linear::cuda::gla

namespace ak::linear::cuda {

template <class T, int D, int Tile>
void GlaPrepChannel<T, D, Tile>::launch(const Args& a, cudaStream_t stream) {
  gla::launch_prep<T, D, true>(a, stream);
}
template <class T, int D, int Tile>
void GlaPrepScalar<T, D, Tile>::launch(const Args& a, cudaStream_t stream) {
  gla::launch_prep<T, D, false>(a, stream);
}

}  // namespace ak::linear::cuda
