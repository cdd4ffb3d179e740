// What the two Hopper state kernels (state_wgmma.cuh, state_split.cuh) share: tile loads into
// 128-byte swizzled panels, the stores of the saved states for the backward, and the output side of a
// chunk, (a) P = Q K^T with its causal decay scaling and (b) QS = Q S with its row factors.
#pragma once

#include "arch/sm90.cuh"
#include "arch/wgmma.cuh"
#include "cuda/runtime.cuh"
#include "linear/common/tiles.cuh"
#include "linear/delta/fwd/chunk_sources.cuh"
#include "linear/delta/fwd/layouts.h"
#include "linear/delta/fwd/params.h"
#include "linear/delta/fwd/segments.cuh"
#include "generated/linear_launchers.h"

namespace ak::linear::cuda::fwd {

constexpr int kSm90StateThreads = 256;

// Stores the VT / 64 swizzled panels of a 16-bit [rows, VT] tile (panel stride rows x 128 bytes) to
// rows row0 .. row0 + rows - 1, columns vt0 .. vt0 + VT - 1 of a map whose boxes are 64 x rows, as one
// bulk group of the calling thread (the backward's saved states: Sb, rows = D; U, rows = 64).
template <int VT>
__device__ __forceinline__ void store_panels(const CUtensorMap* map, uint32_t tile, int rows, int vt0, int row0) {
#pragma unroll
  for (int pn = 0; pn < VT / 64; ++pn) {
    tma_store_4d(map, tile + pn * rows * 128, vt0 + 64 * pn, row0, 0, 0);
  }
  bulk_commit();
}

// Stores columns 0 .. VT - 1 (VT <= 64) of a 16-bit [rows, 64] swizzled panel at `tile` to rows of
// `dst` (`ld` elements apart) in 16-byte pieces, by the 128 threads of a warpgroup (e.g. the saved
// states of a tile narrower than a map's 64-column box).
template <int VT, class T>
__device__ __forceinline__ void store_rows16(T* dst, int64_t ld, const unsigned char* tile, int rows, int wtid) {
  constexpr int kPieces = VT / 8;
  static_assert(VT <= 64 && 128 % kPieces == 0, "pieces of one panel");
  for (int e = wtid; e < rows * kPieces; e += 128) {
    const int r = e / kPieces, j = e % kPieces;
    *reinterpret_cast<uint4*>(dst + r * ld + 8 * j) = *reinterpret_cast<const uint4*>(tile + sw128_offset(rows, r, 8 * j));
  }
}

// Copies a 64 x COLS tile of 16-bit rows (`stride` elements apart from `src`; rows >= valid are zero
// filled, nothing read for them) into 128-byte swizzled panels with THREADS threads. A thread's 16-byte
// column chunk is the same on all its rows, so only the row pointer advances.
template <int COLS, int THREADS = kSm90StateThreads, class T>
__device__ __forceinline__ void async_rows_sw128(uint32_t dst, int valid, const T* src, int64_t stride, int tid) {
  constexpr int kChunks = COLS / 8;
  constexpr int kRowsPerPass = THREADS / kChunks;
  static_assert(THREADS % kChunks == 0 && 64 % kRowsPerPass == 0, "tile shape");
  const int c = tid % kChunks, r0 = tid / kChunks;
  const T* s0 = src + r0 * stride + c * 8;
#pragma unroll
  for (int j = 0; j < 64 / kRowsPerPass; ++j) {
    const int r = r0 + j * kRowsPerPass;
    const bool ok = r < valid;
    cp_async16(dst + (c >> 3) * 64 * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4),
               ok ? s0 + j * kRowsPerPass * stride : src, ok ? 16 : 0);
  }
}

// This lane's row address for an x4 ldmatrix / stmatrix of accumulator pairs 2 cb .. 2 cb + 3 of a
// warp's 16 rows (row0 .. row0 + 15) in a tile of `rows` rows of 128-byte swizzled panels: matrix m
// is rows row0 + 8 (m & 1) .. + 7 of columns 8 (cb + m / 2) .. + 7, the order of the pairs in
// the accumulator (even pairs the upper 8 rows, odd the lower, two 8-column blocks).
__device__ __forceinline__ uint32_t frag_x4_addr(uint32_t tile, int rows, int row0, int cb, int lane) {
  const int m = lane >> 3;
  return tile + sw128_offset(rows, row0 + 8 * (m & 1) + (lane & 7), 8 * (cb + (m >> 1)));
}

