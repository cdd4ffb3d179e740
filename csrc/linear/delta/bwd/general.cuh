// Kernels of the general (fp32 SIMT) path of the delta-rule backward; see general.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "linear/delta/bwd/problem.cuh"

namespace ak::linear::cuda::bwd {
namespace general_detail {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kSlice = 32;  // value columns of the state per block in the sequential stages

struct GenWork {
  float *Qp, *Kp, *Vp, *dOp, *Gc, *Bp;  // packed inputs: [HK or H][P][D], [H][P]
  float *Ab, *Abt, *Pb;                 // [H][P][C]: A, A^T, P
  float *W, *U, *dU, *dQh, *dKh;        // [H][P][K or V]; W is overwritten by dw before grads
  float *Hs, *dHs;                      // [H][NCt][K][V]
  // Chunk-local products computed by the batched GEMM (general_gemm.cuh) before the
  // stages that use them, so that no stage reads rows of a D-wide matrix with a stride:
  float *KK, *QK;          // [HK][P][C]: K K^T, Q K^T (prep, grads)
  float *dOU, *dUV, *dWK;  // [H][P][C]: dO v_new^T, dv_new V^T, dw K^T (grads)
  // Also before grads: dQh holds dO h^T, dKh holds v_new dh'^T and W holds dw = -dv_new h^T.
};

// ---- pack ----

template <class T>
__global__ void __launch_bounds__(kThreads) pack_rows(RowView src, int D, ChunkMap map, int64_t P, float* dst,
                                                      bool l2) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t pr = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const int head = blockIdx.y;
  if (pr >= P) return;
  const int C = map.C;
  const int g = static_cast<int>(pr / C), r = static_cast<int>(pr - static_cast<int64_t>(g) * C);
  const int4 ci = map.chunk_of(g);
  float* out = dst + (static_cast<int64_t>(head) * P + pr) * D;
  if (r >= ci.z) {
    for (int d = lane; d < D; d += 32) out[d] = 0.f;
    return;
  }
  const T* in = static_cast<const T*>(src.p) + src.offset(ci.x, ci.y + r, head);
  float mul = 1.f;
  if (l2) {
    float ss = 0.f;
    for (int d = lane; d < D; d += 32) {
      const float x = to_float(in[d]);
      ss += x * x;
    }
    mul = rsqrtf(warp_sum(ss) + kL2NormEps);
  }
  for (int d = lane; d < D; d += 32) out[d] = to_float(in[d]) * mul;
}

// g and beta ([B, T, H] float32) into [H][P]; a null source gives zeros.
__global__ void pack_scalars(RowView src, ChunkMap map, int64_t P, float* dst) {
  const int64_t pr = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int head = blockIdx.y;
  if (pr >= P) return;
  const int C = map.C;
  const int g = static_cast<int>(pr / C), r = static_cast<int>(pr - static_cast<int64_t>(g) * C);
  const int4 ci = map.chunk_of(g);
  float x = 0.f;
  if (src.p != nullptr && r < ci.z) x = static_cast<const float*>(src.p)[src.offset(ci.x, ci.y + r, head)];
  dst[static_cast<int64_t>(head) * P + pr] = x;
}

// ---- chunk-local row products ----

// The C x D products of prep and grads (a C x C coefficient matrix times a D-wide matrix X in
// global memory, D <= 256) run four rows per warp: lane owns columns lane + 32 c (c < 8), so one
// coalesced load of X[j][d] serves four rows and the four coefficients are warp-wide broadcasts.
constexpr int kRowsPerWarp = 4;
constexpr int kMaxColsPerLane = 8;

// acc[r][c] += sum_{j0 <= j < j1} coef(r, j) X[j * ld + lane + 32 c] for lane + 32 c < D.
template <class Coef>
__device__ __forceinline__ void four_rows_times(const float* __restrict__ X, int ld, int D, int j0, int j1,
                                                Coef coef, float (&acc)[kRowsPerWarp][kMaxColsPerLane]) {
  const int lane = threadIdx.x & 31;
  for (int j = j0; j < j1; ++j) {
    float cr[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) cr[r] = coef(r, j);
#pragma unroll
    for (int c = 0; c < kMaxColsPerLane; ++c) {
      const int d = lane + 32 * c;
      if (d < D) {
        const float x = X[j * ld + d];
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) acc[r][c] = fmaf(cr[r], x, acc[r][c]);
      }
    }
  }
}

