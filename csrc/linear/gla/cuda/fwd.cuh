// The chunked forward of the gated linear family: one block per (sequence, value head, V tile of 64)
// walks the sequence's chunks in order with the state S (KD x 64, fp32) in registers. Per chunk of 64
// tokens (gc the cumulated decay, gL its last row):
//   P   = intra_scores (stages.cuh)                      causal scores with the decay
//   O   = (scale Q * exp(gc)) S + P V                    inter-chunk part + intra-chunk part
//   S  <- diag(exp(gL)) S + (K * exp(gL - gc))^T V
// Products on tensor cores (mma.sync, 16-bit operands, fp32 accumulation); S feeds O as a 16-bit copy
// in shared memory. With states_only (the backward's recompute) P and O are skipped.
// KD: the key dimension padded to 64, 128 or 256 (columns past K are zero).
#pragma once

#include "cuda/runtime.cuh"
#include "generated/linear_launchers.h"
#include "linear/gla/cuda/stages.cuh"

namespace ak::linear::cuda::gla {

template <class T, int KD, bool kChannel, bool kStatesOnly>
__global__ void __launch_bounds__(kThreads, (FwdLayout<KD, kChannel>::kMinBlocks)) gla_fwd_kernel(const FwdParams<T> p) {
  using Lay = FwdLayout<KD, kChannel>;
  using ST = StateTiles<KD>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* Qs = reinterpret_cast<T*>(smem + Lay::kQ);
  T* Ks = reinterpret_cast<T*>(smem + Lay::kK);
  T* Vs = reinterpret_cast<T*>(smem + Lay::kV);
  T* Ps = reinterpret_cast<T*>(smem + Lay::kP);
  T* Ss = reinterpret_cast<T*>(smem + Lay::kS);
  T* Xs = reinterpret_cast<T*>(smem + Lay::kX);
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
  const int sr0 = ST::row0(warp), sc0 = ST::col0(warp);

  // S in registers; (r, c) valid when r < K and v0 + c < V.
  float S[ST::MT][ST::NT][4];
  zero_acc(S);
  const StateTile<KD> st{S, sr0, sc0, lane, p.K, p.V, v0};
  if (p.initial_state) st.load(p.initial_state + (static_cast<int64_t>(n) * p.H + h) * KV);
  if constexpr (!kStatesOnly) st.to_smem(Ss);

  for (int c = 0; c < chunks; ++c) {
    const int t0 = begin + c * kChunk, len = min(kChunk, end - t0);
    if (p.states.p) st.store(p.states.at(first, n, c, h));
    if (p.states16.p) st.store16(p.states16.at(first, n, c, h));
    load_rows<T, KD>(Ks, p.k, row, t0, len, hk, p.K, tid);
    load_vtile<T>(Vs, p.v, row, t0, len, h, v0, p.V, tid);
    if constexpr (!kStatesOnly) load_rows<T, KD>(Qs, p.q, row, t0, len, hk, p.K, tid);
    if constexpr (kChannel) load_gk<KD>(gc, p.d, row, t0, len, h, p.K, tid);
    cp_async_commit();
    cp_async_wait<0>();
    gate_cumsum<KD, kChannel>(gc, gs, p.d, row, t0, len, h, tid);  // barrier inside

    if constexpr (!kStatesOnly) {
      intra_scores<T, KD, kChannel>(Ps, Qs, Ks, gc, Xs, p.scale, tid);  // barrier inside
    }
    // Q -> scale Q exp(gc);  K -> K exp(gL - gc).
    for (int e = tid; e < kChunk * (KD / 2); e += kThreads) {
      const int r = e / (KD / 2), cc = (e - r * (KD / 2)) * 2;
      const float gl0 = gc_at<KD, kChannel>(gc, kChunk - 1, cc), gl1 = gc_at<KD, kChannel>(gc, kChunk - 1, cc + 1);
      const float g0 = gc_at<KD, kChannel>(gc, r, cc), g1 = gc_at<KD, kChannel>(gc, r, cc + 1);
      uint32_t* kp = reinterpret_cast<uint32_t*>(Ks + r * pitch16(KD) + cc);
      const float2 kk = unpack2<T>(*kp);
      *kp = pack2<T>(kk.x * __expf(gl0 - g0), kk.y * __expf(gl1 - g1));
      if constexpr (!kStatesOnly) {
        uint32_t* qp = reinterpret_cast<uint32_t*>(Qs + r * pitch16(KD) + cc);
        const float2 qq = unpack2<T>(*qp);
        *qp = pack2<T>(p.scale * qq.x * __expf(g0), p.scale * qq.y * __expf(g1));
      }
    }
    __syncthreads();

    if constexpr (!kStatesOnly) {  // O = Qg S + P V: warp w owns rows 16 (w % 4), columns 32 (w / 4)
      const int m0 = 16 * (warp & 3), n0 = 32 * (warp >> 2);
      float acc[1][4][4];
      zero_acc(acc);
      warp_mma<T, 1, 4, false, true>(acc, Qs, pitch16(KD), m0, Ss, pitch16(kVTile), n0, KD, lane);
      warp_mma<T, 1, 4, false, true>(acc, Ps, pitch16(64), m0, Vs, pitch16(kVTile), n0, kChunk, lane);
      for_acc_pairs(acc, m0, n0, lane, [&](int r, int cc, float* v) {
        if (r < len && v0 + cc < p.V) {
          *reinterpret_cast<uint32_t*>(p.o.row(row, t0 + r, h) + v0 + cc) = pack2<T>(v[0], v[1]);
        }
      });
    }
    // S <- diag(exp(gL)) S + Kd^T V.
    for_acc_pairs(S, sr0, sc0, lane, [&](int r, int, float* v) {
      const float a = __expf(gc_at<KD, kChannel>(gc, kChunk - 1, r));
      v[0] *= a;
      v[1] *= a;
    });
    warp_mma<T, ST::MT, ST::NT, true, true>(S, Ks, pitch16(KD), sr0, Vs, pitch16(kVTile), sc0, kChunk, lane);
    __syncthreads();  // every warp is done with Ss, Qs, Ks, Vs, gc
    if constexpr (!kStatesOnly) st.to_smem(Ss);
  }
  if (p.states.p) st.store(p.states.at(first, n, chunks, h));
  if (p.final_state) st.store(p.final_state + (static_cast<int64_t>(n) * p.H + h) * KV);
}

template <class T, int KD, bool kChannel, bool kStatesOnly>
void launch_fwd_kd(const FwdParams<T>& fp, cudaStream_t stream) {
  if (fp.N == 0 || fp.H == 0) return;
  constexpr int kSmem = FwdLayout<KD, kChannel>::kBytes;
  auto kernel = gla_fwd_kernel<T, KD, kChannel, kStatesOnly>;
  AK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const dim3 grid(static_cast<unsigned>(fp.N * ((fp.V + kVTile - 1) / kVTile)), static_cast<unsigned>(fp.H));
  kernel<<<grid, kThreads, kSmem, stream>>>(fp);
  ak::cuda::check_launch("gla_fwd_kernel");
}

}  // namespace ak::linear::cuda::gla

namespace ak::linear::cuda {

template <class T, int D, int Tile>
void GlaFwdChannel<T, D, Tile>::launch(const Args& a, cudaStream_t stream) {
  gla::launch_fwd_kd<T, D, true, false>(a, stream);
}
template <class T, int D, int Tile>
void GlaFwdScalar<T, D, Tile>::launch(const Args& a, cudaStream_t stream) {
  gla::launch_fwd_kd<T, D, false, false>(a, stream);
}
template <class T, int D, int Tile>
void GlaStatesChannel<T, D, Tile>::launch(const Args& a, cudaStream_t stream) {
  gla::launch_fwd_kd<T, D, true, true>(a, stream);
}
template <class T, int D, int Tile>
void GlaStatesScalar<T, D, Tile>::launch(const Args& a, cudaStream_t stream) {
  gla::launch_fwd_kd<T, D, false, true>(a, stream);
}

}  // namespace ak::linear::cuda
