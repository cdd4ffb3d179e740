// The state pass of the split chunked forward, shared by the gated linear family and KDA (the delta
// rule's policy, kDelta). One block per (sequence, value head, V tile of 64) walks the sequence's
// chunks in order with the state S (KD x 64, fp32) in registers, reading the operands a prep kernel
// wrote for each chunk (params.h, ChunkOperands), the next chunk's copied in while this one computes:
//   Vn  = u - w S          (kDelta; else Vn = V, the chunk's values)
//   O   = qd S + p Vn      inter-chunk part + intra-chunk part
//   S  <- diag(el) S + kd^T Vn
// Products on tensor cores (mma.sync, 16-bit operands, fp32 accumulation); S feeds the products as a
// 16-bit copy in shared memory. The states before each chunk are stored when asked (p.states fp32,
// p.states16 16-bit), with the one after the last.
#pragma once

#include "cuda/runtime.cuh"
#include "generated/linear_launchers.h"
#include "linear/gla/cuda/stages.cuh"

namespace ak::linear::cuda::gla {

// Starts the copies of chunk c's operands into stage buffer `base`: the prep kernel's for slot
// `slot`, and the block's V tile (kDelta: of u; else of v, rows [t0, t0 + len)).
template <class T, int KD, bool kDelta>
__device__ __forceinline__ void issue_chunk(unsigned char* base, const FwdParams<T>& p, const ChunkOperands<T>& ops,
                                            int64_t slot, int row, int t0, int len, int h, int v0, int tid) {
  using Lay = PassLayout<KD, kDelta>;
  constexpr int kPer = KD / 8;
  const T* kd = ops.kd + slot * Operands<KD>::kRowsK;
  const T* qd = ops.qd + slot * Operands<KD>::kRowsK;
  for (int e = tid; e < kChunk * kPer; e += kThreads) {
    const int r = e / kPer, c = (e - r * kPer) * 8;
    const int at = r * pitch16(KD) + c;
    if constexpr (kDelta) {
      cp_async16(reinterpret_cast<T*>(base + Lay::kW) + at, ops.w + slot * Operands<KD>::kRowsK + r * KD + c);
    }
    cp_async16(reinterpret_cast<T*>(base + Lay::kKd) + at, kd + r * KD + c);
    cp_async16(reinterpret_cast<T*>(base + Lay::kQd) + at, qd + r * KD + c);
  }
  const T* pp = ops.p + slot * Operands<KD>::kScores;
  for (int e = tid; e < kChunk * 8; e += kThreads) {
    const int r = e >> 3, c = (e & 7) * 8;
    cp_async16(reinterpret_cast<T*>(base + Lay::kP) + r * pitch16(64) + c, pp + r * kChunk + c);
    if constexpr (kDelta) {
      const T* u = ops.u + slot * (int64_t{kChunk} * ops.Vp) + v0;
      cp_async16(reinterpret_cast<T*>(base + Lay::kU) + r * pitch16(kVTile) + c, u + static_cast<int64_t>(r) * ops.Vp + c);
    }
  }
  if constexpr (!kDelta) load_vtile<T>(reinterpret_cast<T*>(base + Lay::kU), p.v, row, t0, len, h, v0, p.V, tid);
  if (tid < KD / 4) cp_async16(reinterpret_cast<float*>(base + Lay::kEl) + 4 * tid, ops.el + slot * KD + 4 * tid);
}

template <class T, int KD, bool kDelta>
__device__ __forceinline__ void state_pass(const FwdParams<T>& p, const ChunkOperands<T>& ops) {
  using Lay = PassLayout<KD, kDelta>;
  using ST = StateTiles<KD>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* Ss = reinterpret_cast<T*>(smem + Lay::kS);

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
  const StateTile<KD> st{S, ST::row0(warp), ST::col0(warp), lane, p.K, p.V, v0};
  if (p.initial_state) st.load(p.initial_state + (static_cast<int64_t>(n) * p.H + h) * KV);
  st.to_smem(Ss);
  if (chunks > 0) {
    issue_chunk<T, KD, kDelta>(smem, p, ops, ops.slot(first, h), row, begin, min(kChunk, end - begin), h, v0, tid);
  }
  cp_async_commit();

  for (int c = 0; c < chunks; ++c) {
    const int t0 = begin + c * kChunk, len = min(kChunk, end - t0);
    if (p.states.p) st.store(p.states.at(first, n, c, h));
    if (p.states16.p) st.store16(p.states16.at(first, n, c, h));
    if (c + 1 < chunks) {
      const int t1 = t0 + kChunk;
      issue_chunk<T, KD, kDelta>(smem + ((c + 1) & 1) * Lay::kStage, p, ops, ops.slot(first + c + 1, h), row, t1,
                                 min(kChunk, end - t1), h, v0, tid);
    }
    cp_async_commit();
    cp_async_wait<1>();  // this chunk's operands have landed (the next chunk's may still be in flight)
    __syncthreads();
    unsigned char* base = smem + (c & 1) * Lay::kStage;
    const T* Kd = reinterpret_cast<const T*>(base + Lay::kKd);
    const T* Qd = reinterpret_cast<const T*>(base + Lay::kQd);
    const T* Us = reinterpret_cast<const T*>(base + Lay::kU);
    const T* Ps = reinterpret_cast<const T*>(base + Lay::kP);
    const float* el = reinterpret_cast<const float*>(base + Lay::kEl);
    const T* Vn = Us;

    if constexpr (kDelta) {  // Vn = u - w S
      T* Vc = reinterpret_cast<T*>(smem + Lay::kVn);
      const T* Ws = reinterpret_cast<const T*>(base + Lay::kW);
      float acc[1][4][4];
      for_acc_pairs(acc, m0, n0, lane, [&](int r, int cc, float* v) {
        const float2 uu = unpack2<T>(*reinterpret_cast<const uint32_t*>(Us + r * pitch16(kVTile) + cc));
        v[0] = uu.x;
        v[1] = uu.y;
      });
      warp_mma<T, 1, 4, false, true, true>(acc, Ws, pitch16(KD), m0, Ss, pitch16(kVTile), n0, KD, lane);
      T* vn_out = ops.vn ? ops.vn + ops.slot(first + c, h) * (int64_t{kChunk} * ops.Vp) + v0 : nullptr;
      for_acc_pairs(acc, m0, n0, lane, [&](int r, int cc, float* v) {
        const uint32_t packed = pack2<T>(v[0], v[1]);
        *reinterpret_cast<uint32_t*>(Vc + r * pitch16(kVTile) + cc) = packed;
        if (vn_out) *reinterpret_cast<uint32_t*>(vn_out + static_cast<int64_t>(r) * ops.Vp + cc) = packed;
      });
      __syncthreads();
      Vn = Vc;
    }
    if (p.o.p) {  // O = qd S + p Vn (skipped by the backward's recompute)
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
  if (p.states.p) st.store(p.states.at(first, n, chunks, h));
  if (p.states16.p) st.store16(p.states16.at(first, n, chunks, h));
  if (p.final_state) st.store(p.final_state + (static_cast<int64_t>(n) * p.H + h) * KV);
}

template <class T, int KD>
__global__ void __launch_bounds__(kThreads, 1) gla_pass_kernel(const SplitParams<T> sp) {
  state_pass<T, KD, false>(sp.f, sp.ops);
}

// Launches a state pass kernel: a block per (sequence, V tile) x value head.
template <class T, int KD, bool kDelta, class Params>
void launch_pass(void (*kernel)(Params), const Params& args, const FwdParams<T>& fp, const char* name,
                 cudaStream_t stream) {
  if (fp.N == 0 || fp.H == 0) return;
  constexpr int kSmem = PassLayout<KD, kDelta>::kBytes;
  AK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const dim3 grid(static_cast<unsigned>(fp.N * ((fp.V + kVTile - 1) / kVTile)), static_cast<unsigned>(fp.H));
  kernel<<<grid, kThreads, kSmem, stream>>>(args);
  ak::cuda::check_launch(name);
}

}  // namespace ak::linear::cuda::gla

namespace ak::linear::cuda {

template <class T, int D, int Tile>
void GlaPass<T, D, Tile>::launch(const Args& a, cudaStream_t stream) {
  gla::launch_pass<T, D, false>(gla::gla_pass_kernel<T, D>, a, a.f, "gla_pass_kernel", stream);
}

}  // namespace ak::linear::cuda
