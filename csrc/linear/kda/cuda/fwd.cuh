// KDA's chunked forward, part 2 of 2: the state pass. One block per (sequence, value head, V tile of
// 64) walks the sequence's chunks in order with the state S (KD x 64, fp32) in registers, reading the
// operands the prep kernel (prep.cuh) wrote for each chunk, the next chunk's copied in while this one
// computes:
//   Vn  = u - w S                      the values after the delta rule's correction
//   O   = qd S + p Vn                  inter-chunk part + intra-chunk part
//   S  <- diag(el) S + kd^T Vn
// Products on tensor cores (mma.sync, 16-bit operands, fp32 accumulation); S feeds the products as a
// 16-bit copy in shared memory.
#pragma once

#include "cuda/runtime.cuh"
#include "generated/linear_launchers.h"
#include "linear/gla/cuda/stages.cuh"
#include "linear/kda/cuda/params.h"
#include "linear/kda/layouts.h"

namespace ak::linear::cuda::kda {

using namespace ::ak::linear::kda_layout;

// Starts the copy of chunk slot `slot`'s operands (the block's V tile of u) into stage buffer `base`.
template <class T, int KD>
__device__ __forceinline__ void issue_chunk(unsigned char* base, const ChunkOperands<T>& ops, int64_t slot, int v0,
                                            int tid) {
  using Lay = StateLayout<KD>;
  constexpr int kPer = KD / 8;
  const T* w = ops.w + slot * Operands<KD>::kRowsK;
  const T* kd = ops.kd + slot * Operands<KD>::kRowsK;
  const T* qd = ops.qd + slot * Operands<KD>::kRowsK;
  for (int e = tid; e < kChunk * kPer; e += kThreads) {
    const int r = e / kPer, c = (e - r * kPer) * 8;
    const int at = r * pitch16(KD) + c;
    cp_async16(reinterpret_cast<T*>(base + Lay::kW) + at, w + r * KD + c);
    cp_async16(reinterpret_cast<T*>(base + Lay::kKd) + at, kd + r * KD + c);
    cp_async16(reinterpret_cast<T*>(base + Lay::kQd) + at, qd + r * KD + c);
  }
  const T* u = ops.u + slot * (int64_t{kChunk} * ops.Vp) + v0;
  const T* pp = ops.p + slot * Operands<KD>::kScores;
  for (int e = tid; e < kChunk * 8; e += kThreads) {
    const int r = e >> 3, c = (e & 7) * 8;
    cp_async16(reinterpret_cast<T*>(base + Lay::kU) + r * pitch16(kVTile) + c, u + static_cast<int64_t>(r) * ops.Vp + c);
    cp_async16(reinterpret_cast<T*>(base + Lay::kP) + r * pitch16(64) + c, pp + r * kChunk + c);
  }
  if (tid < KD / 4) cp_async16(reinterpret_cast<float*>(base + Lay::kEl) + 4 * tid, ops.el + slot * KD + 4 * tid);
}

template <class T, int KD>
__global__ void __launch_bounds__(kThreads, 1) kda_fwd_kernel(const FwdParams<T> kp) {
  using Lay = StateLayout<KD>;
  using ST = gla::StateTiles<KD>;
  const gla::FwdParams<T>& p = kp.f;
  extern __shared__ __align__(128) unsigned char smem[];
  T* Ss = reinterpret_cast<T*>(smem + Lay::kS);
  T* Vn = reinterpret_cast<T*>(smem + Lay::kVn);

  const int tiles = (p.V + kVTile - 1) / kVTile;
  const int n = blockIdx.x / tiles, v0 = (blockIdx.x - n * tiles) * kVTile, h = blockIdx.y;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  int row, begin, end, first;
  p.map.sequence(n, row, begin, end, first);
  const int chunks = (end - begin + kChunk - 1) / kChunk;
  const int64_t KV = static_cast<int64_t>(p.K) * p.V;
  // The output-shaped products (64 x 64): warp w owns rows 16 (w % 4), columns 32 (w / 4).
  const int m0 = 16 * (warp & 3), n0 = 32 * (warp >> 2);

  float S[ST::MT][ST::NT][4];
  zero_acc(S);
  const gla::StateTile<KD> st{S, ST::row0(warp), ST::col0(warp), lane, p.K, p.V, v0};
  if (p.initial_state) st.load(p.initial_state + (static_cast<int64_t>(n) * p.H + h) * KV);
  st.to_smem(Ss);
  if (chunks > 0) issue_chunk<T, KD>(smem, kp.ops, kp.ops.slot(first, h), v0, tid);
  cp_async_commit();

  for (int c = 0; c < chunks; ++c) {
    const int t0 = begin + c * kChunk, len = min(kChunk, end - t0);
    if (c + 1 < chunks) {
      issue_chunk<T, KD>(smem + ((c + 1) & 1) * Lay::kStage, kp.ops, kp.ops.slot(first + c + 1, h), v0, tid);
    }
    cp_async_commit();
    cp_async_wait<1>();  // this chunk's operands have landed (the next chunk's may still be in flight)
    __syncthreads();
    unsigned char* base = smem + (c & 1) * Lay::kStage;
    const T* Ws = reinterpret_cast<const T*>(base + Lay::kW);
    const T* Kd = reinterpret_cast<const T*>(base + Lay::kKd);
    const T* Qd = reinterpret_cast<const T*>(base + Lay::kQd);
    const T* Us = reinterpret_cast<const T*>(base + Lay::kU);
    const T* Ps = reinterpret_cast<const T*>(base + Lay::kP);
    const float* el = reinterpret_cast<const float*>(base + Lay::kEl);

    {  // Vn = u - w S
      float acc[1][4][4];
      for_acc_pairs(acc, m0, n0, lane, [&](int r, int cc, float* v) {
        const float2 uu = unpack2<T>(*reinterpret_cast<const uint32_t*>(Us + r * pitch16(kVTile) + cc));
        v[0] = uu.x;
        v[1] = uu.y;
      });
      warp_mma<T, 1, 4, false, true, true>(acc, Ws, pitch16(KD), m0, Ss, pitch16(kVTile), n0, KD, lane);
      for_acc_pairs(acc, m0, n0, lane, [&](int r, int cc, float* v) {
        *reinterpret_cast<uint32_t*>(Vn + r * pitch16(kVTile) + cc) = pack2<T>(v[0], v[1]);
      });
    }
    __syncthreads();
    {  // O = qd S + p Vn
      float acc[1][4][4];
      zero_acc(acc);
      warp_mma<T, 1, 4, false, true>(acc, Qd, pitch16(KD), m0, Ss, pitch16(kVTile), n0, KD, lane);
      warp_mma<T, 1, 4, false, true>(acc, Ps, pitch16(64), m0, Vn, pitch16(kVTile), n0, kChunk, lane);
      for_acc_pairs(acc, m0, n0, lane, [&](int r, int cc, float* v) {
        if (r < len && v0 + cc < p.V) {
          *reinterpret_cast<uint32_t*>(p.o.row(row, t0 + r, h) + v0 + cc) = pack2<T>(v[0], v[1]);
        }
      });
    }
    // S <- diag(el) S + kd^T Vn.
    for_acc_pairs(S, st.r0, st.c0, lane, [&](int r, int, float* v) {
      v[0] *= el[r];
      v[1] *= el[r];
    });
    warp_mma<T, ST::MT, ST::NT, true, true>(S, Kd, pitch16(KD), st.r0, Vn, pitch16(kVTile), st.c0, kChunk, lane);
    __syncthreads();  // every warp is done with Ss, Vn and this chunk's stage
    st.to_smem(Ss);
  }
  cp_async_wait<0>();
  if (p.final_state) st.store(p.final_state + (static_cast<int64_t>(n) * p.H + h) * KV);
}

template <class T, int KD>
void launch_fwd_kd(const FwdParams<T>& kp, cudaStream_t stream) {
  const gla::FwdParams<T>& fp = kp.f;
  if (fp.N == 0 || fp.H == 0) return;
  constexpr int kSmem = StateLayout<KD>::kBytes;
  auto kernel = kda_fwd_kernel<T, KD>;
  AK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const dim3 grid(static_cast<unsigned>(fp.N * ((fp.V + kVTile - 1) / kVTile)), static_cast<unsigned>(fp.H));
  kernel<<<grid, kThreads, kSmem, stream>>>(kp);
  ak::cuda::check_launch("kda_fwd_kernel");
}

}  // namespace ak::linear::cuda::kda

namespace ak::linear::cuda {

template <class T, int D, int Tile>
void KdaFwdChannel<T, D, Tile>::launch(const Args& a, cudaStream_t stream) {
  kda::launch_fwd_kd<T, D>(a, stream);
}

}  // namespace ak::linear::cuda