__device__ __forceinline__ void zero(float (&acc)[kRowsPerWarp][kMaxColsPerLane]) {
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
    for (int c = 0; c < kMaxColsPerLane; ++c) acc[r][c] = 0.f;
  }
}

// ---- prep: gc, A, w, u, P per (chunk, value head) ----

__global__ void __launch_bounds__(kThreads) prep(Problem p, GenWork w) {
  extern __shared__ float sm[];
  const int C = p.C, K = p.K, V = p.V;
  float* L = sm;
  float* A = L + C * C;
  float* gc = A + C * C;
  float* bt = gc + C;
  float* bg = bt + C;  // beta e^gc
  const int g = blockIdx.x, h = blockIdx.y, hk = h / p.group;
  if (p.map.chunk_of(g).z == 0) return;  // an empty chunk past a packed call's live ones
  const int64_t P = p.padded();
  const int64_t row = static_cast<int64_t>(h) * P + static_cast<int64_t>(g) * C;
  const int64_t rowk = static_cast<int64_t>(hk) * P + static_cast<int64_t>(g) * C;
  const float* Kc = w.Kp + rowk * K;
  const float* Vc = w.Vp + row * V;
  const float* KKc = w.KK + rowk * C;
  const float* QKc = w.QK + rowk * C;
  const int tid = threadIdx.x;

  if (tid == 0) {
    float s = 0.f;
    for (int i = 0; i < C; ++i) {
      s += w.Gc[row + i];  // zeros when not gated
      gc[i] = s;
    }
  }
  for (int i = tid; i < C; i += kThreads) bt[i] = w.Bp[row + i];
  __syncthreads();
  for (int i = tid; i < C; i += kThreads) {
    w.Gc[row + i] = gc[i];  // from here on Gc holds the cumulated gate
    bg[i] = bt[i] * expf(gc[i]);
  }
  // L strictly lower; A starts as the identity.
  for (int idx = tid; idx < C * C; idx += kThreads) {
    const int i = idx / C, j = idx - i * C;
    float l = 0.f;
    if (j < i) l = bt[i] * KKc[idx] * expf(gc[i] - gc[j]);
    L[idx] = l;
    A[idx] = i == j ? 1.f : 0.f;
  }
  __syncthreads();
  // Forward substitution for (I + L) A = I, one row at a time: A_i = e_i - sum_{m<i} L_im A_m.
  for (int i = 1; i < C; ++i) {
    for (int j = tid; j < i; j += kThreads) {
      float s = 0.f;
      for (int m = j; m < i; ++m) s += L[i * C + m] * A[m * C + j];
      A[i * C + j] = -s;
    }
    __syncthreads();
  }
  float* Aout = w.Ab + row * C;
  float* Atout = w.Abt + row * C;
  for (int idx = tid; idx < C * C; idx += kThreads) {
    const int i = idx / C, j = idx - i * C;
    Aout[idx] = A[idx];
    Atout[idx] = A[j * C + i];
  }
  // w = A diag(beta e^gc) K, u = A diag(beta) V (A is zero above the diagonal)
  const int warp = tid >> 5, lane = tid & 31;
  float* Wc = w.W + row * K;
  float* Uc = w.U + row * V;
  for (int i0 = warp * kRowsPerWarp; i0 < C; i0 += kWarps * kRowsPerWarp) {
    float acc[kRowsPerWarp][kMaxColsPerLane];
    zero(acc);
    four_rows_times(Kc, K, K, 0, i0 + kRowsPerWarp, [&](int r, int j) { return A[(i0 + r) * C + j] * bg[j]; },
                    acc);
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
      for (int c = 0; c < kMaxColsPerLane; ++c) {
        const int d = lane + 32 * c;
        if (d < K) Wc[(i0 + r) * K + d] = acc[r][c];
      }
    }
    zero(acc);
    four_rows_times(Vc, V, V, 0, i0 + kRowsPerWarp, [&](int r, int j) { return A[(i0 + r) * C + j] * bt[j]; },
                    acc);
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
      for (int c = 0; c < kMaxColsPerLane; ++c) {
        const int e = lane + 32 * c;
        if (e < V) Uc[(i0 + r) * V + e] = acc[r][c];
      }
    }
  }
  float* Pc = w.Pb + row * C;
  for (int idx = tid; idx < C * C; idx += kThreads) {
    const int i = idx / C, j = idx - i * C;
    float s = 0.f;
    if (j <= i) s = QKc[idx] * (p.scale * expf(gc[i] - gc[j]));
    Pc[idx] = s;
  }
}

