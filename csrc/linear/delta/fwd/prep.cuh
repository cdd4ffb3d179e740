// Stage 1 of the fast chunked forward, one block per (chunk of 64 tokens, value head): everything
// that does not depend on the state, so it runs chunk-parallel over the whole call.
//   gc  = cumsum(g)                                   gate cumsum (within the chunk)
//   L   = tril(diag(beta) K^ K^T^ * exp(gc_i - gc_j), -1)   scaled K K^T (K^ = L2-normalised K if asked)
//   A   = (I + L)^-1                                  triangular solve, 16x16 blocks, fp32
//   w   = A diag(beta exp(gc)) K^,  u = A diag(beta) V    WY vectors (tensor cores)
// It writes w, u (16-bit, [chunk, H, 64, D]), gc and 1/|k| (fp32, [chunk, H, 64]) for stage 2, and
// Aw, Au (fp32) when asked; with save_a / save_w also A and w for the backward (16-bit, its layouts). Rows past the chunk's length load as zeros (beta = g = 0 there), so their
// rows of w and u are zero and stage 2 can read whole tiles.
//
// FLOPs per chunk and head (C = 64): K K^T 2 C^2 D / 2 (causal tiles only), solve ~C^3 / 3,
// w and u 2 * 2 C^2 D / 2 (A is triangular). Bytes: reads k, v (2 C D * 2), writes w, u (2 C D * 2).
#pragma once

#include "cuda/runtime.cuh"
#include "linear/common/tiles.cuh"
#include "linear/delta/fwd/layouts.h"
#include "linear/delta/fwd/params.h"
#include "linear/launchers.h"

namespace ak::linear::cuda::fwd {

constexpr int kPrepThreads = 256;

// The causal 16x8 tiles of a 64x64 product X Y^T that warp `warp` of 8 computes: row block
// rb = warp % 4, n-tiles nt = parity + 2x for x = 0..rb (parity = warp / 4), so each row block's
// tiles 0 .. 2 rb + 1 (columns up to its diagonal) are split between two warps. acc[x] gets tile x.
// X and Y are padded 64 x DK tiles of 16-bit elements.
template <class T, int DK>
__device__ __forceinline__ void causal_tiles(float (&acc)[4][4], uint32_t x_tile, uint32_t y_tile, int warp,
                                             int lane) {
  constexpr int kPitch = tile_pitch(DK);
  const int rb = warp & 3, parity = warp >> 2;
#pragma unroll
  for (int x = 0; x < 4; ++x) {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[x][e] = 0.f;
  }
#pragma unroll
  for (int kk = 0; kk < DK / 16; ++kk) {
    uint32_t a[4];
    load_a(a, x_tile, kPitch, 16 * rb, 16 * kk, lane);
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      if (x <= rb) {
        uint32_t b[2];
        load_b1_nk(b, y_tile, kPitch, 16 * kk, 8 * (parity + 2 * x), lane);
        mma16816<T>(acc[x], a, b);
      }
    }
  }
}