// ---- the state in registers ----
// A warpgroup holds kMS m64 tiles of S: tile ms covers state rows row0 + 64 ms .. + 63 and the
// block's V columns vt0 .. vt0 + 2 kNA - 1. Element i of a tile sits at row 16 warp + g8 +
// 8 ((i >> 1) & 1), column 8 (i >> 2) + 2 t4 + (i & 1) (g8 = lane / 4, t4 = lane % 4).

struct StateCoords {
  int D, row0, vt0, warp, g8, t4;
  __device__ __forceinline__ int row(int ms, int i) const { return row0 + 64 * ms + 16 * warp + g8 + 8 * ((i >> 1) & 1); }
  __device__ __forceinline__ int col(int i) const { return vt0 + 8 * (i >> 2) + 2 * t4; }
};

// The job's start state: its given state, the identity (a transition run) or zeros.
template <int kMS, int kNA>
__device__ __forceinline__ void load_start_state(float (&S)[kMS][kNA], const StateJob& job, const StateCoords& at) {
#pragma unroll
  for (int ms = 0; ms < kMS; ++ms) {
#pragma unroll
    for (int i = 0; i < kNA; i += 2) {
      const int r = at.row(ms, i), c = at.col(i);
      float2 v = make_float2(0.f, 0.f);
      if (job.init.ptr) {
        v = load_pair(job.init, r, c);
      } else if (job.identity) {
        v.x = r == c ? 1.f : 0.f;
        v.y = r == c + 1 ? 1.f : 0.f;
      }
      S[ms][i] = v.x;
      S[ms][i + 1] = v.y;
    }
  }
}

// S in fp32 to a state in device memory.
template <int kMS, int kNA>
__device__ __forceinline__ void store_state(const float (&S)[kMS][kNA], const StateOut& dst, const StateCoords& at) {
#pragma unroll
  for (int ms = 0; ms < kMS; ++ms) {
#pragma unroll
    for (int i = 0; i < kNA; i += 2) store_pair(dst, at.row(ms, i), at.col(i), S[ms][i], S[ms][i + 1]);
  }
}

// S rounded to 16 bits, two values a register (the order of the accumulator pairs).
template <class T, int kMS, int kNA>
__device__ __forceinline__ void pack_state16(const float (&S)[kMS][kNA], uint32_t (&P)[kMS][kNA / 2]) {
#pragma unroll
  for (int ms = 0; ms < kMS; ++ms) {
#pragma unroll
    for (int i = 0; i < kNA / 2; ++i) P[ms][i] = pack2<T>(S[ms][2 * i], S[ms][2 * i + 1]);
  }
}

// A packed 16-bit S to Sb, a [D, kNA] tile of 128-byte swizzled panels (the N-major operand of W S and
// Q S), four accumulator pairs a stmatrix.
template <int kMS, int kNP>
__device__ __forceinline__ void store_state16(const uint32_t (&P)[kMS][kNP], uint32_t sb, const StateCoords& at,
                                              int lane) {
#pragma unroll
  for (int ms = 0; ms < kMS; ++ms) {
#pragma unroll
    for (int cb = 0; cb < kNP / 2; cb += 2) {
      const uint32_t* a = &P[ms][2 * cb];
      stmatrix_x4(frag_x4_addr(sb, at.D, at.row0 + 64 * ms + 16 * at.warp, cb, lane), a[0], a[1], a[2], a[3]);
    }
  }
}

// S in 16 bits to Sb (store_state16 above).
template <class T, int kMS, int kNA>
__device__ __forceinline__ void store_state16(const float (&S)[kMS][kNA], uint32_t sb, const StateCoords& at,
                                              int lane) {
  uint32_t P[kMS][kNA / 2];
  pack_state16<T>(S, P);
  store_state16(P, sb, at, lane);
}