// ---- states and dstates: sequential over the chunks of a sequence ----
//
// A block owns a slice of kSlice value columns of the state of one (sequence, value head); the
// slice (K x kSlice) lives in shared memory. Each chunk needs products of two shapes:
//  - C x kSlice over K (w h, k dh): warp w owns rows w * C/8 .. +C/8 and lane = column; the
//    C x K operand is staged transposed, kStageD of its columns at a time, so that a warp reads
//    the C/8 values of one reduction step as float4 broadcasts;
//  - K x kSlice over C (k^T v_new, q^T dO, w^T dv_new): thread (td, tj) owns rows td + 32 r
//    (r < 8) and columns 4 tj .. 4 tj + 3; the C x kSlice operand is in shared memory (float4 reads)
//    and the C x K one is read from global memory (4 consecutive floats per warp and row).
constexpr int kStageD = 16;
static_assert(kSlice == 32, "the sequential stages map lanes to the columns of a slice");
static_assert(kThreads == 256, "the K x kSlice tiles assume 32 x 8 threads");

// Shared memory (floats) of states_fwd and states_bwd: the slice, two C x kSlice tiles, the
// staged transposed operand, and two per-row factors.
__host__ __device__ inline int states_smem_floats(int C, int K) {
  return K * kSlice + 2 * C * kSlice + kStageD * (C + 4) + 2 * C;
}

// acc[r] -= / += sum_d X[i_r][d] S[d][lane] for the warp's rows i_r = row0 + r (r < rows <= 16):
// X is C x K row-major in global memory, S = the K x kSlice slice in shared memory. Every thread of
// the block must call it (it synchronises).
__device__ __forceinline__ void rows_times_slice(const float* __restrict__ X, int C, int K, const float* S,
                                                 float* xt, int row0, int rows, float sign, float (&acc)[16]) {
  const int tid = threadIdx.x, lane = tid & 31;
  const int ld = C + 4;  // rows of xt: float4-aligned, 2-way conflicts on the transposing stores
  for (int d0 = 0; d0 < K; d0 += kStageD) {
    __syncthreads();  // the previous stage (or the caller's writes) is done
    for (int idx = tid; idx < C * kStageD; idx += kThreads) {
      const int i = idx / kStageD, dd = idx - i * kStageD, d = d0 + dd;
      xt[dd * ld + i] = d < K ? sign * X[i * K + d] : 0.f;
    }
    __syncthreads();
    const int nd = min(kStageD, K - d0);
    for (int dd = 0; dd < nd; ++dd) {
      const float sv = S[(d0 + dd) * kSlice + lane];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        if (4 * q < rows) {
          const float4 x = *reinterpret_cast<const float4*>(&xt[dd * ld + row0 + 4 * q]);
          acc[4 * q + 0] = fmaf(x.x, sv, acc[4 * q + 0]);
          acc[4 * q + 1] = fmaf(x.y, sv, acc[4 * q + 1]);
          acc[4 * q + 2] = fmaf(x.z, sv, acc[4 * q + 2]);
          acc[4 * q + 3] = fmaf(x.w, sv, acc[4 * q + 3]);
        }
      }
    }
  }
}

// acc[r][c] += sum_i X[i][td + 32 r] * T[i][4 tj + c] for r < 8 with td + 32 r < K: X is C x K
// row-major in global memory, T a C x kSlice tile in shared memory. No synchronisation.
__device__ __forceinline__ void cols_times_tile(const float* __restrict__ X, int C, int K, const float* T,
                                                float (&acc)[8][4]) {
  const int td = threadIdx.x >> 3, tj = threadIdx.x & 7;
  for (int i = 0; i < C; ++i) {
    const float4 t = *reinterpret_cast<const float4*>(&T[i * kSlice + 4 * tj]);
#pragma unroll
    for (int r = 0; r < 8; ++r) {
      const int d = td + 32 * r;
      if (d < K) {
        const float x = X[i * K + d];
        acc[r][0] = fmaf(x, t.x, acc[r][0]);
        acc[r][1] = fmaf(x, t.y, acc[r][1]);
        acc[r][2] = fmaf(x, t.z, acc[r][2]);
        acc[r][3] = fmaf(x, t.w, acc[r][3]);
      }
    }
  }
}

