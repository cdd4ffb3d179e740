// The stages of the chunked delta rule on the CPU, named as FLA and the papers name them, one chunk
// of L <= C tokens at a time. Matrices are dense row-major fp32 buffers; sums accumulate in fp64.
// A gate of nullptr means "ungated" (every decay factor is 1), so the plain delta rule shares them.
//
// Within a chunk with start state S (K x V) and gate cumsum gc:
//   A   = tril(diag(beta) K K^T * exp(gc_i - gc_j), -1)        scaled_kkt
//   Tm  = (I + A)^-1                                           solve_unit_lower
//   Aw  = Tm diag(beta exp(gc)),  Au = Tm diag(beta)           wy_factors
//   w   = Aw K,  u = Au V                                      wy_apply
//   v_new = u - w S                                            chunk_residual
//   o   = scale (q exp(gc)) S + tril(scale Q K^T * decay) v_new   chunk_output
//   S  <- exp(gc_last) S + (K exp(gc_last - gc))^T v_new       chunk_state_update
// GLA and KDA reuse the same sequence with per-channel decays.
#pragma once

#include <cstdint>

namespace ak::linear::cpu::stages {

// Gate cumsum: gc[i] = g[0] + ... + g[i] within the chunk.
void gate_cumsum(const float* g, int64_t L, float* gc);

// Scaled K K^T: A[i][j] = beta_i (k_i . k_j) exp(gc_i - gc_j) for j < i, else 0. A is L x L.
void scaled_kkt(const float* k, const float* beta, const float* gc, int64_t L, int64_t K, float* A);

// Triangular solve: Tm = (I + A)^-1 for a strictly lower triangular A, by forward substitution.
void solve_unit_lower(const float* A, int64_t L, float* Tm);

// WY factors: Aw = Tm diag(beta exp(gc)) and Au = Tm diag(beta) (both lower triangular, L x L).
void wy_factors(const float* Tm, const float* beta, const float* gc, int64_t L, float* Aw, float* Au);

// WY vectors: out = F X for a lower triangular F (L x L) and X (L x D), e.g. w = Aw K, u = Au V.
void wy_apply(const float* F, const float* X, int64_t L, int64_t D, float* out);

// Chunk residual: v_new = u - w S, with w (L x K), u (L x V), S (K x V).
void chunk_residual(const float* w, const float* u, const float* S, int64_t L, int64_t K, int64_t V,
                    float* v_new);

// Output: o = scale (q exp(gc)) S + tril(scale Q K^T * exp(gc_i - gc_j)) v_new (diagonal included),
// with S the state at the chunk start.
void chunk_output(const float* q, const float* k, const float* gc, const float* S, const float* v_new,
                  double scale, int64_t L, int64_t K, int64_t V, float* o);

// Chunk state recurrence h: S <- exp(gc_last) S + (K exp(gc_last - gc))^T v_new.
void chunk_state_update(const float* k, const float* gc, const float* v_new, int64_t L, int64_t K, int64_t V,
                        float* S);

}  // namespace ak::linear::cpu::stages