// The job's chunk_states ([B, H, NC + 1, D, D]) for sequence n and head h, or null.
template <class T>
__device__ __forceinline__ float* chunk_states_of(const StateParams<T>& p, const StateJob& job, int n, int h, int D) {
  const int64_t DD = static_cast<int64_t>(D) * D;
  return p.chunk_states && job.chunk_states ? p.chunk_states + (static_cast<int64_t>(n) * p.H + h) * (p.map.NC + 1) * DD
                                            : nullptr;
}

// ---- the output side, shared by the two-role and split kernels ----
// A thread (warp, g8 = lane / 4, t4 = lane % 4) of a warpgroup holds rows 16 warp + g8 and + 8 of a 64-row
// accumulator; pair i of it is at row + 8 ((i / 2) % 2), columns 8 (i / 4) + 2 t4 and + 1.

// (a) P = Q K^T and (b) QS = Q Sb (Sb an N-major D x VT tile), two commit groups so that P's scaling
// can start while QS runs. Q and K are 64 x D tiles of 128-byte swizzled panels.
template <class T, int D, int VT>
__device__ __forceinline__ void issue_p_and_qs(float (&pacc)[32], float (&qs)[VT / 2], uint32_t q_tile,
                                               uint32_t k_tile, uint64_t desc_sb) {
  wgmma_fence();
  const uint64_t dq = make_desc_sw128(q_tile, 16, 1024), dk = make_desc_sw128(k_tile, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    Wgmma<64, T>::template ss<0, 0>(pacc, dq + kmajor_step(64, kk), dk + kmajor_step(64, kk), kk > 0);
  }
  wgmma_commit();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    Wgmma<VT, T>::template ss<0, 1>(qs, dq + kmajor_step(64, kk), desc_sb + mnmajor_step(kk), kk > 0);
  }
  wgmma_commit();
}

// Row factors rq_i = scale / |q_i| (the L2 norm in the kernel) or scale, from the Q tile in shared
// memory (four lanes share a row: each sums two 16-byte pieces of every panel).
template <class T, int D>
__device__ __forceinline__ void q_row_factors(float (&rq)[2], const unsigned char* q_tile, bool l2norm, float scale,
                                              int warp, int g8, int t4) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = 16 * warp + g8 + 8 * r;
    float ss = 0.f;
    if (l2norm) {
#pragma unroll
      for (int pn = 0; pn < D / 64; ++pn) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          ss = add_squares8<T>(
              *reinterpret_cast<const uint4*>(q_tile + pn * 64 * 128 + i * 128 + (((2 * t4 + hh) ^ (i & 7)) << 4)), ss);
        }
      }
      ss += __shfl_xor_sync(0xffffffffu, ss, 1);
      ss += __shfl_xor_sync(0xffffffffu, ss, 2);
    }
    rq[r] = scale * (l2norm ? rsqrtf(ss + kL2NormEps) : 1.f);
  }
}

// P_ij = rq_i rk_j e^(gc_i - gc_j) (q_i . k_j) on and below the diagonal, as the 16-bit A fragments of
// P U: every element computed, then selected (no branches; above the diagonal the exponential may
// overflow and is dropped). rk holds ones without the L2 norm.
template <class T>
__device__ __forceinline__ void scale_p(uint32_t (&pf)[16], const float (&pacc)[32], const float* gc, const float* rk,
                                        const float (&rq)[2], int warp, int g8, int t4) {
  const float gi[2] = {gc[16 * warp + g8], gc[16 * warp + g8 + 8]};
#pragma unroll
  for (int i = 0; i < 32; i += 2) {
    const int hh = (i >> 1) & 1, ti = 16 * warp + g8 + 8 * hh, tj = 8 * (i >> 2) + 2 * t4;
    const float2 gj = *reinterpret_cast<const float2*>(gc + tj);
    const float2 rkj = *reinterpret_cast<const float2*>(rk + tj);
    const float e0 = rq[hh] * rkj.x * __expf(gi[hh] - gj.x) * pacc[i];
    const float e1 = rq[hh] * rkj.y * __expf(gi[hh] - gj.y) * pacc[i + 1];
    pf[i >> 1] = pack2<T>(tj <= ti ? e0 : 0.f, tj + 1 <= ti ? e1 : 0.f);
  }
}

