// The gradient stage (grads.cuh's fused kernel: the same steps, barriers, tile reuse and prefetch order) with
// its fourteen products on wgmma, D = 128, sm_90a. Warpgroup wg computes, of every 64 x D product,
// columns 32 wg .. + 31, and of every 64 x 64 one columns 16 wg .. + 15: a warp's accumulator is the
// fragment the mma.sync kernel's warp (wr, wc) = (warp % 4, wg) holds, so the epilogues are grads.cuh's.
// Operands come from 128-byte swizzled tiles, read once per warpgroup instead of as per-warp ldmatrix
// fragments, and independent products are issued as one group: (dO v_new^T, dO h^T, v_new dh'^T),
// (dPs K, dPs^T Q, dv_new h^T), (A^T dw, A^T dv_new), (dv_new V^T, dw K^T), (dA A^T, K K^T), -A^T X, S K.
#pragma once

#include "linear/delta/bwd/grads.cuh"
#include "linear/delta/fwd/state_sm90_parts.cuh"

namespace ak::linear::cuda::bwd {
namespace grads_sm90_detail {

using namespace grads_detail;

// Element (r, c) of a [64, cols] 16-bit tile of 128-byte swizzled panels.
template <class T>
struct SwizzledTile {
  unsigned char* p;
  __device__ __forceinline__ T* at(int r, int c) const { return reinterpret_cast<T*>(p + sw128_offset(64, r, c)); }
};

// An accumulator fragment [1][NT][4] as the flat array a wgmma of N = 8 NT columns writes (the same order).
template <int NT>
__device__ __forceinline__ float (&flat(float (&a)[1][NT][4]))[4 * NT] {
  return reinterpret_cast<float(&)[4 * NT]>(a);
}

// Descriptor advance of k-step kk: K-major operands (0) step 32 bytes along their [64, *] tile's rows, MN-major
// ones (1) 16 rows down it.
template <int MN>
__device__ __forceinline__ uint64_t k_step(int kk) {
  return MN ? mnmajor_step(kk) : kmajor_step(64, kk);
}

// d (+)= A B over KS k-steps, the operands in [64, *] tiles at byte addresses a and b: A K-major (TA = 0: its
// rows are the tile's rows) or M-major (TA = 1: the tile's rows are k); B K-major (TB = 0: its columns are the
// tile's rows) or N-major (TB = 1: the tile's rows are k). An MN-major operand is 64 rows of k (KS = 4).
template <class T, int NT, int KS, int TA, int TB>
__device__ __forceinline__ void mma(float (&d)[1][NT][4], uint32_t a, uint32_t b, bool accumulate) {
  static_assert((!TA && !TB) || KS == kFastC / 16, "MN-major operands span the tile's 64 rows");
  const uint64_t da = make_desc_sw128(a, TA ? 64 * 128 : 16, 1024);
  const uint64_t db = make_desc_sw128(b, TB ? 64 * 128 : 16, 1024);
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) {
    Wgmma<8 * NT, T>::template ss<TA, TB>(flat(d), da + k_step<TA>(kk), db + k_step<TB>(kk),
                                          accumulate || kk > 0 ? 1 : 0);
  }
}

// Stores a 1 x NT accumulator tile transposed: element (r, c) of the fragment to (c, r) of the tile.
template <class T, int NT>
__device__ __forceinline__ void store_tile_t(const float (&acc)[1][NT][4], const SwizzledTile<T>& s, int m0, int n0,
                                             int lane) {
  for_acc_pairs(acc, m0, n0, lane, [&](int r, int c, const float* v) {
    *s.at(c, r) = from_float<T>(v[0]);
    *s.at(c + 1, r) = from_float<T>(v[1]);
  });
}

template <int NT>
__device__ __forceinline__ void negate(float (&a)[1][NT][4]) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int r = 0; r < 4; ++r) a[0][nt][r] = -a[0][nt][r];
}

// Waits for this warpgroup's products and pins their accumulators after the wait.
template <int NT, class... More>
__device__ __forceinline__ void settle(float (&a)[1][NT][4], More&... more) {
  wgmma_wait<0>();
  fence_regs(flat(a));
  (fence_regs(flat(more)), ...);
}