template <class T, int D>
__global__ void __launch_bounds__(kPrepThreads, D <= 128 ? 4 : 2) chunk_prep_kernel(const PrepParams<T> p) {
  using Lay = PrepLayout<D>;
  constexpr int kLd = Lay::kLd;
  extern __shared__ __align__(16) unsigned char prep_smem[];
  unsigned char* kS = prep_smem + Lay::kK;
  unsigned char* vS = prep_smem + Lay::kV;
  float* LA = reinterpret_cast<float*>(prep_smem + Lay::kLA);
  float* gS = reinterpret_cast<float*>(prep_smem + Lay::kGate);  // g, then its cumsum
  float* bS = reinterpret_cast<float*>(prep_smem + Lay::kBeta);
  float* rkS = reinterpret_cast<float*>(prep_smem + Lay::kRk);

  const int gch = blockIdx.x, h = blockIdx.y, hk = h / p.group;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g8 = lane >> 2, t4 = lane & 3;
  int row, t0, len;
  p.map.chunk_rows(gch, row, t0, len);
  const int64_t vec_off = (static_cast<int64_t>(gch) * p.H + h) * 64;  // [chunk, H, 64] index base
  // [H][chunks * 64] row base of the backward's layouts
  const int64_t save_row = (static_cast<int64_t>(h) * p.chunks + gch) * 64;

  // 1. Load k, v (zero rows past len), g and beta.
  async_tile<64, D, kPrepThreads>(kS, len, [&](int r) { return p.k.row(row, t0 + r, hk); }, tid);
  async_tile<64, D, kPrepThreads>(vS, len, [&](int r) { return p.v.row(row, t0 + r, h); }, tid);
  cp_async_commit();
  if (tid < 64) {
    gS[tid] = tid < len ? p.g.at(row, t0 + tid, h) : 0.f;
    bS[tid] = tid < len ? p.beta.at(row, t0 + tid, h) : 0.f;
  }
  cp_async_wait_all();
  __syncthreads();

  // 2. Gate cumsum (warp 0: two tokens a lane, then a warp scan) and 1 / |k| per row.
  if (warp == 0) {
    const float g0 = gS[2 * lane], g1 = gS[2 * lane + 1];
    float s = g0 + g1;
#pragma unroll
    for (int m = 1; m < 32; m <<= 1) {
      const float y = __shfl_up_sync(0xffffffffu, s, m);
      if (lane >= m) s += y;
    }
    gS[2 * lane] = s - g1;
    gS[2 * lane + 1] = s;
  }
  if (p.l2norm) {
    // 8 rows a warp, 4 lanes a row, each lane a quarter of the row.
    const int r = 8 * warp + (lane >> 2), q = lane & 3;
    const unsigned char* src = kS + r * Lay::kPitchD + q * (D / 4) * 2;
    float ss = 0.f;
#pragma unroll
    for (int c = 0; c < D / 32; ++c) ss = add_squares8<T>(*reinterpret_cast<const uint4*>(src + c * 16), ss);
    ss += __shfl_xor_sync(0xffffffffu, ss, 1);
    ss += __shfl_xor_sync(0xffffffffu, ss, 2);
    if (q == 0) rkS[r] = rsqrtf(ss + kL2NormEps);
  } else if (tid < 64) {
    rkS[tid] = 1.f;
  }
  __syncthreads();
  if (tid < 64) {
    p.gc[vec_off + tid] = gS[tid];
    if (p.rk) p.rk[vec_off + tid] = rkS[tid];
  }

  // 3. Scaled K K^T: L[i][j] = beta_i rk_i rk_j exp(gc_i - gc_j) (k_i . k_j) for j < i.
  {
    float acc[4][4];
    causal_tiles<T, D>(acc, smem_addr(kS), smem_addr(kS), warp, lane);
    const int rb = warp & 3, parity = warp >> 2;
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      if (x > rb) continue;
      const int nt = parity + 2 * x;
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int i = 16 * rb + g8 + 8 * hh, j = 8 * nt + 2 * t4;
        const float bi = bS[i] * rkS[i], gi = gS[i];
        // Computed for every element, then selected: no branches (above the diagonal the exponential
        // may overflow; it is dropped).
        const float2 gj = *reinterpret_cast<const float2*>(gS + j), rkj = *reinterpret_cast<const float2*>(rkS + j);
        const float e0 = bi * rkj.x * __expf(gi - gj.x) * acc[x][2 * hh];
        const float e1 = bi * rkj.y * __expf(gi - gj.y) * acc[x][2 * hh + 1];
        float2 out;
        out.x = j < i ? e0 : 0.f;
        out.y = j + 1 < i ? e1 : 0.f;
        *reinterpret_cast<float2*>(&LA[i * kLd + j]) = out;
      }
    }
  }
  __syncthreads();

  // 4. A = (I + L)^-1 by 16x16 blocks, fp32 (as FLA's "ieee" solve), in place over L.
  //  4a. Diagonal blocks D_b = (I + L_bb)^-1: warps 0-1, lane l inverts block 2 warp + l / 16, its
  //      column l % 16, by forward substitution (two partial sums, rows of L read as float4s); the
  //      zeros above the diagonal are written too, so D_b can be read as a full 16x16 block.
  if (warp < 2) {
    const int b = 2 * warp + (lane >> 4), col = lane & 15;
    float* Lb = LA + 16 * b * kLd + 16 * b;
    float x[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      float s0 = i == col ? 1.f : 0.f, s1 = 0.f;
#pragma unroll
      for (int j4 = 0; j4 < i; j4 += 4) {
        const float4 l = *reinterpret_cast<const float4*>(Lb + i * kLd + j4);
        s0 = fmaf(-l.x, x[j4], s0);
        if (j4 + 1 < i) s1 = fmaf(-l.y, x[j4 + 1], s1);
        if (j4 + 2 < i) s0 = fmaf(-l.z, x[j4 + 2], s0);
        if (j4 + 3 < i) s1 = fmaf(-l.w, x[j4 + 3], s1);
      }
      x[i] = s0 + s1;
    }
    __syncwarp();  // every lane has read L_bb before any lane overwrites it
#pragma unroll
    for (int i = 0; i < 16; ++i) Lb[i * kLd + col] = x[i];
  }
  __syncthreads();
  //  4b. The off-diagonal blocks by doubling, all warps busy (D_b the diagonal inverses from 4a):
  //      round 1, the two 32 x 32 diagonal halves: T_b = L_{2b+1,2b} D_2b, then A_{2b+1,2b} = -D_{2b+1} T_b;
  //      round 2, X = L_hl A_lo (L_hl rows 32-63 x columns 0-31, A_lo the upper-left half's inverse);
  //      round 3, A_hl = -A_hi X (A_hi the lower-right half's inverse).
  //      The intermediates T and X go to the unused upper triangle of LA (T_b into block (2b, 2b+1), X
  //      into rows 0-31 x columns 32-63), so no round reads what it writes and one barrier a step
  //      suffices. Loops never touch the upper blocks of A_lo / A_hi: a warp's k range is uniform.
  //      Critical path 384 FMAs a thread (the block-row form took 1,152 on at most three warps).
  {
    // Round 1 (T and then A of blocks (1, 0) and (3, 2)): thread -> half b, row i, columns j0, j0 + 1.
    const int b = tid >> 7, i1 = (tid & 127) >> 3, j1 = 2 * (tid & 7);
    const int hb = 32 * b;  // first row and column of the half
    {
      float2 t = make_float2(0.f, 0.f);
      const float* lrow = LA + (hb + 16 + i1) * kLd + hb;
#pragma unroll
      for (int k = 0; k < 16; ++k) {
        const float l = lrow[k];
        const float2 d = *reinterpret_cast<const float2*>(LA + (hb + k) * kLd + hb + j1);
        t.x = fmaf(l, d.x, t.x);
        t.y = fmaf(l, d.y, t.y);
      }
      *reinterpret_cast<float2*>(LA + (hb + i1) * kLd + hb + 16 + j1) = t;
    }
    __syncthreads();
    {
      float2 a = make_float2(0.f, 0.f);
      const float* drow = LA + (hb + 16 + i1) * kLd + hb + 16;
#pragma unroll
      for (int k = 0; k < 16; ++k) {
        const float d = drow[k];
        const float2 t = *reinterpret_cast<const float2*>(LA + (hb + k) * kLd + hb + 16 + j1);
        a.x = fmaf(d, t.x, a.x);
        a.y = fmaf(d, t.y, a.y);
      }
      *reinterpret_cast<float2*>(LA + (hb + 16 + i1) * kLd + hb + j1) = make_float2(-a.x, -a.y);
    }
    __syncthreads();
    // acc[e] += x[k] Y[k][e] over k in [k0, k1), four columns (a float4 of each row of Y).
    auto row_times = [&](float (&acc)[4], const float* x, const float* y, int k0, int k1) {
#pragma unroll 4
      for (int k = k0; k < k1; k += 4) {
        const float4 xv = *reinterpret_cast<const float4*>(x + k);
        const float xs[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float4 yv = *reinterpret_cast<const float4*>(y + (k + e) * kLd);
          acc[0] = fmaf(xs[e], yv.x, acc[0]);
          acc[1] = fmaf(xs[e], yv.y, acc[1]);
          acc[2] = fmaf(xs[e], yv.z, acc[2]);
          acc[3] = fmaf(xs[e], yv.w, acc[3]);
        }
      }
    };
    // Round 2: warps 0-3 columns 0-15 (k over all 32 rows of A_lo), warps 4-7 columns 16-31 (k over
    // rows 16-31: D_1 alone); rows 8 (warp % 4) + lane / 4, columns 16 (warp / 4) + 4 (lane % 4).
    {
      const int i = 8 * (warp & 3) + (lane >> 2), j0 = 16 * (warp >> 2) + 4 * (lane & 3);
      float acc[4] = {0.f, 0.f, 0.f, 0.f};
      row_times(acc, LA + (32 + i) * kLd, LA + j0, warp < 4 ? 0 : 16, 32);
      *reinterpret_cast<float4*>(LA + i * kLd + 32 + j0) = make_float4(acc[0], acc[1], acc[2], acc[3]);
    }
    __syncthreads();
    // Round 3: warps 0-3 rows 0-15 (k over D_2's 16 columns), warps 4-7 rows 16-31 (k over 32);
    // rows 4 warp + lane / 8, columns 4 (lane % 8).
    {
      const int i = 4 * warp + (lane >> 3), j0 = 4 * (lane & 7);
      float acc[4] = {0.f, 0.f, 0.f, 0.f};
      row_times(acc, LA + (32 + i) * kLd + 32, LA + 32 + j0, 0, warp < 4 ? 16 : 32);
      *reinterpret_cast<float4*>(LA + (32 + i) * kLd + j0) = make_float4(-acc[0], -acc[1], -acc[2], -acc[3]);
    }
    __syncthreads();  // A is final (lower triangle; the upper one holds T and X)
  }

  // 5. Aw = A diag(beta exp(gc)), Au = A diag(beta): fp32 to the optional outputs; 16-bit (Aw with
  //    the 1/|k| column scale folded in, so w = Aw K^ reads raw k) into the space L, A and R took.
  //    Thread tid handles column j = tid % 64 and rows tid / 64 + 4 q, so the column factors are
  //    computed once.
  {
    const int j = tid & 63, i0 = tid >> 6;
    float av[16];
#pragma unroll
    for (int q = 0; q < 16; ++q) {
      const int i = i0 + 4 * q;
      av[q] = j <= i ? LA[i * kLd + j] : 0.f;
    }
    const float bu = bS[j], bw = bu * expf(gS[j]), rkj = rkS[j];
    __syncthreads();
    T* AwS = reinterpret_cast<T*>(LA);
    T* AuS = AwS + 64 * (Lay::kPitchC / 2);
    const int64_t out_base = (static_cast<int64_t>(row) * p.H + h) * p.tokens + t0;
#pragma unroll
    for (int q = 0; q < 16; ++q) {
      const int i = i0 + 4 * q;
      const float au = av[q] * bu, aw = av[q] * bw;
      AwS[i * (Lay::kPitchC / 2) + j] = from_float<T>(aw * rkj);
      AuS[i * (Lay::kPitchC / 2) + j] = from_float<T>(au);
      if (p.save_a) p.save_a[(save_row + i) * 64 + j] = from_float<T>(av[q]);
      if (i < len) {
        if (p.aw) p.aw[(out_base + i) * 64 + j] = aw;
        if (p.au) p.au[(out_base + i) * 64 + j] = au;
      }
    }
  }
  __syncthreads();

  // 6. w = Aw K (warps 0-3) and u = Au V (warps 4-7), 16 rows a warp, 64 columns at a time; A is
  //    lower triangular, so row block rb needs k-blocks 0..rb only. Each 64-column group leaves through
  //    shared memory, over the columns of k and v it was computed from (dead once every warp is past
  //    the barrier), as 16-byte stores of whole row pieces: the fragments' own stores wrote 16 bytes
  //    of 8 rows each.
  {
    const bool is_w = warp < 4;
    const int rb = warp & 3;
    const uint32_t f_tile = smem_addr(LA) + (is_w ? 0 : 64 * Lay::kPitchC);
    unsigned char* const x_bytes = is_w ? kS : vS;
    const uint32_t x_tile = smem_addr(x_bytes);
    T* const w_out = p.w + vec_off * D;
    T* const u_out = p.u + vec_off * D;
    T* const w_saved = p.save_w ? p.save_w + save_row * D : nullptr;
#pragma unroll 1
    for (int ng = 0; ng < D / 64; ++ng) {
      float acc[8][4];
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[nt][e] = 0.f;
      }
#pragma unroll
      for (int kb = 0; kb < 4; ++kb) {
        if (kb > rb) continue;
        uint32_t a[4];
        load_a(a, f_tile, Lay::kPitchC, 16 * rb, 16 * kb, lane);
#pragma unroll
        for (int np = 0; np < 4; ++np) {
          uint32_t b[2][2];
          load_b2_kn(b, x_tile, Lay::kPitchD, 16 * kb, 64 * ng + 16 * np, lane);
          mma16816<T>(acc[2 * np], a, b[0]);
          mma16816<T>(acc[2 * np + 1], a, b[1]);
        }
      }
      __syncthreads();  // every warp is done reading this group's columns of k and v
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        const int col = 64 * ng + 8 * nt + 2 * t4;
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int i = 16 * rb + g8 + 8 * hh;
          *reinterpret_cast<uint32_t*>(x_bytes + i * Lay::kPitchD + 2 * col) =
              pack2<T>(acc[nt][2 * hh], acc[nt][2 * hh + 1]);
        }
      }
      __syncthreads();
      // 64 rows x 64 columns of w, then of u: 512 pieces of 16 bytes each.
