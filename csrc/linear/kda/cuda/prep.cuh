// KDA's chunked forward, part 1 of 2: everything within a chunk that does not need the state, for
// all chunks at once (a block per chunk and value head). With gc the decay cumulated per key channel,
// gL its last row and beta per token:
//   L  = tril(diag(beta) Akk, -1),  Akk_ij = sum_c k_ic k_jc exp(gc_ic - gc_jc)   (pair_scores, fp32)
//   A  = (I + L)^-1                                                               (fp32 solve)
//   w  = A diag(beta) K exp(gc),  u = A diag(beta) V                              (the WY factors)
//   kd = K exp(gL - gc),  qd = scale Q exp(gc),  el = exp(gL),  p = the causal scale q k scores
// stored per (chunk, head) for the state pass (fwd.cuh). The decays always enter relative to an
// earlier row, so every exponent is <= 0 for gates <= 0.
#pragma once

#include "cuda/runtime.cuh"
#include "generated/linear_launchers.h"
#include "linear/common/solve.cuh"
#include "linear/gla/cuda/prep.cuh"
#include "linear/kda/cuda/params.h"
#include "linear/kda/cuda/scores.cuh"
#include "linear/kda/layouts.h"

namespace ak::linear::cuda::kda {

using namespace ::ak::linear::kda_layout;

using gla::store_tile;

template <class T, int KD>
__global__ void __launch_bounds__(kThreads, (PrepLayout<KD>::kMinBlocks)) kda_prep_kernel(const FwdParams<T> kp) {
  using Lay = PrepLayout<KD>;
  const gla::FwdParams<T>& p = kp.f;
  const ChunkOperands<T>& ops = kp.ops;
  extern __shared__ __align__(128) unsigned char smem[];
  T* Qs = reinterpret_cast<T*>(smem + Lay::kQ);
  T* Ks = reinterpret_cast<T*>(smem + Lay::kK);
  T* Xs = reinterpret_cast<T*>(smem + Lay::kX);
  T* Ps = reinterpret_cast<T*>(smem + Lay::kP);
  T* As = Ps;  // once the scores are stored
  float* LA = reinterpret_cast<float*>(smem + Lay::kLA);
  T* Vs = reinterpret_cast<T*>(smem + Lay::kLA);  // once A is in As
  float* gc = reinterpret_cast<float*>(smem + Lay::kGc);
  float* gs = reinterpret_cast<float*>(smem + Lay::kGs);
  float* bs = reinterpret_cast<float*>(smem + Lay::kBeta);

  const int g = blockIdx.x, h = blockIdx.y, hk = h / p.group;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int4 ci = p.map.chunk_of(g);
  const int row = ci.x, t0 = ci.y, len = ci.z;
  if (len == 0) return;  // an empty chunk past a packed call's live ones
  const int64_t slot = ops.slot(g, h);
  const int m0 = 16 * (warp & 3);

  gla::load_rows<T, KD>(Qs, p.q, row, t0, len, hk, p.K, tid);
  gla::load_rows<T, KD>(Ks, p.k, row, t0, len, hk, p.K, tid);
  gla::load_gk<KD>(gc, p.d, row, t0, len, h, p.K, tid);
  cp_async_commit();
  if (tid < kChunk) bs[tid] = tid < len ? kp.beta.at(row, t0 + tid, h) : 0.f;
  cp_async_wait<0>();
  gla::gate_cumsum<KD, true>(gc, gs, p.d, row, t0, len, h, tid);  // barrier inside

  pair_scores<T, KD, kLd>(LA, Ps, Qs, Ks, gc, Xs, p.scale, tid);  // Akk and P, barrier inside
  store_tile<T, 64>(ops.p + slot * Operands<KD>::kScores, kChunk, Ps, tid);
  for (int e = tid; e < kChunk * kChunk; e += kThreads) {
    const int i = e >> 6, j = e & 63;
    if (j < i) LA[i * kLd + j] *= bs[i];
  }
  __syncthreads();
  invert_unit_lower64<kLd, kThreads>(LA, tid);  // barrier inside
  if (ops.a32) {  // the backward's copy of A (zero above the diagonal)
    float* a = ops.a32 + slot * Operands<KD>::kScores;
    for (int e = tid; e < kChunk * kChunk; e += kThreads) {
      const int i = e >> 6, j = e & 63;
      a[e] = j <= i ? LA[i * kLd + j] : 0.f;
    }
  }

  // A as a 16-bit operand (zero above the diagonal) and X = diag(beta) K exp(gc); then K -> kd, Q -> qd
  // and el (decay_rows).
  for (int e = tid; e < kChunk * kChunk / 2; e += kThreads) {
    const int i = e >> 5, j = (e & 31) * 2;
    const float a0 = j <= i ? LA[i * kLd + j] : 0.f, a1 = j + 1 <= i ? LA[i * kLd + j + 1] : 0.f;
    *reinterpret_cast<uint32_t*>(As + i * pitch16(64) + j) = pack2<T>(a0, a1);
  }
  for (int e = tid; e < kChunk * (KD / 2); e += kThreads) {
    const int r = e / (KD / 2), cc = (e - r * (KD / 2)) * 2;
    const float* gr = gc + r * pitch_gc(KD) + cc;
    const float2 kk = unpack2<T>(*reinterpret_cast<const uint32_t*>(Ks + r * pitch16(KD) + cc));
    *reinterpret_cast<uint32_t*>(Xs + r * pitch16(KD) + cc) =
        pack2<T>(bs[r] * kk.x * __expf(gr[0]), bs[r] * kk.y * __expf(gr[1]));
  }
  __syncthreads();
  gla::decay_rows<T, KD, true>(Qs, Ks, gc, p.scale, ops.el + slot * KD, tid);  // barrier inside
  store_tile<T, KD>(ops.kd + slot * Operands<KD>::kRowsK, KD, Ks, tid);
  store_tile<T, KD>(ops.qd + slot * Operands<KD>::kRowsK, KD, Qs, tid);

  {  // w = A X: warp w owns rows 16 (w % 4), columns KD / 2 (w / 4); stored from the registers
    constexpr int NT = KD / 16;
    const int n0 = (KD / 2) * (warp >> 2);
    float acc[1][NT][4];
    zero_acc(acc);
    warp_mma<T, 1, NT, false, true>(acc, As, pitch16(64), m0, Xs, pitch16(KD), n0, kChunk, lane);
    T* w = ops.w + slot * Operands<KD>::kRowsK;
    for_acc_pairs(acc, m0, n0, lane, [&](int r, int cc, float* v) {
      *reinterpret_cast<uint32_t*>(w + r * KD + cc) = pack2<T>(v[0], v[1]);
    });
  }

  // u = A diag(beta) V, a V tile of 64 columns at a time (columns past V are zero).
  T* u = ops.u + slot * (int64_t{kChunk} * ops.Vp);
  const int n0 = 32 * (warp >> 2);
  for (int v0 = 0; v0 < ops.Vp; v0 += kVTile) {
    gla::load_vtile<T>(Vs, p.v, row, t0, len, h, v0, p.V, tid);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    for (int e = tid; e < kChunk * kVTile / 2; e += kThreads) {
      const int r = e >> 5, cc = (e & 31) * 2;
      uint32_t* vp = reinterpret_cast<uint32_t*>(Vs + r * pitch16(kVTile) + cc);
      const float2 vv = unpack2<T>(*vp);
      *vp = pack2<T>(bs[r] * vv.x, bs[r] * vv.y);
    }
    __syncthreads();
    float acc[1][4][4];
    zero_acc(acc);
    warp_mma<T, 1, 4, false, true>(acc, As, pitch16(64), m0, Vs, pitch16(kVTile), n0, kChunk, lane);
    for_acc_pairs(acc, m0, n0, lane, [&](int r, int cc, float* v) {
      *reinterpret_cast<uint32_t*>(u + static_cast<int64_t>(r) * ops.Vp + v0 + cc) = pack2<T>(v[0], v[1]);
    });
    __syncthreads();  // every warp is done with this V tile
  }
}

template <class T, int KD>
void launch_prep_kd(const FwdParams<T>& kp, cudaStream_t stream) {
  if (kp.chunks == 0 || kp.f.H == 0) return;
  constexpr int kSmem = PrepLayout<KD>::kBytes;
  auto kernel = kda_prep_kernel<T, KD>;
  AK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const dim3 grid(static_cast<unsigned>(kp.chunks), static_cast<unsigned>(kp.f.H));
  kernel<<<grid, kThreads, kSmem, stream>>>(kp);
  ak::cuda::check_launch("kda_prep_kernel");
}

}  // namespace ak::linear::cuda::kda

namespace ak::linear::cuda {

template <class T, int D, int Tile>
void KdaPrepChannel<T, D, Tile>::launch(const Args& a, cudaStream_t stream) {
  kda::launch_prep_kd<T, D>(a, stream);
}

}  // namespace ak::linear::cuda
