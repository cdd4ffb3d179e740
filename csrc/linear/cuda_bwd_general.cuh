// Kernels of the general (fp32 SIMT) path of the delta-rule backward; see cuda_bwd_general.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda_bwd.cuh"
#include "cuda_bwd_elem.cuh"

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
  // Chunk-local products computed by the batched GEMM (cuda_bwd_general_gemm.cuh) before the
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
      const float x = to_f(in[d]);
      ss += x * x;
    }
    mul = rsqrtf(warp_sum(ss) + kL2NormEps);
  }
  for (int d = lane; d < D; d += 32) out[d] = to_f(in[d]) * mul;
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
  float* Wc = w.W + row * K;
  for (int idx = tid; idx < C * K; idx += kThreads) {
    const int i = idx / K, d = idx - i * K;
    float s = 0.f;
    for (int j = 0; j <= i; ++j) s += A[i * C + j] * bg[j] * Kc[j * K + d];
    Wc[idx] = s;
  }
  float* Uc = w.U + row * V;
  for (int idx = tid; idx < C * V; idx += kThreads) {
    const int i = idx / V, e = idx - i * V;
    float s = 0.f;
    for (int j = 0; j <= i; ++j) s += A[i * C + j] * bt[j] * Vc[j * V + e];
    Uc[idx] = s;
  }
  float* Pc = w.Pb + row * C;
  for (int idx = tid; idx < C * C; idx += kThreads) {
    const int i = idx / C, j = idx - i * C;
    float s = 0.f;
    if (j <= i) s = QKc[idx] * (p.scale * expf(gc[i] - gc[j]));
    Pc[idx] = s;
  }
}

// ---- states: h before each chunk; u becomes v_new = u - w h ----

__global__ void __launch_bounds__(kThreads) states_fwd(Problem p, GenWork w) {
  __shared__ float hs[256 * kSlice];
  __shared__ float decs[128];
  const int C = p.C, K = p.K, V = p.V;
  // Block x = sequence * slices + slice (gridDim.z would cap the sequences at 65535).
  const int slices = (p.V + kSlice - 1) / kSlice;
  const int n = blockIdx.x / slices, vs = (blockIdx.x % slices) * kSlice, h = blockIdx.y, hk = h / p.group;
  const int nv = min(kSlice, V - vs);
  const int tid = threadIdx.x;
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
    __syncthreads();
    for (int i = tid; i < C; i += kThreads) decs[i] = expf(gl - gcg[i]);
    float* Hout = w.Hs + (static_cast<int64_t>(h) * p.NCt + g) * K * V;
    for (int idx = tid; idx < K * nv; idx += kThreads) {
      const int d = idx / nv, j = idx - d * nv;
      Hout[d * V + vs + j] = hs[d * kSlice + j];
    }
    const float* Wc = w.W + row * K;
    float* Uc = w.U + row * V;
    const float* Kc = w.Kp + (static_cast<int64_t>(hk) * P + static_cast<int64_t>(g) * C) * K;
    for (int idx = tid; idx < C * nv; idx += kThreads) {
      const int i = idx / nv, j = idx - i * nv;
      float s = Uc[i * V + vs + j];
      for (int d = 0; d < K; ++d) s -= Wc[i * K + d] * hs[d * kSlice + j];
      Uc[i * V + vs + j] = s;
    }
    __syncthreads();
    const float eg = expf(gl);
    for (int idx = tid; idx < K * nv; idx += kThreads) {
      const int d = idx / nv, j = idx - d * nv;
      float s = eg * hs[d * kSlice + j];
      for (int i = 0; i < C; ++i) s += decs[i] * Kc[i * K + d] * Uc[i * V + vs + j];
      hs[d * kSlice + j] = s;
    }
  }
}

// ---- dstates: dh after each chunk (reverse), dv_new ----