template <class T, int D>
__global__ void __launch_bounds__(512, 1) grads_wgmma_kernel(Problem p, FastWork<T> w) {
#if AK_ARCH_SM90A
  static_assert(D == 128, "the wgmma gradient kernel is built for D = 128");
  using Lay = GradsSm90Layout;
  constexpr int WC = 4, kThreads = 512, NT = D / (8 * WC), NJ = 8 / WC;
  const SwizzledSmem dyn = swizzled_smem();
  const uint32_t sb = dyn.addr;
  unsigned char* const base = dyn.ptr;
  auto tile = [&](int off) { return SwizzledTile<T>{base + off}; };
  float* gc = reinterpret_cast<float*>(base + Lay::kFloats);
  float* gm = gc + kC;   // e^gc
  float* dec = gm + kC;  // e^(gl - gc)
  float* bt = dec + kC;  // beta
  float* r_qd = bt + kC;  // [WC][64] per warpgroup, as grads.cuh
  float* r_kt = r_qd + WC * kC;
  float* r_kk = r_kt + WC * kC;
  float* r_tk = r_kk + WC * kC;
  float* r_tv = r_tk + WC * kC;
  float* r_db = r_tv + WC * kC;
  float* r_rl = r_db + WC * kC;
  float* r_cl = r_rl + WC * kC;  // [4][64]
  float* r_h = r_cl + 4 * kC;    // [16] per warp
  float* dgs = r_h + 4 * WC;     // [64]
  float* r_kf = dgs + kC;        // [WC][64]
  const GradRows rows{r_qd, r_kt, r_kk, r_tk, r_tv, r_db, r_rl, r_cl, r_h, dgs};
  const bool fused_l2 = w.rq != nullptr;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int wr = warp & 3, wc = warp >> 2;  // wc: the warpgroup
  const int m0 = 16 * wr, rA = m0 + (lane >> 2), rB = rA + 8;
  const int n0 = wc * (D / WC);   // columns of 64 x D products
  const int j0 = wc * (kC / WC);  // columns of 64 x 64 products
  // This warpgroup's B columns: rows n0.. of a K-major [64, *] tile pair (h, dh': rows of the state) and
  // columns n0.. of an N-major [64, D] tile; rows and columns j0.. of 64 x 64 ones.
  const uint32_t state_rows = (n0 / 64) * Lay::kTile + (n0 % 64) * 128;
  const uint32_t d_cols = (n0 / 64) * 64 * 128 + (n0 % 64) * 2;

  const int items = p.map.live_chunks(p.NCt) * p.H;
  auto rows_in = [&](int off, int valid, const T* src, int64_t stride) {
    fwd::async_rows_sw128<D, kThreads>(sb + off, valid, src, stride, tid);
  };
  auto issue_first = [&](int item, int kdst) {
    const auto [g, h, hk, ci, row, state] = grad_item(p, item, D);
    const T* hs = w.Hs + state;
    const T* dhs = w.dHs + state;
    rows_in(Lay::kDO, ci.z, static_cast<const T*>(p.dout.p) + p.dout.offset(ci.x, ci.y, h), p.dout.st);
    rows_in(Lay::kU, ci.z, w.U + row * D, D);
    rows_in(Lay::kH, kC, hs, D);
    rows_in(Lay::kH + Lay::kTile, kC, hs + kC * D, D);
    rows_in(Lay::kDH, kC, dhs, D);
    rows_in(Lay::kDH + Lay::kTile, kC, dhs + kC * D, D);
    rows_in(kdst, ci.z, static_cast<const T*>(p.k.p) + p.k.offset(ci.x, ci.y, hk), p.k.st);
  };
  auto issue_qvdu = [&](int item) {
    const auto [g, h, hk, ci, row, state] = grad_item(p, item, D);
    rows_in(Lay::kQ, ci.z, static_cast<const T*>(p.q.p) + p.q.offset(ci.x, ci.y, hk), p.q.st);
    rows_in(Lay::kV, ci.z, static_cast<const T*>(p.v.p) + p.v.offset(ci.x, ci.y, h), p.v.st);
    rows_in(Lay::kDU, ci.z, w.dU + row * D, D);
  };
  auto issue_a = [&](int item) {
    const GradItem it = grad_item(p, item, D);
    fwd::async_rows_sw128<kC, kThreads>(sb + Lay::kA, it.ci.z, w.A + it.row * kC, kC, tid);
  };
  // Copies landed (this thread's) and every thread's generic writes, visible to the next wgmma reads.
  auto publish = [&]() {
    fence_proxy_async();
    __syncthreads();
  };

  int item = blockIdx.x;
  if (item < items) issue_first(item, Lay::kK0);
  cp_async_commit();
  if (item < items) issue_qvdu(item);
  cp_async_commit();
  if (item < items) issue_a(item);
  cp_async_commit();
  for (int iter = 0; item < items; item += gridDim.x, ++iter) {
    const GradItem cur = grad_item(p, item, D);
    const auto [g, h, hk, ci, row, state] = cur;
    const int len = ci.z;
    const int next = item + static_cast<int>(gridDim.x);
    const int kOff = (iter & 1) ? Lay::kK1 : Lay::kK0;
    const SwizzledTile<T> tQ = tile(Lay::kQ), tK = tile(kOff), tV = tile(Lay::kV), tT1 = tile(Lay::kT1);

    if (tid < kC) {
      const float g_i = w.gc[row + tid], g_l = w.gc[row + kC - 1];
      gc[tid] = g_i;
      gm[tid] = expf(g_i);
      dec[tid] = expf(g_l - g_i);
      bt[tid] = tid < len ? static_cast<const float*>(p.beta.p)[p.beta.offset(ci.x, ci.y + tid, h)] : 0.f;
    }
    cp_async_wait<1>();  // everything but A
    publish();
    const float gl = gc[kC - 1];

    // dO v_new^T (-> dPs), dO h^T (-> dq), v_new dh'^T (-> dk), one group.
    float dps[1][NJ][4], dqa[1][NT][4], dk[1][NT][4], dw[1][NT][4];
    wgmma_fence();
    mma<T, NJ, D / 16, 0, 0>(dps, sb + Lay::kDO, sb + Lay::kU + j0 * 128, false);
    mma<T, NT, D / 16, 0, 0>(dqa, sb + Lay::kDO, sb + Lay::kH + state_rows, false);
    mma<T, NT, D / 16, 0, 0>(dk, sb + Lay::kU, sb + Lay::kDH + state_rows, false);
    wgmma_commit();
    {  // <h, dh'> while the products run: both tiles share one layout, so 16-byte pieces pair up.
      float s = 0.f;
#pragma unroll
      for (int e = tid; e < 2 * Lay::kTile / 16; e += kThreads) {
        const uint4 a = *reinterpret_cast<const uint4*>(base + Lay::kH + 16 * e);
        const uint4 b = *reinterpret_cast<const uint4*>(base + Lay::kDH + 16 * e);
        const uint32_t av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const float2 x = unpack2<T>(av[q]), y = unpack2<T>(bv[q]);
          s += x.x * y.x + x.y * y.y;
        }
      }
      s = warp_sum(s);
      if (lane == 0) r_h[warp] = s;
    }
    settle(dps, dqa, dk);
    dps_mask(dps, gc, p.scale, m0, j0, lane);
    store_tile<T>(dps, tT1, m0, j0, lane);
    scale_rows(dqa, p.scale * gm[rA], p.scale * gm[rB]);
    scale_rows(dk, dec[rA], dec[rB]);
    put_row_dots<T, NT>(dk, tK, r_kt, wc, m0, n0, lane);
    publish();

    // dq += dPs K, dk += dPs^T Q, dv_new h^T (-> dw).
    wgmma_fence();
    mma<T, NT, kC / 16, 0, 1>(dqa, sb + Lay::kT1, sb + kOff + d_cols, true);
    mma<T, NT, kC / 16, 1, 1>(dk, sb + Lay::kT1, sb + Lay::kQ + d_cols, true);
    mma<T, NT, D / 16, 0, 0>(dw, sb + Lay::kDU, sb + Lay::kH + state_rows, false);
    wgmma_commit();
    settle(dqa, dk, dw);
    put_row_dots<T, NT>(dqa, tQ, r_qd, wc, m0, n0, lane);
    if (!fused_l2) {
      write_rows<T, NT>(dqa, w.dQh != nullptr ? w.dQh + row * D : nullptr, D, p.dq, ci, hk, m0, n0, lane);
    }
    put_row_dots<T, NT>(dk, tK, r_kk, wc, m0, n0, lane);
    __syncthreads();  // q.dq of every warpgroup in r_qd
    // Each thread reads q and writes dw at its own fragment's places: dw takes q's tile.
    if (fused_l2) write_rows_l2<T, NT, WC>(dqa, tQ, r_qd, w.rq, p.map.T, p.HK, p.dq, ci, hk, m0, n0, lane);
    negate(dw);
    store_tile<T>(dw, tQ, m0, n0, lane);
    publish();
    // dO, v_new, h, dh' and the other K buffer are dead for this item: fetch the next item's.
    if (next < items) issue_first(next, (iter & 1) ? Lay::kK0 : Lay::kK1);
    cp_async_commit();
    cp_async_wait<1>();  // this item's A (committed before the group above)
    publish();

    // A^T dw, A^T dv_new; then dv_new V^T, dw K^T.
    {
      float tw[1][NT][4], tv[1][NT][4];
      wgmma_fence();
      mma<T, NT, kC / 16, 1, 1>(tw, sb + Lay::kA, sb + Lay::kQ + d_cols, false);
      mma<T, NT, kC / 16, 1, 1>(tv, sb + Lay::kA, sb + Lay::kDU + d_cols, false);
      wgmma_commit();
      settle(tw, tv);
      add_at_dw_from<T, NT>(dk, tw, tK, bt, gm, r_tk, wc, m0, n0, lane);
      dv_from<T, NT>(tv, tV, bt, r_tv, p, ci, h, wc, m0, n0, lane);
    }
    {
      float a1[1][NJ][4], a2[1][NJ][4];
      wgmma_fence();
      mma<T, NJ, D / 16, 0, 0>(a1, sb + Lay::kDU, sb + Lay::kV + j0 * 128, false);
      mma<T, NJ, D / 16, 0, 0>(a2, sb + Lay::kQ, sb + kOff + j0 * 128, false);
      wgmma_commit();
      settle(a1, a2);
      combine_da(a1, a2, bt, gm, m0, j0, lane);
      store_tile<T>(a1, tT1, m0, j0, lane);  // dA
    }
    publish();
    // q (as dw), v, dv_new are dead.
    if (next < items) issue_qvdu(next);
    cp_async_commit();

    // X = dA A^T -> T2 (transposed); K K^T.
    float kk[1][NJ][4];
    {
      float x[1][NJ][4];
      wgmma_fence();
      mma<T, NJ, kC / 16, 0, 0>(x, sb + Lay::kT1, sb + Lay::kA + j0 * 128, false);
      mma<T, NJ, D / 16, 0, 0>(kk, sb + kOff, sb + kOff + j0 * 128, false);
      wgmma_commit();
      settle(x, kk);
      store_tile_t<T>(x, tile(Lay::kT2), m0, j0, lane);  // X^T: the K-major B of -A^T X
    }
    publish();
    {  // dL = -A^T X: dbeta, dgc row sums, S = dM + dM^T -> T1
      float dl[1][NJ][4];
      wgmma_fence();
      mma<T, NJ, kC / 16, 1, 0>(dl, sb + Lay::kA, sb + Lay::kT2 + j0 * 128, false);
      wgmma_commit();
      settle(dl);
      negate(dl);
      dl_rows<T, WC>(dl, kk, tT1, gc, bt, rows, wr, wc, lane);
    }
    publish();
    // A is dead.
    if (next < items) issue_a(next);
    cp_async_commit();
    wgmma_fence();
    mma<T, NT, kC / 16, 0, 1>(dk, sb + Lay::kT1, sb + kOff + d_cols, true);  // dk += S K
    wgmma_commit();
    settle(dk);
    finish_item<T, NT, WC>(dk, tK, r_kf, p, w, cur, gm, bt, gl, rows, wc, m0, n0, tid, lane);
    __syncthreads();  // the next item overwrites every tile and row sum
  }
#else
  (void)p;
  (void)w;
#endif
}

}  // namespace grads_sm90_detail
}  // namespace ak::linear::cuda::bwd

namespace ak::linear::cuda {

// Persistent blocks, one a multiprocessor, each looping over chunk x head items.
template <class T, int D, int Tile>
void BwdGradsWgmma<T, D, Tile>::launch(const Args& a, cudaStream_t s) {
  const bwd::Problem& p = a.p;
  if (p.NCt == 0) return;
  constexpr int kSmem = bwd::GradsSm90Layout::kAlloc;
  auto* kernel = bwd::grads_sm90_detail::grads_wgmma_kernel<T, D>;
  AK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  int dev = 0;
  AK_CUDA_CHECK(cudaGetDevice(&dev));
  const int64_t items = static_cast<int64_t>(p.NCt) * p.H;
  const int64_t resident = ak::cuda::props(dev).multiProcessorCount;
  kernel<<<static_cast<unsigned>(std::min(items, resident)), 512, kSmem, s>>>(p, a.w);
  ak::cuda::check_launch("delta_bwd fast: grads (wgmma)");
}

}  // namespace ak::linear::cuda