// h before each chunk; u becomes v_new = u - w h.
__global__ void __launch_bounds__(kThreads) states_fwd(Problem p, GenWork w) {
  extern __shared__ __align__(16) float sm[];
  const int C = p.C, K = p.K, V = p.V;
  float* hs = sm;                   // K x kSlice: the state slice
  float* vn = hs + K * kSlice;      // C x kSlice: e^(gl - gc_i) v_new_i
  float* xt = vn + 2 * C * kSlice;  // kStageD x (C + 4) (after a C x kSlice tile states_bwd uses)
  float* decs = xt + kStageD * (C + 4);
  // Block x = sequence * slices + slice (gridDim.z would cap the sequences at 65535).
  const int slices = (p.V + kSlice - 1) / kSlice;
  const int n = blockIdx.x / slices, vs = (blockIdx.x % slices) * kSlice, h = blockIdx.y, hk = h / p.group;
  const int nv = min(kSlice, V - vs);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int td = tid >> 3, tj = tid & 7;
  const int rows = C / kWarps, row0 = warp * rows;  // C x kSlice products: the warp's rows
  const int64_t P = p.padded();
  const int4 si = p.map.seq_of(n);
  const int nch = (si.z - si.y + C - 1) / C;
  for (int idx = tid; idx < K * kSlice; idx += kThreads) {
    const int d = idx / kSlice, j = idx - d * kSlice;
    float x = 0.f;
    if (j < nv && p.initial_state != nullptr) {
      x = p.initial_state[((static_cast<int64_t>(n) * p.H + h) * K + d) * V + vs + j];
    }
    hs[idx] = x;
  }
  for (int c = 0; c < nch; ++c) {
    const int g = si.w + c;
    const int64_t row = static_cast<int64_t>(h) * P + static_cast<int64_t>(g) * C;
    const float* gcg = w.Gc + row;
    const float gl = gcg[C - 1];
    __syncthreads();  // hs holds the state before this chunk
    for (int i = tid; i < C; i += kThreads) decs[i] = expf(gl - gcg[i]);
    float* Hout = w.Hs + (static_cast<int64_t>(h) * p.NCt + g) * K * V;
    for (int idx = tid; idx < K * nv; idx += kThreads) {
      const int d = idx / nv, j = idx - d * nv;
      Hout[d * V + vs + j] = hs[d * kSlice + j];
    }
    const float* Wc = w.W + row * K;
    float* Uc = w.U + row * V;
    const float* Kc = w.Kp + (static_cast<int64_t>(hk) * P + static_cast<int64_t>(g) * C) * K;
    // v_new = u - w h
    float acc[16];
#pragma unroll
    for (int r = 0; r < 16; ++r) acc[r] = (r < rows && lane < nv) ? Uc[(row0 + r) * V + vs + lane] : 0.f;
    rows_times_slice(Wc, C, K, hs, xt, row0, rows, -1.f, acc);
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      if (r < rows) {
        const int i = row0 + r;
        if (lane < nv) Uc[i * V + vs + lane] = acc[r];
        vn[i * kSlice + lane] = lane < nv ? decs[i] * acc[r] : 0.f;
      }
    }
    __syncthreads();  // vn complete; every read of hs for w h is done
    // h' = e^gl h + K^T diag(e^(gl - gc)) v_new
    const float eg = expf(gl);
    float acc2[8][4];
#pragma unroll
    for (int r = 0; r < 8; ++r) {
      const int d = td + 32 * r;
      const float4 hv = d < K ? *reinterpret_cast<const float4*>(&hs[d * kSlice + 4 * tj]) : float4{};
      acc2[r][0] = eg * hv.x;
      acc2[r][1] = eg * hv.y;
      acc2[r][2] = eg * hv.z;
      acc2[r][3] = eg * hv.w;
    }
    cols_times_tile(Kc, C, K, vn, acc2);
#pragma unroll
    for (int r = 0; r < 8; ++r) {
      const int d = td + 32 * r;
      if (d < K) {
        *reinterpret_cast<float4*>(&hs[d * kSlice + 4 * tj]) =
            make_float4(acc2[r][0], acc2[r][1], acc2[r][2], acc2[r][3]);
      }
    }
  }
}

