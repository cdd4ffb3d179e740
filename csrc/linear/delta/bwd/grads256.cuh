// Fast backward, stage "grads" at K = V = 256, in two kernels: the fused kernel of D <= 128
// (grads.cuh) would need h and dh' (two 256 x 256 tiles, 256 KB) in shared memory at
// once. The work splits by what each product contracts over (notation of bench/NOTES_linear_bwd.md):
//   grads256_v, over V (one block per chunk x head):
//     dPs = scale (dO v_new^T) * D, lower incl.     -> w.P (prep's P is dead after dstates)
//     dA1 = dv_new V^T                              -> w.dA1 (fp32)
//     dv  = diag(beta) A^T dv_new; (A^T dv_new).v   -> dv, w.tv
//     per 64-row panel of h and dh' (three buffers in rotation, the next panel in flight):
//       Xq = scale diag(e^gc) dO h^T, Xk = diag(e^(gl-gc)) v_new dh'^T -> w.Xq, w.Xk (fp32)
//       dw = -dv_new h^T                                              -> w.dW
//       <h, dh'>                                                       -> w.hd
//   grads256_k, over K and the chunk (one block per chunk x head): what the fused kernel does after
//     those products: dq = Xq + dPs K; dk = Xk + dPs^T Q + diag(beta e^gc) A^T dw + S K;
//     dA = (dA1 + dw K^T diag(e^gc)) diag(beta) (strictly lower), dL, dbeta, dg.
// The intermediates cost ~3 KB of fp32 per token and head through device memory (written once, read
// once), against the 4 KB of h and dh' that both kernels' items read anyway.
#pragma once

#include "linear/delta/bwd/grads.cuh"

