// One token of the (gated) delta rule on a K x V fp32 state, forward and reverse mode. The recurrent
// forward, the decode entry and the backward (BPTT) all run on these two functions.
//   S' = a S_prev                (a = exp(g), 1 when ungated)
//   r  = v - S'^T k              (the residual the delta rule corrects)
//   u  = beta r
//   S  = S' + k u^T
//   o  = scale S^T q
#pragma once

#include <cstdint>

namespace ak::linear::cpu {

// Advances S in place and writes o (V). When given, r_out and u_out (V) receive r and u.
void recurrent_step(float* S, const float* q, const float* k, const float* v, float beta, double a,
                    double scale, int64_t K, int64_t V, float* o, float* r_out = nullptr,
                    float* u_out = nullptr);

// Reverse mode of recurrent_step. S_prev is the state before the step, r and u what the step
// computed. dS holds dL/dS (after the step) on entry and dL/dS_prev on return. Adds to dq and dk
// (K each); writes dv (V), dbeta and dg (dL/dg, with a = exp(g)).
void recurrent_step_backward(double* dS, const float* S_prev, const float* q, const float* k, const float* r,
                             const float* u, float beta, double a, double scale, const float* d_out, int64_t K,
                             int64_t V, double* dq, double* dk, float* dv, double* dbeta, double* dg);

}  // namespace ak::linear::cpu