// dh after each chunk (reverse), dv_new = P^T dO + diag(e^(gl - gc)) K dh.
__global__ void __launch_bounds__(kThreads) states_bwd(Problem p, GenWork w) {
  extern __shared__ __align__(16) float sm[];
  const int C = p.C, K = p.K, V = p.V;
  float* hs = sm;                   // K x kSlice: the slice of dh
  float* dos = hs + K * kSlice;     // C x kSlice: dO
  float* dus = dos + C * kSlice;    // C x kSlice: dv_new
  float* xt = dus + C * kSlice;     // kStageD x (C + 4)
  float* decs = xt + kStageD * (C + 4);
  float* gms = decs + C;
  // Block x = sequence * slices + slice (gridDim.z would cap the sequences at 65535).
  const int slices = (p.V + kSlice - 1) / kSlice;
  const int n = blockIdx.x / slices, vs = (blockIdx.x % slices) * kSlice, h = blockIdx.y, hk = h / p.group;
  const int nv = min(kSlice, V - vs);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int td = tid >> 3, tj = tid & 7;
  const int rows = C / kWarps, row0 = warp * rows;
  const int64_t P = p.padded();
  const int4 si = p.map.seq_of(n);
  const int nch = (si.z - si.y + C - 1) / C;
  const int64_t state_base = (static_cast<int64_t>(n) * p.H + h) * K * V;
  for (int idx = tid; idx < K * kSlice; idx += kThreads) {
    const int d = idx / kSlice, j = idx - d * kSlice;
    float x = 0.f;
    if (j < nv && p.d_final_state != nullptr) x = p.d_final_state[state_base + d * V + vs + j];
    hs[idx] = x;
  }
  for (int c = nch - 1; c >= 0; --c) {
    const int g = si.w + c;
    const int64_t row = static_cast<int64_t>(h) * P + static_cast<int64_t>(g) * C;
    const int64_t rowk = static_cast<int64_t>(hk) * P + static_cast<int64_t>(g) * C;
    const float* gcg = w.Gc + row;
    const float gl = gcg[C - 1];
    const float* Pc = w.Pb + row * C;
    const float* dOc = w.dOp + row * V;
    const float* Kc = w.Kp + rowk * K;
    const float* Qc = w.Qp + rowk * K;
    const float* Wc = w.W + row * K;
    float* dUc = w.dU + row * V;
    __syncthreads();  // hs holds dh after this chunk; the previous chunk's tiles are consumed
    for (int i = tid; i < C; i += kThreads) {
      decs[i] = expf(gl - gcg[i]);
      gms[i] = p.scale * expf(gcg[i]);
    }
    float* dHout = w.dHs + (static_cast<int64_t>(h) * p.NCt + g) * K * V;
    for (int idx = tid; idx < K * nv; idx += kThreads) {
      const int d = idx / nv, j = idx - d * nv;
      dHout[d * V + vs + j] = hs[d * kSlice + j];
    }
    for (int idx = tid; idx < C * kSlice; idx += kThreads) {
      const int i = idx / kSlice, e = idx - i * kSlice;
      dos[idx] = e < nv ? dOc[i * V + vs + e] : 0.f;
    }
    // t = K dh (rows_times_slice synchronises before reading dos, decs)
    float t[16];
#pragma unroll
    for (int r = 0; r < 16; ++r) t[r] = 0.f;
    rows_times_slice(Kc, C, K, hs, xt, row0, rows, 1.f, t);
    // s = P^T dO: P is zero above the diagonal, so rows i >= row0 cover every i >= j of the warp
    float s[16];
#pragma unroll
    for (int r = 0; r < 16; ++r) s[r] = 0.f;
    for (int i = row0; i < C; ++i) {
      const float dv = dos[i * kSlice + lane];
#pragma unroll
      for (int r = 0; r < 16; ++r) {
        if (r < rows) s[r] = fmaf(Pc[i * C + row0 + r], dv, s[r]);
      }
    }
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      if (r < rows) {
        const int j = row0 + r;
        const float du = s[r] + decs[j] * t[r];
        if (lane < nv) dUc[j * V + vs + lane] = du;
        dus[j * kSlice + lane] = lane < nv ? du : 0.f;
      }
    }
    __syncthreads();  // dus complete; every read of hs for K dh is done
    // dh = e^gl dh' + sum_i (gms_i q_i^T dO_i - w_i^T dv_new_i)
    float acc[8][4];
#pragma unroll
    for (int r = 0; r < 8; ++r) acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = 0.f;
    for (int i = 0; i < C; ++i) {
      const float4 o = *reinterpret_cast<const float4*>(&dos[i * kSlice + 4 * tj]);
      const float4 u = *reinterpret_cast<const float4*>(&dus[i * kSlice + 4 * tj]);
      const float gq = gms[i];
#pragma unroll
      for (int r = 0; r < 8; ++r) {
        const int d = td + 32 * r;
        if (d < K) {
          const float q = gq * Qc[i * K + d], wv = Wc[i * K + d];
          acc[r][0] = fmaf(q, o.x, acc[r][0]) - wv * u.x;
          acc[r][1] = fmaf(q, o.y, acc[r][1]) - wv * u.y;
          acc[r][2] = fmaf(q, o.z, acc[r][2]) - wv * u.z;
          acc[r][3] = fmaf(q, o.w, acc[r][3]) - wv * u.w;
        }
      }
    }
    const float eg = expf(gl);
#pragma unroll
    for (int r = 0; r < 8; ++r) {
      const int d = td + 32 * r;
      if (d < K) {
        float4* hv = reinterpret_cast<float4*>(&hs[d * kSlice + 4 * tj]);
        const float4 o = *hv;
        *hv = make_float4(eg * o.x + acc[r][0], eg * o.y + acc[r][1], eg * o.z + acc[r][2], eg * o.w + acc[r][3]);
      }
    }
  }
  __syncthreads();
  if (p.d_initial_state != nullptr) {
    for (int idx = tid; idx < K * nv; idx += kThreads) {
      const int d = idx / nv, j = idx - d * nv;
      p.d_initial_state[state_base + d * V + vs + j] = hs[d * kSlice + j];
    }
  }
}