namespace ak::linear::cuda::bwd {
namespace grads256_detail {

using namespace grads_detail;
constexpr int D = 256, LD = D + 8, LC = kC + 8, NT = D / 16;  // NT: n8 tiles of a warp's 128 columns

template <class T>
__global__ void __launch_bounds__(kThreads, 1) grads256_v(Problem p, FastWork<T> w) {
  extern __shared__ __align__(16) unsigned char smraw[];
  T* dOs = reinterpret_cast<T*>(smraw);
  T* Us = dOs + kC * LD;    // v_new
  T* dUs = Us + kC * LD;    // dv_new
  T* bufs = dUs + kC * LD;  // three 64 x D buffers: V, then panels of h and dh'
  T* As = bufs + 3 * kC * LD;
  float* gc = reinterpret_cast<float*>(As + kC * LC);
  float* gs = gc + kC;         // scale e^gc
  float* dec = gs + kC;        // e^(gl - gc)
  float* bt = dec + kC;        // beta
  float* r_tv = bt + kC;       // [2][64] (A^T dv_new).v per column half
  float* r_h = r_tv + 2 * kC;  // [8] <h, dh'> per warp
  auto buf = [&](int i) { return bufs + i * kC * LD; };

  const int item = blockIdx.x, g = item / p.H, h = item - g * p.H;
  const int4 ci = p.map.chunk_of(g);
  const int len = ci.z;
  if (len == 0) return;  // an empty chunk past a packed call's live ones
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int wr = warp & 3, wc = warp >> 2;
  const int m0 = 16 * wr, rA = m0 + (lane >> 2), rB = rA + 8;
  const int n0 = wc * (D / 2);  // columns of 64 x D products
  const int j0 = 32 * wc;       // columns of 64 x 64 products
  const int64_t row = static_cast<int64_t>(h) * p.padded() + static_cast<int64_t>(g) * kC;
  const int64_t state = (static_cast<int64_t>(h) * p.NCt + g) * D * D;

  tile_load<T>(dOs, LD, static_cast<const T*>(p.dout.p) + p.dout.offset(ci.x, ci.y, h), p.dout.st, kC, len, D, tid,
               kThreads);
  tile_load<T>(Us, LD, w.U + row * D, D, kC, len, D, tid, kThreads);
  tile_load<T>(dUs, LD, w.dU + row * D, D, kC, len, D, tid, kThreads);
  tile_load<T>(buf(2), LD, static_cast<const T*>(p.v.p) + p.v.offset(ci.x, ci.y, h), p.v.st, kC, len, D, tid,
               kThreads);
  tile_load<T>(As, LC, w.A + row * kC, kC, kC, len, kC, tid, kThreads);
  cp_async_commit();
  tile_load<T>(buf(0), LD, w.Hs + state, D, kC, kC, D, tid, kThreads);
  tile_load<T>(buf(1), LD, w.dHs + state, D, kC, kC, D, tid, kThreads);
  cp_async_commit();
  if (tid < kC) {
    gc[tid] = w.gc[row + tid];
    bt[tid] = tid < len ? static_cast<const float*>(p.beta.p)[p.beta.offset(ci.x, ci.y + tid, h)] : 0.f;
  }
  cp_async_wait<1>();  // all but the first panels
  __syncthreads();
  const float gl = gc[kC - 1];
  if (tid < kC) {
    gs[tid] = p.scale * expf(gc[tid]);
    dec[tid] = expf(gl - gc[tid]);
  }
  {  // dPs = scale (dO v_new^T) * D, lower incl.
    float acc[1][4][4];
    dps_tile<T, 4>(acc, dOs, Us, LD, D, gc, p.scale, m0, j0, lane);
    store_acc<T, 1, 4>(acc, w.P + row * kC, kC, m0, j0, lane);
  }
  {  // dA1 = dv_new V^T (the second kernel keeps its strictly lower part)
    float acc[1][4][4];
    zero_acc(acc);
    warp_mma<T, 1, 4, false, false>(acc, dUs, LD, m0, buf(2), LD, j0, D, lane);
    store_acc_f32<1, 4>(acc, w.dA1 + row * kC, kC, m0, j0, lane);
  }
  // A^T dv_new: dv = diag(beta) A^T dv_new; (A^T dv_new).v
  write_dv<T, NT>(As, dUs, buf(2), LD, bt, r_tv, p, ci, h, wc, m0, n0, lane);

  // Panels of 64 state rows: h in buffer a, dh' in b, c free for the next h.
  float hdot = 0.f;
  int a = 0, b = 1, c = 2;
#pragma unroll 1
  for (int kp = 0; kp < D / kC; ++kp) {
    const bool more = kp + 1 < D / kC;
    cp_async_wait<0>();
    __syncthreads();  // this panel landed; every warp is done with buffer c (V or the last dh')
    if (more) tile_load<T>(buf(c), LD, w.Hs + state + (kp + 1) * kC * D, D, kC, kC, D, tid, kThreads);
    cp_async_commit();
    float x1[1][4][4], x3[1][4][4];
    zero_acc(x1);
    zero_acc(x3);
    warp_mma<T, 1, 4, false, false>(x1, dOs, LD, m0, buf(a), LD, j0, D, lane);        // dO h^T
    warp_mma<T, 1, 4, false, false, true>(x3, dUs, LD, m0, buf(a), LD, j0, D, lane);  // -dv_new h^T
    for (int idx = tid; idx < kC * D / 2; idx += kThreads) {
      const int r = (2 * idx) / D, col = 2 * idx - r * D;
      const float2 x = unpack2<T>(*reinterpret_cast<const uint32_t*>(buf(a) + r * LD + col));
      const float2 y = unpack2<T>(*reinterpret_cast<const uint32_t*>(buf(b) + r * LD + col));
      hdot += x.x * y.x + x.y * y.y;
    }
    __syncthreads();  // every warp is done with h's panel
    if (more) tile_load<T>(buf(a), LD, w.dHs + state + (kp + 1) * kC * D, D, kC, kC, D, tid, kThreads);
    cp_async_commit();
    float x2[1][4][4];
    zero_acc(x2);
    warp_mma<T, 1, 4, false, false>(x2, Us, LD, m0, buf(b), LD, j0, D, lane);  // v_new dh'^T
    scale_rows(x1, gs[rA], gs[rB]);
    scale_rows(x2, dec[rA], dec[rB]);
    store_acc_f32<1, 4>(x1, w.Xq + row * D, D, m0, kp * kC + j0, lane);
    store_acc_f32<1, 4>(x2, w.Xk + row * D, D, m0, kp * kC + j0, lane);
    store_acc<T, 1, 4>(x3, w.dW + row * D, D, m0, kp * kC + j0, lane);
    const int na = c, nb = a, nc = b;
    a = na, b = nb, c = nc;
  }
  hdot = warp_sum(hdot);
  if (lane == 0) r_h[warp] = hdot;
  __syncthreads();
  if (tid < kC) w.tv[row + tid] = r_tv[tid] + r_tv[kC + tid];
  if (tid == 0) {
    float s = 0.f;
    for (int i = 0; i < 8; ++i) s += r_h[i];
    w.hd[static_cast<int64_t>(h) * p.NCt + g] = s;
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads, 1) grads256_k(Problem p, FastWork<T> w) {
  extern __shared__ __align__(16) unsigned char smraw[];
  T* Qs = reinterpret_cast<T*>(smraw);
  T* Ks = Qs + kC * LD;
  T* dWs = Ks + kC * LD;
  T* As = dWs + kC * LD;  // [64][LC]
  T* T1 = As + kC * LC;   // dPs, then dA, then S
  T* T2 = T1 + kC * LC;   // dA A^T
  float* gc = reinterpret_cast<float*>(T2 + kC * LC);
  float* gm = gc + kC;   // e^gc
  float* dec = gm + kC;  // e^(gl - gc)
  float* bt = dec + kC;  // beta
  float* f = bt + kC;
  const GradRows rows{f, f + 2 * kC, f + 4 * kC, f + 6 * kC, f + 8 * kC, f + 10 * kC, f + 12 * kC, f + 14 * kC,
                      f + 18 * kC, f + 18 * kC + 8};

  const int item = blockIdx.x, g = item / p.H, h = item - g * p.H, hk = h / p.group;
  const int4 ci = p.map.chunk_of(g);
  const int len = ci.z;
  if (len == 0) return;  // an empty chunk past a packed call's live ones
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int wr = warp & 3, wc = warp >> 2;
  const int m0 = 16 * wr;
  const int n0 = wc * (D / 2), j0 = 32 * wc;
  const int64_t row = static_cast<int64_t>(h) * p.padded() + static_cast<int64_t>(g) * kC;

  tile_load<T>(Qs, LD, static_cast<const T*>(p.q.p) + p.q.offset(ci.x, ci.y, hk), p.q.st, kC, len, D, tid, kThreads);
  tile_load<T>(Ks, LD, static_cast<const T*>(p.k.p) + p.k.offset(ci.x, ci.y, hk), p.k.st, kC, len, D, tid, kThreads);
  tile_load<T>(dWs, LD, w.dW + row * D, D, kC, len, D, tid, kThreads);
  tile_load<T>(As, LC, w.A + row * kC, kC, kC, len, kC, tid, kThreads);
  tile_load<T>(T1, LC, w.P + row * kC, kC, kC, len, kC, tid, kThreads);
  cp_async_commit();
  if (tid < kC) {
    gc[tid] = w.gc[row + tid];
    bt[tid] = tid < len ? static_cast<const float*>(p.beta.p)[p.beta.offset(ci.x, ci.y + tid, h)] : 0.f;
    rows.tv[tid] = w.tv[row + tid];  // summed over V by the first kernel: the second half is 0
    rows.tv[kC + tid] = 0.f;
  }
  if (tid < 8) rows.hd[tid] = tid == 0 ? w.hd[static_cast<int64_t>(h) * p.NCt + g] : 0.f;
  cp_async_wait<0>();
  __syncthreads();
  const float gl = gc[kC - 1];
  if (tid < kC) {
    gm[tid] = expf(gc[tid]);
    dec[tid] = expf(gl - gc[tid]);
  }
  __syncthreads();
  {  // dq = Xq + dPs K
    float acc[1][NT][4];
    load_acc_f32<1, NT>(acc, w.Xq + row * D, D, m0, n0, lane);
    warp_mma<T, 1, NT, false, true>(acc, T1, LC, m0, Ks, LD, n0, kC, lane);
    put_row_dots<T, NT>(acc, PaddedTile<const T>{Qs, LD}, rows.qd, wc, m0, n0, lane);
    write_rows<T, NT>(acc, w.dQh != nullptr ? w.dQh + row * D : nullptr, D, p.dq, ci, hk, m0, n0, lane);
  }
  // dk = Xk + dPs^T Q, kept in registers to the end
  float dk[1][NT][4];
  load_acc_f32<1, NT>(dk, w.Xk + row * D, D, m0, n0, lane);
  put_row_dots<T, NT>(dk, PaddedTile<const T>{Ks, LD}, rows.kt, wc, m0, n0, lane);
  warp_mma<T, 1, NT, true, true>(dk, T1, LC, m0, Qs, LD, n0, kC, lane);
  put_row_dots<T, NT>(dk, PaddedTile<const T>{Ks, LD}, rows.kk, wc, m0, n0, lane);
  // A^T dw: dk += diag(beta e^gc) A^T dw; (A^T dw).k
  add_at_dw<T, NT>(dk, As, dWs, Ks, LD, bt, gm, rows.tk, wc, m0, n0, lane);
  {  // dA = (dA1 + (dw K^T) diag(e^gc)) diag(beta), strictly lower -> T1 (dPs dead after the barrier)
    float a1[1][4][4], a2[1][4][4];
    load_acc_f32<1, 4>(a1, w.dA1 + row * kC, kC, m0, j0, lane);
    zero_acc(a2);
    warp_mma<T, 1, 4, false, false>(a2, dWs, LD, m0, Ks, LD, j0, D, lane);
    combine_da(a1, a2, bt, gm, m0, j0, lane);
    __syncthreads();
    store_acc<T, 1, 4>(a1, T1, LC, m0, j0, lane);
  }
  __syncthreads();
  store_x<T, 4>(T1, As, T2, m0, j0, lane);  // X = dA A^T -> T2
  __syncthreads();
  // dL = -A^T X: dbeta, dgc row sums, S = dM + dM^T -> T1
  dl_products<T, 2>(As, T2, Ks, LD, D, T1, gc, bt, rows, wr, wc, lane);
  __syncthreads();
  warp_mma<T, 1, NT, false, true>(dk, T1, LC, m0, Ks, LD, n0, kC, lane);  // dk += S K
  write_rows<T, NT>(dk, w.dKh != nullptr ? w.dKh + row * D : nullptr, D, p.dk, ci, hk, m0, n0, lane);
  write_dbeta_dg<2>(p, ci, h, gm, bt, gl, rows, tid, lane);
}

}  // namespace grads256_detail
}  // namespace ak::linear::cuda::bwd

namespace ak::linear::cuda {

// Two kernels: the products contracted over V, then those over K and the chunk.
template <class T, int D, int Tile>
void BwdGrads256<T, D, Tile>::launch(const Args& a, cudaStream_t s) {
  using namespace bwd::grads256_detail;
  const bwd::Problem& p = a.p;
  if (p.NCt == 0) return;
  const int64_t items = static_cast<int64_t>(p.NCt) * p.H;
  require(items < (int64_t{1} << 31), "delta_rule_bwd on CUDA: too many chunks x heads for one call");
  constexpr int smem_v = static_cast<int>(bwd::fast_grads256_smem_v());
  constexpr int smem_k = static_cast<int>(bwd::fast_grads256_smem_k());
  AK_CUDA_CHECK(cudaFuncSetAttribute(grads256_v<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_v));
  AK_CUDA_CHECK(cudaFuncSetAttribute(grads256_k<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_k));
  grads256_v<T><<<static_cast<unsigned>(items), kThreads, smem_v, s>>>(p, a.w);
  ak::cuda::check_launch("delta_bwd fast: grads (D 256, over V)");
  grads256_k<T><<<static_cast<unsigned>(items), kThreads, smem_k, s>>>(p, a.w);
  ak::cuda::check_launch("delta_bwd fast: grads (D 256, over K)");
}

}  // namespace ak::linear::cuda
