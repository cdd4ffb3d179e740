// The backward's recompute of the gated linear family's states: one block per (sequence, value head,
// V tile of 64) walks the sequence's chunks in order with the state S (KD x 64, fp32) in registers,
// storing S before every chunk (16-bit for the backward's products, or fp32) and after the last, the
// next chunk's loads in flight where the layout has two stages. Per
// chunk of 64 tokens (gc the cumulated decay, gL its last row):
//   S  <- diag(exp(gL)) S + (K * exp(gL - gc))^T V
// on tensor cores (mma.sync, 16-bit operands, fp32 accumulation). The forward itself is the split
// pair prep.cuh + pass.cuh. KD: the key dimension padded to 64 or 128 (columns past K are zero).
#pragma once

#include "cuda/runtime.cuh"
#include "generated/linear_launchers.h"
#include "linear/gla/cuda/stages.cuh"

namespace ak::linear::cuda::gla {

template <class T, int KD, bool kChannel>
__global__ void __launch_bounds__(kThreads, (FwdLayout<KD, kChannel>::kMinBlocks)) gla_states_kernel(const FwdParams<T> p) {
  using Lay = FwdLayout<KD, kChannel>;
  using ST = StateTiles<KD>;
  extern __shared__ __align__(128) unsigned char smem[];
  float* gc = reinterpret_cast<float*>(smem + Lay::kGc);
  float* gs = reinterpret_cast<float*>(smem + Lay::kGs);

  const int tiles = (p.V + kVTile - 1) / kVTile;
  const int n = blockIdx.x / tiles, v0 = (blockIdx.x - n * tiles) * kVTile, h = blockIdx.y;
  const int hk = h / p.group;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  int row, begin, end, first;
  p.map.sequence(n, row, begin, end, first);
  const int chunks = (end - begin + kChunk - 1) / kChunk;
  const int64_t KV = static_cast<int64_t>(p.K) * p.V;

  // S in registers; (r, c) valid when r < K and v0 + c < V.
  float S[ST::MT][ST::NT][4];
  zero_acc(S);
  const StateTile<KD> st{S, ST::row0(warp), ST::col0(warp), lane, p.K, p.V, v0};
  if (p.initial_state) st.load(p.initial_state + (static_cast<int64_t>(n) * p.H + h) * KV);

  const ChunkRing<T, KD, kChannel> ring{smem, p.k, p.v, p.d, gc, row, begin, end, hk, h, v0, p.K, p.V, tid};
  float token = 0.f, next = 0.f;
  ring.start(chunks > 0 ? 0 : -1, next);
  for (int c = 0; c < chunks; ++c) {
    if (p.states.p) st.store(p.states.at(first, n, c, h));
    if (p.states16.p) st.store16(p.states16.at(first, n, c, h));
    ring.step(c, c + 1 < chunks ? c + 1 : -1, token, next);
    T* Ks = ring.rows(c);
    T* Vs = ring.tile(c);
    gate_cumsum_of<KD, kChannel>(gc, gs, token, tid);  // barrier inside
    // K -> K exp(gL - gc).
    for (int e = tid; e < kChunk * (KD / 2); e += kThreads) {
      const int r = e / (KD / 2), cc = (e - r * (KD / 2)) * 2;
      const float gl0 = gc_at<KD, kChannel>(gc, kChunk - 1, cc), gl1 = gc_at<KD, kChannel>(gc, kChunk - 1, cc + 1);
      const float g0 = gc_at<KD, kChannel>(gc, r, cc), g1 = gc_at<KD, kChannel>(gc, r, cc + 1);
      uint32_t* kp = reinterpret_cast<uint32_t*>(Ks + r * pitch16(KD) + cc);
      const float2 kk = unpack2<T>(*kp);
      *kp = pack2<T>(kk.x * __expf(gl0 - g0), kk.y * __expf(gl1 - g1));
    }
    __syncthreads();
    // S <- diag(exp(gL)) S + Kd^T V.
    for_acc_pairs(S, st.r0, st.c0, lane, [&](int r, int, float* v) {
      const float a = __expf(gc_at<KD, kChannel>(gc, kChunk - 1, r));
      v[0] *= a;
      v[1] *= a;
    });
    warp_mma<T, ST::MT, ST::NT, true, true>(S, Ks, pitch16(KD), st.r0, Vs, pitch16(kVTile), st.c0, kChunk, lane);
    __syncthreads();  // every warp is done with this stage and gc
  }
  if (p.states.p) st.store(p.states.at(first, n, chunks, h));
  if (p.states16.p) st.store16(p.states16.at(first, n, chunks, h));
  if (p.final_state) st.store(p.final_state + (static_cast<int64_t>(n) * p.H + h) * KV);
}

template <class T, int KD, bool kChannel>
void launch_states_kd(const FwdParams<T>& fp, cudaStream_t stream) {
  if (fp.N == 0 || fp.H == 0) return;
  constexpr int kSmem = FwdLayout<KD, kChannel>::kBytes;
  auto kernel = gla_states_kernel<T, KD, kChannel>;
  AK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const dim3 grid(static_cast<unsigned>(fp.N * ((fp.V + kVTile - 1) / kVTile)), static_cast<unsigned>(fp.H));
  kernel<<<grid, kThreads, kSmem, stream>>>(fp);
  ak::cuda::check_launch("gla_states_kernel");
}

}  // namespace ak::linear::cuda::gla

namespace ak::linear::cuda {

template <class T, int D, int Tile>
void GlaStatesChannel<T, D, Tile>::launch(const Args& a, cudaStream_t stream) {
  gla::launch_states_kd<T, D, true>(a, stream);
}
template <class T, int D, int Tile>
void GlaStatesScalar<T, D, Tile>::launch(const Args& a, cudaStream_t stream) {
  gla::launch_states_kd<T, D, false>(a, stream);
}

}  // namespace ak::linear::cuda