// ---- grads: everything chunk-local ----

template <class T>
__global__ void __launch_bounds__(kThreads, 1) grads(Problem p, GenWork w) {
  extern __shared__ float sm[];
  const int C = p.C, K = p.K, V = p.V;
  float* M1 = sm;
  float* M2 = M1 + C * C;
  float* gc = M2 + C * C;
  float* gm = gc + C;     // e^gc
  float* dec = gm + C;    // e^(gl - gc)
  float* bt = dec + C;    // beta
  float* dgc = bt + C;    // gradient of gc
  float* dbt = dgc + C;   // gradient of beta
  float* lastp = dbt + C; // k_j . dk~_j, summed into the last row's dgc
  float* red = lastp + C; // kWarps
  const int g = blockIdx.x, h = blockIdx.y, hk = h / p.group;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int64_t P = p.padded();
  const int64_t row = static_cast<int64_t>(h) * P + static_cast<int64_t>(g) * C;
  const int64_t rowk = static_cast<int64_t>(hk) * P + static_cast<int64_t>(g) * C;
  const float* Qc = w.Qp + rowk * K;
  const float* Kc = w.Kp + rowk * K;
  const float* Vc = w.Vp + row * V;
  const float* dUc = w.dU + row * V;
  const float* A = w.Ab + row * C;
  const float* At = w.Abt + row * C;
  const float* dOUc = w.dOU + row * C;
  const float* dUVc = w.dUV + row * C;
  const float* dWKc = w.dWK + row * C;
  const float* KKc = w.KK + rowk * C;
  const float* dWc = w.W + row * K;
  float* dQc = w.dQh + row * K;
  float* dKc = w.dKh + row * K;
  const float* Hc = w.Hs + (static_cast<int64_t>(h) * p.NCt + g) * K * V;
  const float* dHc = w.dHs + (static_cast<int64_t>(h) * p.NCt + g) * K * V;
  const int4 ci = p.map.chunk_of(g);
  if (ci.z == 0) return;  // an empty chunk past a packed call's live ones
  const float gl = w.Gc[row + C - 1];

  for (int i = tid; i < C; i += kThreads) {
    const float x = w.Gc[row + i];
    gc[i] = x;
    gm[i] = expf(x);
    dec[i] = expf(gl - x);
    bt[i] = w.Bp[row + i];
    dgc[i] = 0.f;
    dbt[i] = 0.f;
    lastp[i] = 0.f;
  }
  // <h, dh'>: the gradient of the last gate through the decay of the carried state.
  float hdh = 0.f;
  for (int idx = tid; idx < K * V; idx += kThreads) hdh += Hc[idx] * dHc[idx];
  hdh = warp_sum(hdh);
  if (lane == 0) red[warp] = hdh;
  __syncthreads();

  // M1 = dPs = scale (dO U^T) * D, on and below the diagonal
  for (int idx = tid; idx < C * C; idx += kThreads) {
    const int i = idx / C, j = idx - i * C;
    float s = 0.f;
    if (j <= i) s = dOUc[idx] * (p.scale * expf(gc[i] - gc[j]));
    M1[idx] = s;
  }
  __syncthreads();
  // The row loops below (dq, dk, the WY backward) give row i to warp (i / 4) % 8 in every loop, so
  // the lane 0 that updates dgc_i, dbt_i is the same thread each time. dPs (M1) and A are lower
  // triangular, so running a group's sums over the range of its widest row adds exact zeros only.
  float acc[kRowsPerWarp][kMaxColsPerLane];
  // dq = scale diag(e^gc) dO h^T + dPs K (dQc holds dO h^T); dgc_i += q_i . dq_i
  for (int i0 = warp * kRowsPerWarp; i0 < C; i0 += kWarps * kRowsPerWarp) {
    zero(acc);
    four_rows_times(Kc, K, K, 0, i0 + kRowsPerWarp, [&](int r, int j) { return M1[(i0 + r) * C + j]; }, acc);
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int i = i0 + r;
      float qd = 0.f;
#pragma unroll
      for (int c = 0; c < kMaxColsPerLane; ++c) {
        const int d = lane + 32 * c;
        if (d < K) {
          const float s = p.scale * gm[i] * dQc[i * K + d] + acc[r][c];
          dQc[i * K + d] = s;
          qd += Qc[i * K + d] * s;
        }
      }
      qd = warp_sum(qd);
      if (lane == 0) dgc[i] += qd;
    }
  }
  // dk = diag(e^(gl-gc)) v_new dh'^T + dPs^T Q (dKc holds v_new dh'^T); dgc_j -= k_j . dk_j
  for (int j0 = warp * kRowsPerWarp; j0 < C; j0 += kWarps * kRowsPerWarp) {
    zero(acc);
    four_rows_times(Qc, K, K, j0, C, [&](int r, int i) { return M1[i * C + j0 + r]; }, acc);
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int j = j0 + r;
      float kt = 0.f, kk = 0.f;
#pragma unroll
      for (int c = 0; c < kMaxColsPerLane; ++c) {
        const int d = lane + 32 * c;
        if (d < K) {
          const float t = dKc[j * K + d] * dec[j];
          const float kd = Kc[j * K + d];
          kt += kd * t;
          const float s = t + acc[r][c];
          dKc[j * K + d] = s;
          kk += kd * s;
        }
      }
      kt = warp_sum(kt);
      kk = warp_sum(kk);
      if (lane == 0) {
        lastp[j] = kt;
        dgc[j] -= kk;
      }
    }
  }
  __syncthreads();
  // WY backward, w part: dk += diag(beta e^gc) A^T dw; dbeta, dgc from e^gc beta
  for (int j0 = warp * kRowsPerWarp; j0 < C; j0 += kWarps * kRowsPerWarp) {
    zero(acc);
    four_rows_times(dWc, K, K, j0, C, [&](int r, int i) { return At[(j0 + r) * C + i]; }, acc);
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int j = j0 + r;
      float tk = 0.f;
#pragma unroll
      for (int c = 0; c < kMaxColsPerLane; ++c) {
        const int d = lane + 32 * c;
        if (d < K) {
          const float at = acc[r][c];
          dKc[j * K + d] += bt[j] * gm[j] * at;
          tk += at * Kc[j * K + d];
        }
      }
      tk = warp_sum(tk);
      if (lane == 0) {
        dbt[j] += gm[j] * tk;
        dgc[j] += bt[j] * gm[j] * tk;
      }
    }
  }
  // u part: dv = diag(beta) A^T du; dbeta += (A^T du) . v
  for (int j0 = warp * kRowsPerWarp; j0 < C; j0 += kWarps * kRowsPerWarp) {
    zero(acc);
    four_rows_times(dUc, V, V, j0, C, [&](int r, int i) { return At[(j0 + r) * C + i]; }, acc);
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int j = j0 + r;
      const bool valid = j < ci.z;
      T* dvo = valid ? static_cast<T*>(p.dv.p) + p.dv.offset(ci.x, ci.y + j, h) : nullptr;
      float tv = 0.f;
#pragma unroll
      for (int c = 0; c < kMaxColsPerLane; ++c) {
        const int e = lane + 32 * c;
        if (e < V) {
          const float au = acc[r][c];
          if (valid) dvo[e] = from_float<T>(bt[j] * au);
          tv += au * Vc[j * V + e];
        }
      }
      tv = warp_sum(tv);
      if (lane == 0) dbt[j] += tv;
    }
  }
  __syncthreads();
  // M2 = dA (strictly lower part; the rest cannot reach dL)
  for (int idx = tid; idx < C * C; idx += kThreads) {
    const int i = idx / C, j = idx - i * C;
    float s = 0.f;
    if (j < i) s = bt[j] * (dUVc[idx] + gm[j] * dWKc[idx]);
    M2[idx] = s;
  }
  __syncthreads();
  // M1 = dA A^T (A^T read by rows: consecutive j are consecutive addresses)
  for (int idx = tid; idx < C * C; idx += kThreads) {
    const int a = idx / C, j = idx - a * C;
    const int bmax = min(a - 1, j);
    float s = 0.f;
    for (int b = 0; b <= bmax; ++b) s += M2[a * C + b] * At[b * C + j];
    M1[idx] = s;
  }
  __syncthreads();
  // M2 = dL = -A^T (dA A^T), strictly lower
  for (int idx = tid; idx < C * C; idx += kThreads) {
    const int i = idx / C, j = idx - i * C;
    float s = 0.f;
    if (j < i) {
      for (int a = i; a < C; ++a) s += A[a * C + i] * M1[a * C + j];
      s = -s;
    }
    M2[idx] = s;
  }
  __syncthreads();
  // L_ij = beta_i (k_i . k_j) D_ij: dbeta_i, dgc (row minus column sums of dL * L), and the
  // symmetric S = dM + dM^T (dM = dL beta_i D) into M1 for dk += S K.
  for (int i = warp; i < C; i += kWarps) {
    float rdb = 0.f, rl = 0.f;
    for (int j = lane; j < C; j += 32) {
      if (j < i) {
        const float kk = KKc[i * C + j];
        const float dij = expf(gc[i] - gc[j]);
        const float dl = M2[i * C + j];
        const float l = bt[i] * kk * dij;
        rdb += dl * kk * dij;
        rl += dl * l;
        const float sv = dl * bt[i] * dij;
        M1[i * C + j] = sv;
        M1[j * C + i] = sv;
        M2[i * C + j] = dl * l;
      } else {
        M2[i * C + j] = 0.f;
        if (j == i) M1[i * C + i] = 0.f;
      }
    }
    rdb = warp_sum(rdb);
    rl = warp_sum(rl);
    if (lane == 0) {
      dbt[i] += rdb;
      dgc[i] += rl;
    }
  }
  __syncthreads();
  for (int j = tid; j < C; j += kThreads) {
    float cs = 0.f;
    for (int i = j + 1; i < C; ++i) cs += M2[i * C + j];
    dgc[j] -= cs;
  }
  // dk += S K
  for (int j0 = warp * kRowsPerWarp; j0 < C; j0 += kWarps * kRowsPerWarp) {
    zero(acc);
    four_rows_times(Kc, K, K, 0, C, [&](int r, int i) { return M1[(j0 + r) * C + i]; }, acc);
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
      for (int c = 0; c < kMaxColsPerLane; ++c) {
        const int d = lane + 32 * c;
        if (d < K) dKc[(j0 + r) * K + d] += acc[r][c];
      }
    }
  }
  __syncthreads();
  // The last row's extra terms (decay of the carried state and of the keys), then dg is the
  // reverse cumulative sum of dgc within the chunk. Padded rows have dgc = 0, so adding at row C-1
  // equals adding at the last valid row.
  if (tid == 0) {
    float last = 0.f;
    for (int j = 0; j < C; ++j) last += lastp[j];
    float hd = 0.f;
    for (int k = 0; k < kWarps; ++k) hd += red[k];
    dgc[C - 1] += last + expf(gl) * hd;
    float run = 0.f;
    for (int i = C - 1; i >= 0; --i) {
      run += dgc[i];
      dgc[i] = run;
    }
  }
  __syncthreads();
  for (int i = tid; i < ci.z; i += kThreads) {
    static_cast<float*>(p.dbeta.p)[p.dbeta.offset(ci.x, ci.y + i, h)] = dbt[i];
    if (p.gated) static_cast<float*>(p.dg.p)[p.dg.offset(ci.x, ci.y + i, h)] = dgc[i];
  }
}

}  // namespace general_detail
}  // namespace ak::linear::cuda::bwd
