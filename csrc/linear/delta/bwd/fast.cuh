// The tensor-core path of the delta-rule backward: bf16/f16 inputs, K = V = D in {64, 128, 256}, chunks of
// 64 (whatever chunk size the caller asked: the gradients do not depend on it). Four stages
// (bench/NOTES_linear_bwd.md has the math, FLOPs and bytes):
//   prep     (chunk-parallel)   gc, A, w, u, P (only gc and P with the forward's saved A and w)
//   states   (sequential)       h_c before each chunk, v_new = u - w h (skipped with saved states)
//   dstates  (sequential, back) dh_c after each chunk, dv_new = P^T dO + diag(e^(gl-gc)) K dh
//   grads    (chunk-parallel)   dq, dk, dv, dbeta, dg: everything chunk-local, fused, no HBM between
//                               (at D = 256 two kernels, grads256.cuh)
// Intermediates are stored in the input dtype (the mma operand type), gc in fp32.
#pragma once

#include <cstddef>

#include "linear/delta/bwd/layouts.h"
#include "linear/delta/bwd/problem.cuh"

namespace ak::linear::cuda::bwd {

template <class T>
struct FastWork {
  float* gc = nullptr;          // [H][P] cumulated gate (zeros when ungated)
  T *A = nullptr, *P = nullptr; // [H][P][64]: (I + L)^-1 and scale (Q K^T * D), lower incl.
  T *W = nullptr, *U = nullptr; // [H][P][D]: w; u, overwritten by v_new in states (A and W may
                                // be the forward's saved ones: read only)
  T* dU = nullptr;              // [H][P][D]: dv_new
  T *Hs = nullptr, *dHs = nullptr;  // [H][NCt][D][D]
  float *dQh = nullptr, *dKh = nullptr;  // [H][P][D] fp32 per value head, or null: write dq, dk directly
  // D = 256 only, between the two gradient kernels (grads256.cuh): the V-contracted
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

// What a stage kernel's launcher receives.
template <class T>
struct StageArgs {
  Problem p;
  FastWork<T> w;
  bool only_p = false;  // prep: A and w come from the forward's saved buffer; compute gc and P only
};

}  // namespace ak::linear::cuda::bwd

namespace ak::linear::planning {
struct BwdChoice;
}

namespace ak::linear::cuda::bwd {

// The stages of the tensor-core path in the planner's order (fast.cu): workspace, the L2 norm of q
// and k, prep, states (unless saved), dstates, grads, and the group reduction of dq, dk.
void run_fast(const Problem& p, const planning::BwdChoice& plan, cudaStream_t stream, int device);

}  // namespace ak::linear::cuda::bwd
