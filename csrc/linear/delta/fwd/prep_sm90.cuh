// Stage 1 of the fast chunked forward on Hopper (sm_90a): prep.cuh's computation, with its products on
// wgmma, whose operands are read from shared memory once per warpgroup instead of once per warp as
// ldmatrix fragments (prep.cuh is bound by the shared-memory pipe). One block of two warpgroups per
// (chunk of 64 tokens, value head):
//   gc  = cumsum(g), 1/|k| (with the L2 norm)
//   L   = tril(diag(beta) K^ K^T^ * exp(gc_i - gc_j), -1)   wgmma m64n32, warpgroup w: key columns 32 w ..
//   A   = (I + L)^-1                                       the fp32 solve of prep.cuh (solve.cuh)
//   w   = A diag(beta exp(gc)) K^  (warpgroup 0),  u = A diag(beta) V  (warpgroup 1)   wgmma m64n64, a
//         64-column group at a time, each leaving through the panel of K / V it was computed from
// The same outputs, layouts and roundings as prep.cuh (Aw and Au rounded to 16 bits, fp32 accumulation),
// so the two agree to summation order; rows past the chunk's length load as zeros.
#pragma once

#include "linear/common/gate.cuh"
#include "linear/common/l2norm.cuh"
#include "linear/common/solve.cuh"
#include "linear/delta/fwd/prep.cuh"
#include "linear/delta/fwd/state_sm90_parts.cuh"