// The normalised policy's factors 1 / (sum_j P_ij + rq_i e^(gc_i) (q_i . z) + eps) of this thread's two
// rows: P as the 16-bit fragments that enter P U (so the numerator and the normaliser sum the same
// scores), z the keys' decayed sum before the chunk (fp32 [D]); each of a row's four lanes takes a
// quarter of q_i . z.
template <class T, int D>
__device__ __forceinline__ void normaliser_rows(float (&inv)[2], const uint32_t (&pf)[16], const unsigned char* q_tile,
                                                const float* z, const float (&rq)[2], const float* gc, float eps,
                                                int warp, int g8, int t4) {
  float sum[2] = {0.f, 0.f};
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const float2 x = unpack2<T>(pf[j]);
    sum[j & 1] += x.x + x.y;
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = 16 * warp + g8 + 8 * r;
    float dot = 0.f;
#pragma unroll
    for (int piece = 0; piece < D / 32; ++piece) {
      const int c0 = (D / 4) * t4 + 8 * piece;
      const uint4 raw = *reinterpret_cast<const uint4*>(q_tile + sw128_offset(64, i, c0));
      const float4 z0 = *reinterpret_cast<const float4*>(z + c0), z1 = *reinterpret_cast<const float4*>(z + c0 + 4);
      const float2 q0 = unpack2<T>(raw.x), q1 = unpack2<T>(raw.y), q2 = unpack2<T>(raw.z), q3 = unpack2<T>(raw.w);
      dot += (q0.x * z0.x + q0.y * z0.y) + (q1.x * z0.z + q1.y * z0.w) + (q2.x * z1.x + q2.y * z1.y) +
             (q3.x * z1.z + q3.y * z1.w);
    }
    float rows = sum[r];
#pragma unroll
    for (int m = 1; m <= 2; m <<= 1) {
      dot += __shfl_xor_sync(0xffffffffu, dot, m);
      rows += __shfl_xor_sync(0xffffffffu, rows, m);
    }
    inv[r] = 1.f / (rows + rq[r] * __expf(gc[i]) * dot + eps);
  }
}

// QS rows times rq_i e^(gc_i).
template <int kNA>
__device__ __forceinline__ void scale_qs(float (&qs)[kNA], const float (&rq)[2], const float* gc, int warp, int g8) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float si = rq[r] * __expf(gc[16 * warp + g8 + 8 * r]);
#pragma unroll
    for (int i = 2 * r; i < kNA; i += 4) {
      qs[i] *= si;
      qs[i + 1] *= si;
    }
  }
}

// ---- host side of both launches ----

// Launches a Hopper state kernel: a block of `threads` per job (a sequence, or a segment of one in the
// segment passes) and V tile, by value head, with kSmem bytes of shared memory; the kernel takes the
// parameters, then `rest`, then the maps of the saved states (empty ones when nothing is saved: the
// kernels read them only when p.save_chunks > 0).
template <int D, int VT, int kSmem, class T, class Kernel, class... Rest>
void launch_state_kernel(Kernel kernel, const char* name, int threads, const StateArgs<T>& a, cudaStream_t stream,
                         Rest... rest) {
  const StateParams<T>& p = a.p;
  if (p.N == 0 || p.H == 0) return;
  AK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  static const SaveMaps none{};
  const SaveMaps& save = a.save != nullptr ? *a.save : none;
  const int jobs = p.seg_pass == 0 ? p.N : p.N * (p.seg_pass == 1 ? 2 : 1) * (p.seg_count - 1);
  const dim3 grid(static_cast<unsigned>(jobs * (D / VT)), static_cast<unsigned>(p.H));
  kernel<<<grid, threads, kSmem, stream>>>(p, rest..., save.hs, save.vs);
  ::ak::cuda::check_launch(name);
}

}  // namespace ak::linear::cuda::fwd