#pragma unroll
      for (int idx = tid; idx < 1024; idx += kPrepThreads) {
        const bool part_w = idx < 512;
        const int r = (idx & 511) >> 3, col = 64 * ng + 8 * (idx & 7);
        const uint4 val = *reinterpret_cast<const uint4*>((part_w ? kS : vS) + r * Lay::kPitchD + 2 * col);
        *reinterpret_cast<uint4*>((part_w ? w_out : u_out) + static_cast<int64_t>(r) * D + col) = val;
        if (part_w && w_saved) *reinterpret_cast<uint4*>(w_saved + static_cast<int64_t>(r) * D + col) = val;
      }
    }
  }
}

}  // namespace ak::linear::cuda::fwd

namespace ak::linear::cuda {

template <class T, int D, int Tile>
void FwdPrep<T, D, Tile>::launch(const Args& p, cudaStream_t stream) {
  if (p.chunks == 0 || p.H == 0) return;
  constexpr int kSmem = fwd::PrepLayout<D>::kBytes;
  auto kernel = fwd::chunk_prep_kernel<T, D>;
  AK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const dim3 grid(static_cast<unsigned>(p.chunks), static_cast<unsigned>(p.H));
  kernel<<<grid, fwd::kPrepThreads, kSmem, stream>>>(p);
  ak::cuda::check_launch("chunk_prep_kernel");
}

}  // namespace ak::linear::cuda
