// KDA's internal interface (the gated delta rule with a decay per key channel): the entries
// (kda/entries.cpp) validate the C arguments and fill these structs; each backend implements both
// functions. Sizes, sequences and scale are the delta rule's DeltaProblem.
#pragma once

#include "linear/checks.h"
#include "linear/problem.h"

namespace ak::linear {

struct KdaFwd {
  DeltaProblem p;
  bool fastmath = false;  // approximate exponentials allowed (no effect on the exact backends)
  Impl impl = Impl::any;
  const ak_tensor *q = nullptr, *k = nullptr, *v = nullptr, *gate = nullptr, *beta = nullptr;
  const ak_tensor* initial_state = nullptr;
  const ak_tensor *output = nullptr, *final_state = nullptr;
};

struct KdaBwd {
  DeltaProblem p;
  bool fastmath = false;
  Impl impl = Impl::any;
  const ak_tensor *q = nullptr, *k = nullptr, *v = nullptr, *gate = nullptr, *beta = nullptr;
  const ak_tensor* initial_state = nullptr;
  const ak_tensor *d_output = nullptr, *d_final_state = nullptr;
  const ak_tensor *dq = nullptr, *dk = nullptr, *dv = nullptr, *dgate = nullptr, *dbeta = nullptr;
  const ak_tensor* d_initial_state = nullptr;
};

AK_DECLARE_BACKENDS(void kda_fwd(const KdaFwd& a); void kda_bwd(const KdaBwd& a);)

}  // namespace ak::linear
