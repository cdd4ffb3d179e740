// Fast backward, stage "dstates" (the state pass backwards): one block of 8 warps per sequence, value head and
// slice of VS in {32, 64, 128} state columns, every input tile double-buffered (the next chunk's tiles
// are fetched during the whole of this chunk's work; at D = 256 two sets do not fit in shared memory:
// one set, the next chunk's fetched once this chunk's products are done). Per chunk c, last to first (dh = dh' after the
// chunk, stored before the update):
//   dv_new = diag(e^(gl - gc)) K dh + P^T dO                   (stored; 64 x VS, warp = 16 rows x VS/2)
//   dh    <- e^gl dh + (scale diag(e^gc) Q)^T dO - w^T dv_new  (registers; warp = 16 state rows x VS or
//                                                                 VS/2 at D = 64)
// The row factor scale e^gc of Q is applied to Q's mma fragments as they are loaded (no pass over the
// tile). The last dh is d_initial_state.
#pragma once

#include "cuda/runtime.cuh"
#include "linear/common/warp_tiles.cuh"
#include "linear/delta/bwd/fast.cuh"
#include "generated/linear_launchers.h"

namespace ak::linear::cuda::bwd {
namespace dstates8_detail {

constexpr int kC = kFastC;
constexpr int kThreads = 256;

template <class T, int D, int VS>
using Tiles = DStatesTiles<T, D, VS>;
template <class T, int D, int VS>
using Smem = DStatesSmem<T, D, VS>;

template <class T>
__device__ __forceinline__ uint32_t scale_pair(uint32_t x, float2 f) {
  const float2 v = unpack2<T>(x);
  return pack2<T>(v.x * f.x, v.y * f.y);
}

template <class T, int D, int VS>
__global__ void __launch_bounds__(kThreads, D == 64 ? 2 : 1) fast_dstates8(Problem p, FastWork<T> w) {
  constexpr int LD = D + 8, LV = VS + 8, LC = kC + 8, ST = dstates_sets<D>();
  // State tile D x VS: RB row blocks of 16 x MB rows (MB = 2 at D = 256, else 1) x CG column groups
  // over the 8 warps.
  constexpr int MB = D / 16 > 8 ? D / 128 : 1, RB = D / (16 * MB), CG = 8 / RB, VC = VS / CG, NS = VC / 8;
  // dv_new tile 64 x VS: 4 row blocks x 2 column halves.
  constexpr int NU = VS / 16;
  static_assert(NS % 2 == 0 && NU % 2 == 0, "n8 tiles come in pairs");
  extern __shared__ __align__(16) unsigned char smraw[];
  Smem<T, D, VS>& sm = *reinterpret_cast<Smem<T, D, VS>*>(smraw);

  // Block x = sequence * (D / VS) + slice (gridDim.z would cap the sequences at 65535).
  const int n = blockIdx.x / (D / VS);
  const int vs = (blockIdx.x % (D / VS)) * VS, h = blockIdx.y, hk = h / p.group;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gq = lane >> 2, q4 = lane & 3;
  const int rb = warp % RB, cg = warp / RB;  // state rows 16 MB rb .., columns cg VC ..
  const int sm0 = 16 * MB * rb;
  const int ub = warp & 3, uh = warp >> 2;   // dv_new rows 16 ub, columns uh VS/2
  const int4 si = p.map.seq_of(n);
  const int nch = (si.z - si.y + kC - 1) / kC;
  const int64_t P = p.padded();
  const int64_t state_base = (static_cast<int64_t>(n) * p.H + h) * D * D;
  float dh[MB][NS][4];
#pragma unroll
  for (int mb = 0; mb < MB; ++mb)
#pragma unroll
    for (int nt = 0; nt < NS; ++nt)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int d = sm0 + 16 * mb + gq + (r >= 2 ? 8 : 0), e = vs + cg * VC + 8 * nt + 2 * q4 + (r & 1);
        dh[mb][nt][r] = p.d_final_state != nullptr ? p.d_final_state[state_base + d * D + e] : 0.f;
      }

  auto load = [&](int c, Tiles<T, D, VS>& b) {
    const int gi = si.w + c, t0 = si.y + c * kC;
    const int len = min(kC, si.z - t0);
    const int64_t row = static_cast<int64_t>(h) * P + static_cast<int64_t>(gi) * kC;
    tile_load<T>(b.K, LD, static_cast<const T*>(p.k.p) + p.k.offset(si.x, t0, hk), p.k.st, kC, len, D, tid,
                 kThreads);
    tile_load<T>(b.P, LC, w.P + row * kC, kC, kC, kC, kC, tid, kThreads);
    tile_load<T>(b.dO, LV, static_cast<const T*>(p.dout.p) + p.dout.offset(si.x, t0, h) + vs, p.dout.st, kC, len,
                 VS, tid, kThreads);
    tile_load<T>(b.Q, LD, static_cast<const T*>(p.q.p) + p.q.offset(si.x, t0, hk), p.q.st, kC, len, D, tid,
                 kThreads);
    tile_load<T>(b.W, LD, w.W + row * D, D, kC, kC, D, tid, kThreads);
    if (tid < kC / 4) cp_async16(b.gc + 4 * tid, w.gc + row + 4 * tid);
  };

