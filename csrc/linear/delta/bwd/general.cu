// The general path of the delta-rule backward: fp32 SIMT stages for every configuration the
// contract allows (K, V <= 256, chunk 32/64/128, any dtype). Simple loops over an fp32 workspace
// in the padded chunk layout; correctness first, the tensor-core path is the fast one.
//
// Stages (notation of bench/NOTES_linear_bwd.md, per chunk with gate cumsum gc):
//   pack     q, k (L2-normalised when asked), v, dO, g, beta -> fp32 padded rows (padding = 0)
//   prep     gc; A = (I + tril(diag(beta) K K^T * D, -1))^-1; w = A diag(beta e^gc) K;
//            u = A diag(beta) V; P = scale (Q K^T * D) on and below the diagonal
//   states   h_c (state before each chunk), v_new = u - w h  (sequential over chunks)
//   dstates  dh_c (gradient of the state after each chunk), dv_new = P^T dO + diag(e^(gl-gc)) K dh
//   grads    dq, dk (per value head), dw, the WY backward -> dk, dv, dbeta, dg
//            (its C x D x D and C x C x D products run before it as batched tiled GEMMs,
//            general_gemm.cuh; so do K K^T and Q K^T for prep)
//   reduce   (shared with the fast path) group sum, L2-norm backward, dq and dk in the dtype
// Compiled once here for the three dtypes; the registry's rows reach it through general_entry.cuh.
#include <algorithm>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/runtime.cuh"
#include "linear/delta/bwd/problem.cuh"
#include "linear/delta/bwd/general.cuh"
#include "linear/delta/bwd/general_entry.cuh"
#include "linear/delta/bwd/general_gemm.cuh"

namespace ak::linear::cuda::bwd {
using namespace general_detail;
namespace {

// The forward's saved 16-bit states and v_new (the first two parts of saved_layout.h, chunks of 64:
// this path's Hs and U layouts at C = 64) widened into Hs and U, in place of the states stage.
template <class T>
__global__ void __launch_bounds__(kThreads) widen_saved(const T* saved, int64_t states, int64_t total, float* Hs,
                                                          float* U) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads * 8;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * 8; i < total; i += stride) {
    const uint4 raw = *reinterpret_cast<const uint4*>(saved + i);
    const uint32_t pairs[4] = {raw.x, raw.y, raw.z, raw.w};
    float* out = i < states ? Hs + i : U + (i - states);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 f = unpack2<T>(pairs[e]);
      out[2 * e] = f.x;
      out[2 * e + 1] = f.y;
    }
  }
}

// Out[b] = alpha X[b] Y[b]^T (or +=) over chunks x heads (gemm_xyt); nothing for an empty batch.
void launch_gemm_xyt(const general_gemm::Shape& sh, const general_gemm::Operand& X, const general_gemm::Operand& Y,
                     const general_gemm::Output& O, cudaStream_t stream) {
  using namespace general_gemm;
  if (sh.chunks == 0 || sh.heads == 0 || sh.M == 0 || sh.N == 0) return;
  const int64_t tiles = static_cast<int64_t>((sh.M + kTileM - 1) / kTileM) * ((sh.N + kTileN - 1) / kTileN);
  gemm_xyt<<<dim3(static_cast<unsigned>(tiles * sh.chunks), static_cast<unsigned>(sh.heads)), kGemmThreads, 0,
             stream>>>(sh, X, Y, O);
}

}  // namespace