__global__ void __launch_bounds__(kThreads) states_bwd(Problem p, GenWork w) {
  __shared__ float hs[256 * kSlice];
  __shared__ float decs[128], gms[128];
  const int C = p.C, K = p.K, V = p.V;
  // Block x = sequence * slices + slice (gridDim.z would cap the sequences at 65535).
  const int slices = (p.V + kSlice - 1) / kSlice;
  const int n = blockIdx.x / slices, vs = (blockIdx.x % slices) * kSlice, h = blockIdx.y, hk = h / p.group;
  const int nv = min(kSlice, V - vs);
  const int tid = threadIdx.x;
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
    __syncthreads();
    for (int i = tid; i < C; i += kThreads) {
      decs[i] = expf(gl - gcg[i]);
      gms[i] = p.scale * expf(gcg[i]);
    }
    float* dHout = w.dHs + (static_cast<int64_t>(h) * p.NCt + g) * K * V;
    for (int idx = tid; idx < K * nv; idx += kThreads) {
      const int d = idx / nv, j = idx - d * nv;
      dHout[d * V + vs + j] = hs[d * kSlice + j];
    }
    __syncthreads();
    const float* Pc = w.Pb + row * C;
    const float* dOc = w.dOp + row * V;
    const float* Kc = w.Kp + rowk * K;
    const float* Qc = w.Qp + rowk * K;
    const float* Wc = w.W + row * K;
    float* dUc = w.dU + row * V;
    for (int idx = tid; idx < C * nv; idx += kThreads) {
      const int j = idx / nv, e = idx - j * nv;
      float s = 0.f;
      for (int i = j; i < C; ++i) s += Pc[i * C + j] * dOc[i * V + vs + e];
      float t = 0.f;
      for (int d = 0; d < K; ++d) t += Kc[j * K + d] * hs[d * kSlice + e];
      dUc[j * V + vs + e] = s + decs[j] * t;
    }
    __syncthreads();
    const float eg = expf(gl);
    for (int idx = tid; idx < K * nv; idx += kThreads) {
      const int d = idx / nv, e = idx - d * nv;
      float s = 0.f;
      for (int i = 0; i < C; ++i) {
        s += gms[i] * Qc[i * K + d] * dOc[i * V + vs + e] - Wc[i * K + d] * dUc[i * V + vs + e];
      }
      hs[d * kSlice + e] = eg * hs[d * kSlice + e] + s;
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
__global__ void __launch_bounds__(kThreads) grads(Problem p, GenWork w) {
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
  // dq = scale diag(e^gc) dO h^T + dPs K (dQc holds dO h^T); dgc_i += q_i . dq_i
  for (int i = warp; i < C; i += kWarps) {
    float qd = 0.f;
    for (int d = lane; d < K; d += 32) {
      const float s1 = dQc[i * K + d];
      float s2 = 0.f;
      for (int j = 0; j <= i; ++j) s2 += M1[i * C + j] * Kc[j * K + d];
      const float s = p.scale * gm[i] * s1 + s2;
      dQc[i * K + d] = s;
      qd += Qc[i * K + d] * s;
    }
    qd = warp_sum(qd);
    if (lane == 0) dgc[i] += qd;
  }
  // dk = diag(e^(gl-gc)) v_new dh'^T + dPs^T Q (dKc holds v_new dh'^T); dgc_j -= k_j . dk_j
  for (int j = warp; j < C; j += kWarps) {
    float kt = 0.f, kk = 0.f;
    for (int d = lane; d < K; d += 32) {
      const float t = dKc[j * K + d] * dec[j];
      const float kd = Kc[j * K + d];
      kt += kd * t;
      float s = t;
      for (int i = j; i < C; ++i) s += M1[i * C + j] * Qc[i * K + d];
      dKc[j * K + d] = s;
      kk += kd * s;
    }
    kt = warp_sum(kt);
    kk = warp_sum(kk);
    if (lane == 0) {
      lastp[j] = kt;
      dgc[j] -= kk;
    }
  }
  __syncthreads();
  // WY backward, w part: dk += diag(beta e^gc) A^T dw; dbeta, dgc from e^gc beta
  for (int j = warp; j < C; j += kWarps) {
    float tk = 0.f;
    for (int d = lane; d < K; d += 32) {
      float at = 0.f;
      for (int i = j; i < C; ++i) at += A[i * C + j] * dWc[i * K + d];
      dKc[j * K + d] += bt[j] * gm[j] * at;
      tk += at * Kc[j * K + d];
    }
    tk = warp_sum(tk);
    if (lane == 0) {
      dbt[j] += gm[j] * tk;
      dgc[j] += bt[j] * gm[j] * tk;
    }
  }
  // u part: dv = diag(beta) A^T du; dbeta += (A^T du) . v
  for (int j = warp; j < C; j += kWarps) {
    const bool valid = j < ci.z;
    T* dvo = valid ? static_cast<T*>(p.dv.p) + p.dv.offset(ci.x, ci.y + j, h) : nullptr;
    float tv = 0.f;
    for (int e = lane; e < V; e += 32) {
      float au = 0.f;
      for (int i = j; i < C; ++i) au += A[i * C + j] * dUc[i * V + e];
      if (valid) dvo[e] = from_f<T>(bt[j] * au);
      tv += au * Vc[j * V + e];
    }
    tv = warp_sum(tv);
    if (lane == 0) dbt[j] += tv;
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
  for (int j = warp; j < C; j += kWarps) {
    for (int d = lane; d < K; d += 32) {
      float s = 0.f;
      for (int i = 0; i < C; ++i) s += M1[j * C + i] * Kc[i * K + d];
      dKc[j * K + d] += s;
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
