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
#include "linear/common/gate.cuh"
#include "linear/common/kkt.cuh"
#include "linear/common/solve.cuh"
#include "linear/common/tiles.cuh"
#include "linear/delta/fwd/layouts.h"
#include "linear/delta/fwd/params.h"
#include "generated/linear_launchers.h"

namespace ak::linear::cuda::fwd {

constexpr int kPrepThreads = 256;

// Step 2 of both stage-1 kernels: the gate cumsum (warp 0: two tokens a lane, then a warp scan) and
// 1 / |k| of every row (ones without the L2 norm), stored for stage 2 behind a barrier. 8 rows a warp,
// 4 lanes a row; piece(r, q, c) is the address of lane q's c-th 16-byte piece of row r (D / 32 of them,
// the four lanes covering the row).
template <class T, int D, class Piece>
__device__ __forceinline__ void gate_and_norms(float* gS, float* rkS, const PrepParams<T>& p, int64_t vec_off, int tid,
                                               Piece&& piece) {
  const int warp = tid >> 5, lane = tid & 31;
  if (warp == 0) chunk_cumsum64(gS, lane);
  if (p.l2norm) {
    const int r = 8 * warp + (lane >> 2), q = lane & 3;
    float ss = 0.f;
#pragma unroll
    for (int c = 0; c < D / 32; ++c) ss = add_squares8<T>(*reinterpret_cast<const uint4*>(piece(r, q, c)), ss);
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
}

// Step 5 of both stage-1 kernels (this one and prep_sm90.cuh), from A (fp32, the lower triangle of LA):
// Aw = A diag(beta exp(gc)) with the 1/|k| column scale folded in (so w = Aw K^ reads raw k) and
// Au = A diag(beta). The fp32 values go to the optional outputs and A to the backward's buffer; the
// 16-bit ones to put(i, j, aw, au), after a barrier (they may overwrite LA). Thread tid of 256: column
// j = tid % 64 and rows tid / 64 + 4 q, so the column factors are computed once.
template <class T, int kLd, class Put>
__device__ __forceinline__ void wy_factors(const float* LA, const float* gS, const float* bS, const float* rkS,
                                           const PrepParams<T>& p, int row, int h, int t0, int len, int64_t save_row,
                                           int tid, Put&& put) {
  const int j = tid & 63, i0 = tid >> 6;
  float av[16];
#pragma unroll
  for (int q = 0; q < 16; ++q) {
    const int i = i0 + 4 * q;
    av[q] = j <= i ? LA[i * kLd + j] : 0.f;
  }
  const float bu = bS[j], bw = bu * expf(gS[j]), rkj = rkS[j];
  __syncthreads();  // every thread has read A
  const int64_t out_base = (static_cast<int64_t>(row) * p.H + h) * p.tokens + t0;
#pragma unroll
  for (int q = 0; q < 16; ++q) {
    const int i = i0 + 4 * q;
    const float au = av[q] * bu, aw = av[q] * bw;
    put(i, j, from_float<T>(aw * rkj), from_float<T>(au));
    if (p.save_a) p.save_a[(save_row + i) * 64 + j] = from_float<T>(av[q]);
    if (i < len) {
      if (p.aw) p.aw[(out_base + i) * 64 + j] = aw;
      if (p.au) p.au[(out_base + i) * 64 + j] = au;
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
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  int row, t0, len;
  p.map.chunk_rows(gch, row, t0, len);
  if (len == 0) return;  // an empty chunk past a packed call's live ones
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

  // 2. Gate cumsum and 1 / |k| (gate_and_norms above), each lane a quarter of its row.
  gate_and_norms<T, D>(gS, rkS, p, vec_off, tid,
                       [&](int r, int q, int c) { return kS + r * Lay::kPitchD + q * (D / 4) * 2 + c * 16; });

  // 3. Scaled K K^T: L[i][j] = beta_i rk_i rk_j exp(gc_i - gc_j) (k_i . k_j) for j < i.
  {
    float acc[4][4];
    causal_tiles<T, D>(acc, smem_addr(kS), smem_addr(kS), warp, lane);
    for_causal_pairs(acc, warp, lane, [&](int i, int j, float a0, float a1) {
      const float bi = bS[i] * rkS[i], gi = gS[i];
      // Computed for every element, then selected: no branches (above the diagonal the exponential
      // may overflow; it is dropped).
      const float2 gj = *reinterpret_cast<const float2*>(gS + j), rkj = *reinterpret_cast<const float2*>(rkS + j);
      const float e0 = bi * rkj.x * __expf(gi - gj.x) * a0;
      const float e1 = bi * rkj.y * __expf(gi - gj.y) * a1;
      *reinterpret_cast<float2*>(&LA[i * kLd + j]) = make_float2(j < i ? e0 : 0.f, j + 1 < i ? e1 : 0.f);
    });
  }
  __syncthreads();

  // 4. A = (I + L)^-1, fp32, in place over L (linear/common/solve.cuh).
  invert_unit_lower64<kLd, kPrepThreads>(LA, tid);

  // 5. Aw and Au (wy_factors above), 16-bit into the space L, A and R took.
  {
    T* AwS = reinterpret_cast<T*>(LA);
    T* AuS = AwS + 64 * (Lay::kPitchC / 2);
    wy_factors<T, kLd>(LA, gS, bS, rkS, p, row, h, t0, len, save_row, tid, [&](int i, int j, T aw, T au) {
      AwS[i * (Lay::kPitchC / 2) + j] = aw;
      AuS[i * (Lay::kPitchC / 2) + j] = au;
    });
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
      float acc[1][8][4];
      zero_acc(acc);
      causal_rows_times<T, 8>(acc[0], f_tile, Lay::kPitchC, rb, x_tile, Lay::kPitchD, 64 * ng, lane);
      __syncthreads();  // every warp is done reading this group's columns of k and v
      for_acc_pairs(acc, 16 * rb, 64 * ng, lane, [&](int i, int col, const float* v) {
        *reinterpret_cast<uint32_t*>(x_bytes + i * Lay::kPitchD + 2 * col) = pack2<T>(v[0], v[1]);
      });
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

namespace fwd {
// Launches a stage-1 kernel: a block of `threads` per chunk and value head, with kSmem bytes of shared
// memory (both stage-1 kernels).
template <int kSmem, class T, class Kernel>
void launch_prep(Kernel kernel, const char* name, int threads, const PrepParams<T>& p, cudaStream_t stream) {
  if (p.chunks == 0 || p.H == 0) return;
  AK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const dim3 grid(static_cast<unsigned>(p.chunks), static_cast<unsigned>(p.H));
  kernel<<<grid, threads, kSmem, stream>>>(p);
  ::ak::cuda::check_launch(name);
}
}  // namespace fwd

template <class T, int D, int Tile>
void FwdPrep<T, D, Tile>::launch(const Args& p, cudaStream_t stream) {
  fwd::launch_prep<fwd::PrepLayout<D>::kBytes>(fwd::chunk_prep_kernel<T, D>, "chunk_prep_kernel", fwd::kPrepThreads, p,
                                               stream);
}

}  // namespace ak::linear::cuda
