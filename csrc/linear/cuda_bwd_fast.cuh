// The tensor-core path of the delta-rule backward: bf16/f16 inputs, K = V = D in {64, 128, 256}, chunks of
// 64 (whatever chunk size the caller asked: the gradients do not depend on it). Four stages
// (bench/NOTES_linear_bwd.md has the math, FLOPs and bytes):
//   prep     (chunk-parallel)   gc, A, w, u, P (only gc and P with the forward's saved A and w)
//   states   (sequential)       h_c before each chunk, v_new = u - w h (skipped with saved states)
//   dstates  (sequential, back) dh_c after each chunk, dv_new = P^T dO + diag(e^(gl-gc)) K dh
//   grads    (chunk-parallel)   dq, dk, dv, dbeta, dg: everything chunk-local, fused, no HBM between
//                               (at D = 256 two kernels, cuda_bwd_fast_grads256.cuh)
// Intermediates are stored in the input dtype (the mma operand type), gc in fp32.
#pragma once

#include <cstddef>

#include "cuda_bwd.cuh"

namespace ak::linear::cuda::bwd {

constexpr int kFastC = 64;

template <class T>
struct FastWork {
  float* gc = nullptr;          // [H][P] cumulated gate (zeros when ungated)
  T *A = nullptr, *P = nullptr; // [H][P][64]: (I + L)^-1 and scale (Q K^T * D), lower incl.
  T *W = nullptr, *U = nullptr; // [H][P][D]: w; u, overwritten by v_new in states (A and W may
                                // be the forward's saved ones: read only)
  T* dU = nullptr;              // [H][P][D]: dv_new
  T *Hs = nullptr, *dHs = nullptr;  // [H][NCt][D][D]
  float *dQh = nullptr, *dKh = nullptr;  // [H][P][D] fp32 per value head, or null: write dq, dk directly
  // D = 256 only, between the two gradient kernels (cuda_bwd_fast_grads256.cuh): the V-contracted
  // parts of dq and dk ([H][P][D]), dv_new V^T ([H][P][64]), (A^T dv_new).v ([H][P]), <h, dh'> ([H][NCt]).
  float *Xq = nullptr, *Xk = nullptr, *dA1 = nullptr, *tv = nullptr, *hd = nullptr;
  T* dW = nullptr;  // [H][P][D]: dw (over W when W is not the forward's saved one)
  // 1 / |x| per row of q and k ([B, T, HK]) when grads writes dq, dk through the L2 norm's backward
  // (group 1, L2 norm in the kernel); else null.
  const float *rq = nullptr, *rk = nullptr;
  // With the L2 norm done by prep (tensor-core version): where it writes the normalised q and k
  // ([B, T, HK, D], the views the later stages read) and 1 / |x| per row (rq_out, rk_out: only when
  // grads needs them, else null). qn_out.p null: prep reads q and k as they are.
  OutView qn_out, kn_out;
  float *rq_out = nullptr, *rk_out = nullptr;
};

// Whether the pipelined gradient stage keeps two K buffers (D = 128: one block per multiprocessor
// either way; at D = 64 a second buffer would cost the second block).
template <int D>
constexpr bool grads_two_k() {
  return D == 128;
}

// Column parts of the fused gradient stage's warps (4 x WC warps a block): 4 at D = 128 (16 warps, one
// block per multiprocessor), 2 at D = 64 (8 warps, two blocks).
template <int D>
constexpr int grads_wc() {
  return D == 128 ? 4 : 2;
}

// Shared memory of the fused gradient stage, the largest of the four (bytes); Pipe: the pipelined
// version (cuda_bwd_fast_grads.cuh).
template <int D, bool Pipe = false>
constexpr size_t fast_grads_smem() {
  constexpr int WC = grads_wc<D>();
  return 2 * (6 * kFastC * (D + 8) + 2 * D * (D + 8) + 3 * kFastC * (kFastC + 8)) +
         sizeof(float) * (4 * kFastC + 8 * WC * kFastC + 4 * kFastC + 4 * WC + kFastC) +
         (Pipe && grads_two_k<D>() ? 2 * kFastC * (D + 8) : 0);
}

// Shared memory of the two gradient kernels at D = 256 (cuda_bwd_fast_grads256.cuh): the first
// (over V) holds dO, v_new, dv_new and three 64 x D buffers, the second (over K) Q, K, dw.
constexpr size_t fast_grads256_smem_v() {
  return 2 * (6 * kFastC * (256 + 8) + kFastC * (kFastC + 8)) + sizeof(float) * (6 * kFastC + 8);
}
constexpr size_t fast_grads256_smem_k() {
  return 2 * (3 * kFastC * (256 + 8) + 3 * kFastC * (kFastC + 8)) + sizeof(float) * (23 * kFastC + 8);
}

// Launchers; the extra arguments pick a variant (cuda_bwd_variants.h).
// only_p: A and w come from the forward's saved buffer; prep computes gc and P only.
template <class T, int D>
void launch_fast_prep(const Problem& p, const FastWork<T>& w, bool tensor_core_inverse, bool only_p, cudaStream_t s);
template <class T, int D>
void launch_fast_states(const Problem& p, const FastWork<T>& w, int vs, cudaStream_t s);
template <class T, int D>
void launch_fast_dstates(const Problem& p, const FastWork<T>& w, int vs, cudaStream_t s);
template <class T, int D>
void launch_fast_dstates8(const Problem& p, const FastWork<T>& w, int vs, cudaStream_t s);
template <class T, int D>
void launch_fast_grads(const Problem& p, const FastWork<T>& w, bool persistent, bool pipe, cudaStream_t s);
template <class T>
void launch_fast_grads256(const Problem& p, const FastWork<T>& w, cudaStream_t s);

}  // namespace ak::linear::cuda::bwd