template <class T>
void run_general(const Problem& p, cudaStream_t s, int device) {
  require(p.K <= 256 && p.V <= 256, "delta_rule_bwd on CUDA: head dims up to 256 are supported");
  require(p.C <= 128, "delta_rule_bwd on CUDA: chunk sizes up to 128 are supported");
  const int64_t P = p.padded();
  const int C = p.C, K = p.K, V = p.V, H = p.H, HK = p.HK;
  const int64_t nk = static_cast<int64_t>(HK) * P * K;
  const int64_t nv = static_cast<int64_t>(H) * P * V;
  const int64_t nhk = static_cast<int64_t>(H) * P * K;
  const int64_t ns = static_cast<int64_t>(H) * p.NCt * K * V;
  const int64_t nc = static_cast<int64_t>(H) * P * C;
  const int64_t n1 = static_cast<int64_t>(H) * P;
  const int64_t nck = static_cast<int64_t>(HK) * P * C;
  const int64_t total = 2 * nk + 4 * nv + 3 * nhk + 2 * ns + 6 * nc + 2 * nck + 2 * n1;
  ak::cuda::Scratch scratch(device, static_cast<size_t>(total) * sizeof(float));
  float* base = scratch.as<float>();
  GenWork w;
  auto take = [&](int64_t n) {
    float* r = base;
    base += n;
    return r;
  };
  w.Qp = take(nk);
  w.Kp = take(nk);
  w.Vp = take(nv);
  w.dOp = take(nv);
  w.U = take(nv);
  w.dU = take(nv);
  w.W = take(nhk);
  w.dQh = take(nhk);
  w.dKh = take(nhk);
  w.Hs = take(ns);
  w.dHs = take(ns);
  w.Ab = take(nc);
  w.Abt = take(nc);
  w.Pb = take(nc);
  w.Gc = take(n1);
  w.Bp = take(n1);
  w.KK = take(nck);
  w.QK = take(nck);
  w.dOU = take(nc);
  w.dUV = take(nc);
  w.dWK = take(nc);

  const size_t states_smem = static_cast<size_t>(states_smem_floats(C, K)) * sizeof(float);
  AK_CUDA_CHECK(cudaFuncSetAttribute(states_fwd, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(states_smem)));
  AK_CUDA_CHECK(cudaFuncSetAttribute(states_bwd, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(states_smem)));
  if (P == 0) {  // only empty sequences: d_initial_state = d_final_state (or zeros)
    states_bwd<<<dim3(ak::cuda::ceil_div(V, kSlice) * p.N, H), kThreads, states_smem, s>>>(p, w);
    ak::cuda::check_launch("delta_bwd general: dstates");
    return;
  }
  const dim3 rows(ak::cuda::ceil_div(P, kWarps), 1);
  pack_rows<T><<<dim3(rows.x, HK), kThreads, 0, s>>>(p.q, K, p.map, P, w.Qp, p.l2norm);
  pack_rows<T><<<dim3(rows.x, HK), kThreads, 0, s>>>(p.k, K, p.map, P, w.Kp, p.l2norm);
  pack_rows<T><<<dim3(rows.x, H), kThreads, 0, s>>>(p.v, V, p.map, P, w.Vp, false);
  pack_rows<T><<<dim3(rows.x, H), kThreads, 0, s>>>(p.dout, V, p.map, P, w.dOp, false);
  const dim3 sc(ak::cuda::ceil_div(P, kThreads), H);
  pack_scalars<<<sc, kThreads, 0, s>>>(p.gated ? p.g : RowView{}, p.map, P, w.Gc);
  pack_scalars<<<sc, kThreads, 0, s>>>(p.beta, p.map, P, w.Bp);
  ak::cuda::check_launch("delta_bwd general: pack");

  // Batched products: operands in the padded layout [heads][P][D] (chunk g of head h at
  // (h P + g C) D) or the per-chunk states [H][NCt][K][V]; the reduction index is each row's last.
  using namespace general_gemm;
  auto padded = [&](const float* x, int64_t D, int head_div) {
    return Operand{x, D, C * D, P * D, head_div};
  };
  auto padded_out = [&](float* x, int64_t D) { return Output{x, D, C * D, P * D}; };
  const int64_t kv = static_cast<int64_t>(K) * V;
  const Operand states{w.Hs, V, kv, p.NCt * kv, 1};
  const Operand dstates{w.dHs, V, kv, p.NCt * kv, 1};
  const Shape cc_k_shared{C, C, K, p.NCt, HK, 1.f, false};  // C x C over K, per key head
  launch_gemm_xyt(cc_k_shared, padded(w.Kp, K, 1), padded(w.Kp, K, 1), padded_out(w.KK, C), s);
  launch_gemm_xyt(cc_k_shared, padded(w.Qp, K, 1), padded(w.Kp, K, 1), padded_out(w.QK, C), s);
  ak::cuda::check_launch("delta_bwd general: K K^T, Q K^T");

  const size_t prep_smem = (2 * C * C + 3 * C) * sizeof(float);
  AK_CUDA_CHECK(cudaFuncSetAttribute(prep, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(prep_smem)));
  prep<<<dim3(p.NCt, H), kThreads, prep_smem, s>>>(p, w);
  ak::cuda::check_launch("delta_bwd general: prep");

  const dim3 seq(ak::cuda::ceil_div(V, kSlice) * p.N, H);
  // The forward's saved states (16-bit, chunks of 64: usable when this path runs in chunks of 64)
  // replace the states stage.
  bool from_saved = false;
  if constexpr (sizeof(T) == 2) {
    if (p.saved != nullptr && C == 64) {
      const int64_t total = ns + nv;  // both multiples of 8: K V and 64 V elements per chunk
      const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(ak::cuda::ceil_div(total, 8 * kThreads), 8192));
      widen_saved<T><<<blocks, kThreads, 0, s>>>(static_cast<const T*>(p.saved), ns, total, w.Hs, w.U);
      from_saved = true;
    }
  }
  if (!from_saved) states_fwd<<<seq, kThreads, states_smem, s>>>(p, w);
  ak::cuda::check_launch("delta_bwd general: states");
  states_bwd<<<seq, kThreads, states_smem, s>>>(p, w);
  ak::cuda::check_launch("delta_bwd general: dstates");

  // From here U holds v_new and dU holds dv_new; W is no longer needed and takes dw.
  const Shape ck_v{C, K, V, p.NCt, H, 1.f, false};  // C x K over V
  launch_gemm_xyt(ck_v, padded(w.dOp, V, 1), states, padded_out(w.dQh, K), s);  // dO h^T
  launch_gemm_xyt(ck_v, padded(w.U, V, 1), dstates, padded_out(w.dKh, K), s);   // v_new dh'^T
  const Shape ck_v_neg{C, K, V, p.NCt, H, -1.f, false};
  launch_gemm_xyt(ck_v_neg, padded(w.dU, V, 1), states, padded_out(w.W, K), s);  // dw = -dv_new h^T
  const Shape cc_v{C, C, V, p.NCt, H, 1.f, false};  // C x C over V
  launch_gemm_xyt(cc_v, padded(w.dOp, V, 1), padded(w.U, V, 1), padded_out(w.dOU, C), s);  // dO v_new^T
  launch_gemm_xyt(cc_v, padded(w.dU, V, 1), padded(w.Vp, V, 1), padded_out(w.dUV, C), s);  // dv_new V^T
  const Shape cc_k{C, C, K, p.NCt, H, 1.f, false};  // C x C over K
  launch_gemm_xyt(cc_k, padded(w.W, K, 1), padded(w.Kp, K, p.group), padded_out(w.dWK, C), s);  // dw K^T
  ak::cuda::check_launch("delta_bwd general: chunk products");

  const size_t grads_smem = (2 * C * C + 7 * C + kWarps) * sizeof(float);
  AK_CUDA_CHECK(cudaFuncSetAttribute(grads<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(grads_smem)));
  grads<T><<<dim3(p.NCt, H), kThreads, grads_smem, s>>>(p, w);
  ak::cuda::check_launch("delta_bwd general: grads");

  launch_reduce_dqk(p, w.dQh, w.dKh, s);
}

template void run_general<float>(const Problem&, cudaStream_t, int);
template void run_general<__half>(const Problem&, cudaStream_t, int);
template void run_general<__nv_bfloat16>(const Problem&, cudaStream_t, int);

}  // namespace ak::linear::cuda::bwd
