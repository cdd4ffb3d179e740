// KDA's backward, the reverse state pass: one block per (sequence, value head, V tile of 64) walks the
// chunks from the last with dS (the gradient of the state after the chunk, KD x 64, fp32) in
// registers. Per chunk, on the forward's operands (prep.cuh, recomputed):
//   dVn = p^T dO + kd dS                   the corrected values' gradient (stored for grads.cuh)
//   dS <- diag(el) dS + qd^T dO - w^T dVn  the gradient of the state before the chunk
// dS after each chunk is stored 16-bit (slot c) for the gradient kernel; after the first chunk's, dS is
// the initial state's gradient.
#pragma once

#include "cuda/runtime.cuh"
#include "generated/linear_launchers.h"
#include "linear/gla/cuda/stages.cuh"
#include "linear/kda/cuda/params.h"
#include "linear/kda/layouts.h"

namespace ak::linear::cuda::kda {

using namespace ::ak::linear::kda_layout;

template <class T, int KD>
__global__ void __launch_bounds__(kThreads, (KD == 64 ? 2 : 1)) kda_dstates_kernel(const BwdParams<T> bp) {
  using Lay = DStatesLayout<KD>;
  using ST = gla::StateTiles<KD>;
  const gla::FwdParams<T>& p = bp.f.f;
  const ChunkOperands<T>& ops = bp.f.ops;
  extern __shared__ __align__(128) unsigned char smem[];
  T* Kd = reinterpret_cast<T*>(smem + Lay::kKd);
  T* Qd = reinterpret_cast<T*>(smem + Lay::kQd);
  T* Ws = reinterpret_cast<T*>(smem + Lay::kW);
  T* Ps = reinterpret_cast<T*>(smem + Lay::kP);
  T* Os = reinterpret_cast<T*>(smem + Lay::kO);
  T* DVn = reinterpret_cast<T*>(smem + Lay::kDVn);
  T* DSs = reinterpret_cast<T*>(smem + Lay::kDS);
  float* el = reinterpret_cast<float*>(smem + Lay::kEl);

  const int tiles = (p.V + kVTile - 1) / kVTile;
  const int n = blockIdx.x / tiles, v0 = (blockIdx.x - n * tiles) * kVTile, h = blockIdx.y;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  int row, begin, end, first;
  p.map.sequence(n, row, begin, end, first);
  const int chunks = (end - begin + kChunk - 1) / kChunk;
  const int64_t KV = static_cast<int64_t>(p.K) * p.V;
  const int m0 = 16 * (warp & 3), n0 = 32 * (warp >> 2);

  float S[ST::MT][ST::NT][4];
  zero_acc(S);
  const gla::StateTile<KD> st{S, ST::row0(warp), ST::col0(warp), lane, p.K, p.V, v0};
  if (bp.d_final_state) st.load(bp.d_final_state + (static_cast<int64_t>(n) * p.H + h) * KV);

  for (int c = chunks - 1; c >= 0; --c) {
    const int t0 = begin + c * kChunk, len = min(kChunk, end - t0);
    const int64_t slot = ops.slot(first + c, h);
    st.store16(bp.dstates.at(first, n, c, h));
    st.to_smem(DSs);
    constexpr int kPer = KD / 8;
    for (int e = tid; e < kChunk * kPer; e += kThreads) {
      const int r = e / kPer, cc = (e - r * kPer) * 8;
      const int at = r * pitch16(KD) + cc;
      const int64_t src = slot * Operands<KD>::kRowsK + r * KD + cc;
      cp_async16(Kd + at, ops.kd + src);
      cp_async16(Qd + at, ops.qd + src);
      cp_async16(Ws + at, ops.w + src);
    }
    for (int e = tid; e < kChunk * 8; e += kThreads) {
      const int r = e >> 3, cc = (e & 7) * 8;
      cp_async16(Ps + r * pitch16(64) + cc, ops.p + slot * Operands<KD>::kScores + r * kChunk + cc);
    }
    gla::load_vtile<T>(Os, bp.dout, row, t0, len, h, v0, p.V, tid);
    if (tid < KD / 4) cp_async16(el + 4 * tid, ops.el + slot * KD + 4 * tid);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    {  // dVn = p^T dO + kd dS
      float acc[1][4][4];
      zero_acc(acc);
      warp_mma<T, 1, 4, true, true>(acc, Ps, pitch16(64), m0, Os, pitch16(kVTile), n0, kChunk, lane);
      warp_mma<T, 1, 4, false, true>(acc, Kd, pitch16(KD), m0, DSs, pitch16(kVTile), n0, KD, lane);
      T* dvn = ops.dvn + slot * (int64_t{kChunk} * ops.Vp) + v0;
      for_acc_pairs(acc, m0, n0, lane, [&](int r, int cc, float* v) {
        const uint32_t packed = pack2<T>(v[0], v[1]);
        *reinterpret_cast<uint32_t*>(DVn + r * pitch16(kVTile) + cc) = packed;
        *reinterpret_cast<uint32_t*>(dvn + static_cast<int64_t>(r) * ops.Vp + cc) = packed;
      });
    }
    __syncthreads();
    // dS <- diag(el) dS + qd^T dO - w^T dVn.
    for_acc_pairs(S, st.r0, st.c0, lane, [&](int r, int, float* v) {
      v[0] *= el[r];
      v[1] *= el[r];
    });
    warp_mma<T, ST::MT, ST::NT, true, true>(S, Qd, pitch16(KD), st.r0, Os, pitch16(kVTile), st.c0, kChunk, lane);
    warp_mma<T, ST::MT, ST::NT, true, true, true>(S, Ws, pitch16(KD), st.r0, DVn, pitch16(kVTile), st.c0, kChunk,
                                                  lane);
    __syncthreads();  // every warp is done with this chunk's tiles and the dS copy
  }
  if (bp.d_initial_state) st.store(bp.d_initial_state + (static_cast<int64_t>(n) * p.H + h) * KV);
}

template <class T, int KD>
void launch_dstates_kd(const BwdParams<T>& bp, cudaStream_t stream) {
  const gla::FwdParams<T>& fp = bp.f.f;
  if (fp.N == 0 || fp.H == 0) return;
  constexpr int kSmem = DStatesLayout<KD>::kBytes;
  auto kernel = kda_dstates_kernel<T, KD>;
  AK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const dim3 grid(static_cast<unsigned>(fp.N * ((fp.V + kVTile - 1) / kVTile)), static_cast<unsigned>(fp.H));
  kernel<<<grid, kThreads, kSmem, stream>>>(bp);
  ak::cuda::check_launch("kda_dstates_kernel");
}

}  // namespace ak::linear::cuda::kda

namespace ak::linear::cuda {

template <class T, int D, int Tile>
void KdaDStatesChannel<T, D, Tile>::launch(const Args& a, cudaStream_t stream) {
  kda::launch_dstates_kd<T, D>(a, stream);
}

}  // namespace ak::linear::cuda
