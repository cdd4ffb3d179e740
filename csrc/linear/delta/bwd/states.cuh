// Fast backward, stage "states" (the forward's state pass again): one block of 4 warps per sequence,
// value head and slice of VS state columns. The state slice lives in the warps' accumulators, warp w
// owning state rows w D/4 .. (w + 1) D/4 - 1. Per chunk, first to last:
//   h_c before the chunk (stored), v_new = u - w h (stored over u),
//   h <- e^gl h + K^T diag(e^(gl - gc)) v_new
#pragma once

#include "cuda/runtime.cuh"
#include "linear/common/warp_tiles.cuh"
#include "linear/delta/bwd/fast.cuh"
#include "generated/linear_launchers.h"

namespace ak::linear::cuda::bwd {
namespace states_detail {

constexpr int kC = kFastC;
constexpr int kThreads = 128;

template <class T, int D, int VS>
__global__ void __launch_bounds__(kThreads) fast_states(Problem p, FastWork<T> w) {
  constexpr int LD = D + 8, LV = VS + 8, MT = D / 64, NT = VS / 8;
  extern __shared__ __align__(16) unsigned char smraw[];
  StatesBuf<T, D, VS>* buf = reinterpret_cast<StatesBuf<T, D, VS>*>(smraw);
  T* hs = reinterpret_cast<T*>(buf + 2);  // [D][LV]

  // Block x = sequence * (D / VS) + slice (gridDim.z would cap the sequences at 65535).
  const int n = blockIdx.x / (D / VS);
  const int vs = (blockIdx.x % (D / VS)) * VS, h = blockIdx.y, hk = h / p.group;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gq = lane >> 2, q4 = lane & 3;
  const int4 si = p.map.seq_of(n);
  const int nch = (si.z - si.y + kC - 1) / kC;
  const int64_t P = p.padded();
  const int hm0 = warp * (D / 4);  // first state row of this warp
  float hacc[MT][NT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int d = hm0 + 16 * mt + gq + (r >= 2 ? 8 : 0), e = vs + 8 * nt + 2 * q4 + (r & 1);
        hacc[mt][nt][r] = p.initial_state != nullptr
                              ? p.initial_state[((static_cast<int64_t>(n) * p.H + h) * D + d) * D + e]
                              : 0.f;
      }

  auto load = [&](int c, StatesBuf<T, D, VS>& b) {
    const int gi = si.w + c, t0 = si.y + c * kC;
    const int len = min(kC, si.z - t0);
    const int64_t row = static_cast<int64_t>(h) * P + static_cast<int64_t>(gi) * kC;
    tile_load<T>(b.W, LD, w.W + row * D, D, kC, kC, D, tid, kThreads);
    tile_load<T>(b.K, LD, static_cast<const T*>(p.k.p) + p.k.offset(si.x, t0, hk), p.k.st, kC, len, D, tid,
                 kThreads);
    tile_load<T>(b.U, LV, w.U + row * D + vs, D, kC, kC, VS, tid, kThreads);
    if (tid < kC / 4) cp_async16(b.gc + 4 * tid, w.gc + row + 4 * tid);
  };

  if (nch > 0) load(0, buf[0]);
  cp_async_commit();
  for (int c = 0; c < nch; ++c) {
    StatesBuf<T, D, VS>& b = buf[c & 1];
    if (c + 1 < nch) load(c + 1, buf[(c + 1) & 1]);
    cp_async_commit();
    cp_async_wait<1>();
    const int gi = si.w + c;
    const int64_t row = static_cast<int64_t>(h) * P + static_cast<int64_t>(gi) * kC;
    store_acc<T, MT, NT>(hacc, hs, LV, hm0, 0, lane);
    __syncthreads();
    {
      tile_store<T>(w.Hs + (static_cast<int64_t>(h) * p.NCt + gi) * D * D + vs, D, hs, LV, D, VS, tid,
                    kThreads);
    }

    // v_new = u - w h; the decayed copy feeds the state update.
    float uacc[1][NT][4];
    zero_acc(uacc);
    warp_mma<T, 1, NT, false, true>(uacc, b.W, LD, 16 * warp, hs, LV, 0, D, lane);
    const float gl = b.gc[kC - 1];
    // u is read in one pass and v_new written in another, so the shared-memory loads batch.
    uint32_t vn[2][NT];
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        vn[half][nt] = *reinterpret_cast<const uint32_t*>(b.U + (16 * warp + gq + 8 * half) * LV + 8 * nt + 2 * q4);
      }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int i = 16 * warp + gq + 8 * half;
      const float dec = __expf(gl - b.gc[i]);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const float2 u2 = unpack2<T>(vn[half][nt]);
        const float x0 = u2.x - uacc[0][nt][2 * half], x1 = u2.y - uacc[0][nt][2 * half + 1];
        vn[half][nt] = pack2<T>(x0, x1);
        *reinterpret_cast<uint32_t*>(b.U + i * LV + 8 * nt + 2 * q4) = pack2<T>(x0 * dec, x1 * dec);
      }
    }
    {
#pragma unroll
      for (int half = 0; half < 2; ++half)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const int i = 16 * warp + gq + 8 * half, e = 8 * nt + 2 * q4;
          *reinterpret_cast<uint32_t*>(w.U + (row + i) * D + vs + e) = vn[half][nt];
        }
    }
    __syncthreads();
    const float eg = __expf(gl);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int r = 0; r < 4; ++r) hacc[mt][nt][r] *= eg;
    warp_mma<T, MT, NT, true, true>(hacc, b.K, LD, hm0, b.U, LV, 0, kC, lane);
    __syncthreads();
  }
}

}  // namespace states_detail
}  // namespace ak::linear::cuda::bwd

namespace ak::linear::cuda {

template <class T, int D, int VS>
void BwdStates<T, D, VS>::launch(const Args& a, cudaStream_t s) {
  const bwd::Problem& p = a.p;
  if (p.NCt == 0) return;
  constexpr size_t smem = bwd::states_smem<D, VS>();
  auto kernel = bwd::states_detail::fast_states<T, D, VS>;
  AK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const int64_t blocks = static_cast<int64_t>(D / VS) * p.N;
  require(blocks < (int64_t{1} << 31), "delta_rule_bwd on CUDA: too many sequences for the state pass");
  kernel<<<dim3(static_cast<unsigned>(blocks), p.H), bwd::states_detail::kThreads, smem, s>>>(p, a.w);
  ak::cuda::check_launch("delta_bwd fast: states");
}

}  // namespace ak::linear::cuda