namespace ak::linear::cuda::fwd {

constexpr int kPrepSm90Threads = 256;

template <class T, int D>
__global__ void __launch_bounds__(kPrepSm90Threads, D <= 128 ? 4 : 2) chunk_prep_sm90_kernel(const PrepParams<T> p) {
#if AK_ARCH_SM90A
  using Lay = PrepSm90Layout<D>;
  constexpr int kLd = Lay::kLd;
  const SwizzledSmem dyn = swizzled_smem();
  const uint32_t sbase = dyn.addr;
  unsigned char* const base = dyn.ptr;
  float* const LA = reinterpret_cast<float*>(base + Lay::kLA);
  float* const gS = reinterpret_cast<float*>(base + Lay::kGate);  // g, then its cumsum
  float* const bS = reinterpret_cast<float*>(base + Lay::kBeta);
  float* const rkS = reinterpret_cast<float*>(base + Lay::kRk);

  const int gch = blockIdx.x, h = blockIdx.y, hk = h / p.group;
  const int tid = threadIdx.x, wg = tid >> 7, wtid = tid & 127, warp = tid >> 5, lane = tid & 31;
  const int wwarp = warp & 3, g8 = lane >> 2, t4 = lane & 3;
  int row, t0, len;
  p.map.chunk_rows(gch, row, t0, len);
  if (len == 0) return;  // an empty chunk past a packed call's live ones
  const int64_t vec_off = (static_cast<int64_t>(gch) * p.H + h) * 64;
  const int64_t save_row = (static_cast<int64_t>(h) * p.chunks + gch) * 64;

  // 1. k and v into swizzled panels (rows past len zero filled), g and beta.
  async_rows_sw128<D, kPrepSm90Threads>(sbase + Lay::kK, len, p.k.row(row, t0, hk), p.k.st, tid);
  async_rows_sw128<D, kPrepSm90Threads>(sbase + Lay::kV, len, p.v.row(row, t0, h), p.v.st, tid);
  cp_async_commit();
  if (tid < 64) {
    gS[tid] = tid < len ? p.g.at(row, t0 + tid, h) : 0.f;
    bS[tid] = tid < len ? p.beta.at(row, t0 + tid, h) : 0.f;
  }
  cp_async_wait_all();
  fence_proxy_async();  // the tiles, before wgmma reads them
  __syncthreads();

  // 2. Gate cumsum and 1 / |k| (prep.cuh's gate_and_norms). At a step the lanes of a row read pieces of
  //    one parity, so two rows (one of each parity after the swizzle) fill a phase's 8 bank groups.
  gate_and_norms<T, D>(gS, rkS, p, vec_off, tid, [&](int r, int q, int c) {
    return base + Lay::kK + sw128_offset(64, r, 8 * (2 * q + (c & 1) + 8 * (c >> 1)));
  });

  // 3. L[i][j] = beta_i rk_i rk_j exp(gc_i - gc_j) (k_i . k_j) for j < i, zero elsewhere (the solve reads the
  //    strict lower triangle; the rest is its scratch). Warpgroup w: K (64 rows) times keys 32 w .. 32 w + 31.
  {
    float acc[16];
    wgmma_fence();
    const uint64_t da = make_desc_sw128(sbase + Lay::kK, 16, 1024);
    const uint64_t db = make_desc_sw128(sbase + Lay::kK + 32 * wg * 128, 16, 1024);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      Wgmma<32, T>::template ss<0, 0>(acc, da + kmajor_step(64, kk), db + kmajor_step(64, kk), kk > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(acc);
#pragma unroll
    for (int i = 0; i < 16; i += 2) {
      const int r = 16 * wwarp + g8 + 8 * ((i >> 1) & 1), c = 32 * wg + 8 * (i >> 2) + 2 * t4;
      const float bi = bS[r] * rkS[r], gi = gS[r];
      // Computed for every element, then selected (above the diagonal the exponential may overflow).
      const float2 gj = *reinterpret_cast<const float2*>(gS + c), rkj = *reinterpret_cast<const float2*>(rkS + c);
      const float e0 = bi * rkj.x * __expf(gi - gj.x) * acc[i];
      const float e1 = bi * rkj.y * __expf(gi - gj.y) * acc[i + 1];
      *reinterpret_cast<float2*>(&LA[r * kLd + c]) = make_float2(c < r ? e0 : 0.f, c + 1 < r ? e1 : 0.f);
    }
  }
  __syncthreads();

  // 4. A = (I + L)^-1, fp32, in place (linear/common/solve.cuh); ends behind a barrier.
  invert_unit_lower64<kLd, kPrepSm90Threads>(LA, tid);

  // 5. Aw and Au (prep.cuh's wy_factors), 16-bit into two swizzled panels over L / A.
  wy_factors<T, kLd>(LA, gS, bS, rkS, p, row, h, t0, len, save_row, tid, [&](int i, int j, T aw, T au) {
    *reinterpret_cast<T*>(base + Lay::kLA + sw128_offset(64, i, j)) = aw;
    *reinterpret_cast<T*>(base + Lay::kLA + 64 * 128 + sw128_offset(64, i, j)) = au;
  });
  fence_proxy_async();  // Aw and Au, before wgmma reads them
  __syncthreads();

  // 6. w = Aw K (warpgroup 0) and u = Au V (warpgroup 1), 64 columns at a time: A = the 64 x 64 factor
  //    (K-major over the chunk's tokens), B = the panel of K or V (N-major). Each group goes back into
  //    the panel it was read from (no other reader: K K^T and the norms are done, the other warpgroup
  //    reads the other tile) and leaves as 16-byte pieces of rows.
  {
    const uint32_t x_tile = sbase + (wg == 0 ? Lay::kK : Lay::kV);
    const unsigned char* const x_bytes = base + (wg == 0 ? Lay::kK : Lay::kV);
    T* const out = (wg == 0 ? p.w : p.u) + vec_off * D;
    T* const saved = wg == 0 && p.save_w ? p.save_w + save_row * D : nullptr;
    const uint64_t da = make_desc_sw128(sbase + Lay::kLA + wg * 64 * 128, 16, 1024);
#pragma unroll 1
    for (int ng = 0; ng < D / 64; ++ng) {
      const uint32_t panel = x_tile + ng * 64 * 128;
      float acc[32];
      wgmma_fence();
      const uint64_t db = make_desc_sw128(panel, 64 * 128, 1024);
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        Wgmma<64, T>::template ss<0, 1>(acc, da + kmajor_step(64, kk), db + mnmajor_step(kk), kk > 0);
      }
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(acc);
      // Every warp's part of the product has read the panel (a warp's wait covers its own rows only).
      named_sync(1 + wg, 128);
#pragma unroll
      for (int cb = 0; cb < 8; cb += 2) {
        const float* a = &acc[4 * cb];
        stmatrix_x4(frag_x4_addr(panel, 64, 16 * wwarp, cb, lane), pack2<T>(a[0], a[1]), pack2<T>(a[2], a[3]),
                    pack2<T>(a[4], a[5]), pack2<T>(a[6], a[7]));
      }
      named_sync(1 + wg, 128);  // this warpgroup's group of w or u is in the panel
#pragma unroll
      for (int x = 0; x < 4; ++x) {  // 64 rows x 8 pieces, 4 a thread
        const int e = wtid + 128 * x, r = e >> 3, piece = e & 7;
        const uint4 val = *reinterpret_cast<const uint4*>(x_bytes + ng * 64 * 128 + sw128_offset(64, r, 8 * piece));
        const int64_t at = static_cast<int64_t>(r) * D + 64 * ng + 8 * piece;
        *reinterpret_cast<uint4*>(out + at) = val;
        if (saved) *reinterpret_cast<uint4*>(saved + at) = val;
      }
    }
  }
#else
  (void)p;
#endif
}

}  // namespace ak::linear::cuda::fwd

namespace ak::linear::cuda {

template <class T, int D, int Tile>
void FwdPrepWgmma<T, D, Tile>::launch(const Args& p, cudaStream_t stream) {
  fwd::launch_prep<fwd::PrepSm90Layout<D>::kAlloc>(fwd::chunk_prep_sm90_kernel<T, D>, "chunk_prep_sm90_kernel",
                                                   fwd::kPrepSm90Threads, p, stream);
}

}  // namespace ak::linear::cuda