  if (nch > 0) load(nch - 1, sm.in[0]);
  cp_async_commit();
  for (int it = 0; it < nch; ++it) {
    const int c = nch - 1 - it;
    Tiles<T, D, VS>& b = sm.in[it % ST];
    cp_async_wait<0>();
    __syncthreads();  // this chunk's tiles landed; every warp is done with the other buffer
    if (ST == 2 && c > 0) load(c - 1, sm.in[(it + 1) % ST]);
    cp_async_commit();
    const int64_t row = static_cast<int64_t>(h) * P + static_cast<int64_t>(si.w + c) * kC;
    const float gl = b.gc[kC - 1];
    if (tid < kC) sm.qf[tid] = p.scale * __expf(b.gc[tid]);
    store_acc<T, MB, NS>(dh, sm.dh, LV, sm0, cg * VC, lane);
    __syncthreads();
    {
      tile_store<T>(w.dHs + (static_cast<int64_t>(h) * p.NCt + si.w + c) * D * D + vs, D, sm.dh, LV, D, VS, tid,
                    kThreads);
    }

    {  // dv_new = diag(e^(gl - gc)) K dh + P^T dO
      float u[1][NU][4];
      zero_acc(u);
      warp_mma<T, 1, NU, false, true>(u, b.K, LD, 16 * ub, sm.dh, LV, uh * (VS / 2), D, lane);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float dec = __expf(gl - b.gc[16 * ub + gq + 8 * half]);
#pragma unroll
        for (int nt = 0; nt < NU; ++nt) {
          u[0][nt][2 * half] *= dec;
          u[0][nt][2 * half + 1] *= dec;
        }
      }
      warp_mma<T, 1, NU, true, true>(u, b.P, LC, 16 * ub, b.dO, LV, uh * (VS / 2), kC, lane);
      // To shared memory, then to the workspace.
      store_acc(u, sm.dU, LV, 16 * ub, uh * (VS / 2), lane);
      store_acc(u, w.dU + row * D + vs, D, 16 * ub, uh * (VS / 2), lane);
    }
    __syncthreads();  // dv_new and the row factors are in shared memory

    // dh <- e^gl dh + (diag(qf) Q)^T dO - w^T dv_new
    const float eg = __expf(gl);
#pragma unroll
    for (int mb = 0; mb < MB; ++mb)
#pragma unroll
      for (int nt = 0; nt < NS; ++nt)
#pragma unroll
        for (int r = 0; r < 4; ++r) dh[mb][nt][r] *= eg;
    {  // + (diag(qf) Q)^T dO
#pragma unroll
      for (int k0 = 0; k0 < kC; k0 += 16) {
        const float2 f0 = *reinterpret_cast<const float2*>(sm.qf + k0 + 2 * q4);
        const float2 f1 = *reinterpret_cast<const float2*>(sm.qf + k0 + 8 + 2 * q4);
        uint32_t a[MB][4];
#pragma unroll
        for (int mb = 0; mb < MB; ++mb) {
          load_a_t<T>(a[mb], b.Q, LD, sm0 + 16 * mb, k0, lane);
          a[mb][0] = scale_pair<T>(a[mb][0], f0);
          a[mb][1] = scale_pair<T>(a[mb][1], f0);
          a[mb][2] = scale_pair<T>(a[mb][2], f1);
          a[mb][3] = scale_pair<T>(a[mb][3], f1);
        }
#pragma unroll
        for (int np = 0; np < NS / 2; ++np) {
          uint32_t bb[4];
          load_b_kn<T>(bb, b.dO, LV, cg * VC + 16 * np, k0, lane);
#pragma unroll
          for (int mb = 0; mb < MB; ++mb) {
            mma16816<T>(dh[mb][2 * np], a[mb], bb[0], bb[1]);
            mma16816<T>(dh[mb][2 * np + 1], a[mb], bb[2], bb[3]);
          }
        }
      }
    }
    warp_mma<T, MB, NS, true, true, true>(dh, b.W, LD, sm0, sm.dU, LV, cg * VC, kC, lane);
    if constexpr (ST == 1) {  // one set of tiles: the next chunk's once every warp is done with these
      __syncthreads();
      if (c > 0) load(c - 1, sm.in[0]);
      cp_async_commit();
    }
  }
  if (p.d_initial_state != nullptr) {
    store_acc_f32<MB, NS>(dh, p.d_initial_state + state_base, D, sm0, vs + cg * VC, lane);
  }
}

}  // namespace dstates8_detail
}  // namespace ak::linear::cuda::bwd

namespace ak::linear::cuda {

template <class T, int D, int VS>
void BwdDStates<T, D, VS>::launch(const Args& a, cudaStream_t s) {
  const bwd::Problem& p = a.p;
  constexpr size_t smem = bwd::dstates_smem<D, VS>();
  auto kernel = bwd::dstates8_detail::fast_dstates8<T, D, VS>;
  AK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const int64_t blocks = static_cast<int64_t>(D / VS) * p.N;
  require(blocks < (int64_t{1} << 31), "delta_rule_bwd on CUDA: too many sequences for the dstates pass");
  kernel<<<dim3(static_cast<unsigned>(blocks), p.H), bwd::dstates8_detail::kThreads, smem, s>>>(p, a.w);
  ak::cuda::check_launch("delta_bwd fast: dstates");
}

}  // namespace ak::linear::cuda
