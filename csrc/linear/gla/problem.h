// The gated linear family's internal interface (GLA, simple GLA, retention, linear attention): the
// entries (gla/entries.cpp) validate the C arguments and fill these structs; each backend implements
// the same three functions. Sizes, sequences and scale are the delta rule's DeltaProblem.
#pragma once

#include "linear/problem.h"

namespace ak::linear {

// Which decays a call has (attnkit_linear.h): per key channel, per token, per head.
struct GlaGates {
  bool gk = false, g = false, gamma = false;
  bool any() const { return gk || g || gamma; }
  bool scalar_only() const { return !gk; }  // one decay per token and head (or none)
};

struct GlaFwd {
  DeltaProblem p;
  GlaGates gates;
  const ak_tensor *q = nullptr, *k = nullptr, *v = nullptr;
  const ak_tensor *gk = nullptr, *g = nullptr, *g_gamma = nullptr;
  const ak_tensor* initial_state = nullptr;
  const ak_tensor *output = nullptr, *final_state = nullptr, *chunk_states = nullptr;
  bool normalize = false;     // AK_GLA_NORMALIZE: each output row divided by its normaliser + eps
  double normalize_eps = 0.0;
};

struct GlaBwd {
  DeltaProblem p;
  GlaGates gates;
  const ak_tensor *q = nullptr, *k = nullptr, *v = nullptr;
  const ak_tensor *gk = nullptr, *g = nullptr, *g_gamma = nullptr;
  const ak_tensor* initial_state = nullptr;
  const ak_tensor* chunk_states = nullptr;  // the forward's, read; or nullptr (recompute)
  const ak_tensor *d_output = nullptr, *d_final_state = nullptr;
  const ak_tensor *dq = nullptr, *dk = nullptr, *dv = nullptr, *dgk = nullptr, *dg = nullptr;
  const ak_tensor* d_initial_state = nullptr;
  bool normalize = false;  // AK_GLA_NORMALIZE: the gradients of the normalised forward
  double normalize_eps = 0.0;
};

struct GlaDecode {
  DeltaProblem p;  // T = 1, N = B
  GlaGates gates;
  const ak_tensor *q = nullptr, *k = nullptr, *v = nullptr;
  const ak_tensor *gk = nullptr, *g = nullptr, *g_gamma = nullptr;
  const ak_tensor *state = nullptr, *output = nullptr, *new_state = nullptr;
};

AK_DECLARE_BACKENDS(void gla_fwd(const GlaFwd& a); void gla_bwd(const GlaBwd& a);
                    void gla_decode(const GlaDecode& a);)

}  // namespace ak::linear
