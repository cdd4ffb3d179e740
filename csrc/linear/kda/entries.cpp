// KDA's C entries: validate every argument (messages name it; the checks shared with the delta rule
// live in linear/checks.h), fill the structs of kda/problem.h and dispatch by device. A call without
// tokens is answered here: the states pass through unchanged.
#include <string>

#include "core/common.h"
#include "cpu/backend.h"
#include "linear/checks.h"
#include "linear/kda/problem.h"
#if AK_WITH_CUDA
#include "cuda/backend.h"
#endif

using namespace ak;
using namespace ak::linear;

namespace {

constexpr int32_t kKnownFlags = AK_KDA_RECURRENT | AK_KDA_FASTMATH | AK_KDA_IMPL_FUSED | AK_KDA_IMPL_REFERENCE;

// Validates the inputs shared by the forward and the backward and describes the problem.
DeltaProblem parse_problem(const ak_tensor* q_, const ak_tensor* k_, const ak_tensor* v_, const ak_tensor* gate,
                           const ak_tensor* beta, const ak_tensor* initial_state, const ak_tensor* cu_seqlens,
                           double scale, int32_t flags) {
  require((flags & ~kKnownFlags) == 0,
          "flags: unknown bits in " + std::to_string(flags) +
              " (expected AK_KDA_RECURRENT = 1, AK_KDA_FASTMATH = 2, AK_KDA_IMPL_FUSED = 4, AK_KDA_IMPL_REFERENCE = 8)");
  check_scale(scale);
  DeltaProblem p;
  p.recurrent = (flags & AK_KDA_RECURRENT) != 0;
  p.gated = true;
  p.scale = scale;
  p.chunk_size = 64;
  const ak_tensor& q = check_qkv(p, true, q_, k_, v_);
  check_dtype(check_rows(gate, "gate", {p.B, p.T, p.H, p.K}, q, "q"), "gate", {AK_FLOAT32});
  check_dtype(check_rows(beta, "beta", {p.B, p.T, p.H}, q, "q"), "beta", {AK_FLOAT32});
  parse_sequences(p, cu_seqlens, q);
  if (initial_state) check_state(initial_state, "initial_state", {p.N, p.H, p.K, p.V}, q, "q");
  return p;
}

// The implementation the flags ask for, checked before an empty call returns.
Impl parse_impl(const DeltaProblem& p, int32_t flags) {
  return impl_for_device(flags, AK_KDA_IMPL_FUSED, AK_KDA_IMPL_REFERENCE, "AK_KDA_IMPL_FUSED",
                         "AK_KDA_IMPL_REFERENCE", p.device_type);
}

// dst (a contiguous fp32 [N, H, K, V] state) = src, or zeros without src; on the call's device.
void copy_or_zero(const DeltaProblem& p, const ak_tensor& dst, const ak_tensor* src) {
  if (p.device_type == AK_CPU) {
    if (src) {
      ak::cpu::copy_strided(dst, *src);
    } else {
      ak::cpu::fill(dst, 0.0);
    }
  } else if (src) {
    AK_CUDA_CALL(ak::cuda::copy_strided(dst, *src));
  } else {
    AK_CUDA_CALL(ak::cuda::fill(dst, 0.0));
  }
}

}  // namespace

extern "C" {

AK_API ak_status ak_kda_fwd(const ak_tensor* q, const ak_tensor* k, const ak_tensor* v, const ak_tensor* gate,
                            const ak_tensor* beta, const ak_tensor* initial_state, const ak_tensor* cu_seqlens,
                            double scale, int32_t flags, const ak_tensor* output, const ak_tensor* final_state) {
  AK_ENTRY("ak_kda_fwd", {
    KdaFwd a;
    a.p = parse_problem(q, k, v, gate, beta, initial_state, cu_seqlens, scale, flags);
    a.fastmath = (flags & AK_KDA_FASTMATH) != 0;
    a.impl = parse_impl(a.p, flags);
    const DeltaProblem& p = a.p;
    check_rows_like_q(output, "output", {p.B, p.T, p.H, p.V}, *q);
    if (final_state) check_state(final_state, "final_state", {p.N, p.H, p.K, p.V}, *q, "q");
    a.q = q, a.k = k, a.v = v, a.gate = gate, a.beta = beta, a.initial_state = initial_state;
    a.output = output, a.final_state = final_state;
    if (p.N == 0) return;  // an empty batch: nothing to read or write
    if (p.T == 0) {        // no tokens: every final state is the initial one
      if (final_state) copy_or_zero(p, *final_state, initial_state);
      return;
    }
    if (p.device_type == AK_CPU) {
      ak::linear::cpu::kda_fwd(a);
    } else {
      AK_CUDA_CALL(ak::linear::cuda::kda_fwd(a));
    }
  });
}

AK_API ak_status ak_kda_bwd(const ak_tensor* q, const ak_tensor* k, const ak_tensor* v, const ak_tensor* gate,
                            const ak_tensor* beta, const ak_tensor* initial_state, const ak_tensor* cu_seqlens,
                            const ak_tensor* d_output, const ak_tensor* d_final_state, double scale, int32_t flags,
                            const ak_tensor* dq, const ak_tensor* dk, const ak_tensor* dv, const ak_tensor* dgate,
                            const ak_tensor* dbeta, const ak_tensor* d_initial_state) {
  AK_ENTRY("ak_kda_bwd", {
    KdaBwd a;
    a.p = parse_problem(q, k, v, gate, beta, initial_state, cu_seqlens, scale, flags);
    a.fastmath = (flags & AK_KDA_FASTMATH) != 0;
    a.impl = parse_impl(a.p, flags);
    const DeltaProblem& p = a.p;
    const ak_tensor& qt = *q;
    check_rows_like_q(d_output, "d_output", {p.B, p.T, p.H, p.V}, qt);
    if (d_final_state) check_state(d_final_state, "d_final_state", {p.N, p.H, p.K, p.V}, qt, "q");
    check_rows_like_q(dq, "dq", {p.B, p.T, p.HK, p.K}, qt);
    check_rows_like_q(dk, "dk", {p.B, p.T, p.HK, p.K}, qt);
    check_rows_like_q(dv, "dv", {p.B, p.T, p.H, p.V}, qt);
    check_dtype(check_rows(dgate, "dgate", {p.B, p.T, p.H, p.K}, qt, "q"), "dgate", {AK_FLOAT32});
    check_dtype(check_rows(dbeta, "dbeta", {p.B, p.T, p.H}, qt, "q"), "dbeta", {AK_FLOAT32});
    if (d_initial_state) check_state(d_initial_state, "d_initial_state", {p.N, p.H, p.K, p.V}, qt, "q");
    a.q = q, a.k = k, a.v = v, a.gate = gate, a.beta = beta, a.initial_state = initial_state;
    a.d_output = d_output, a.d_final_state = d_final_state;
    a.dq = dq, a.dk = dk, a.dv = dv, a.dgate = dgate, a.dbeta = dbeta, a.d_initial_state = d_initial_state;
    if (p.N == 0) return;
    if (p.T == 0) {  // no tokens: the initial state is the final one
      if (d_initial_state) copy_or_zero(p, *d_initial_state, d_final_state);
      return;
    }
    if (p.device_type == AK_CPU) {
      ak::linear::cpu::kda_bwd(a);
    } else {
      AK_CUDA_CALL(ak::linear::cuda::kda_bwd(a));
    }
  });
}

}  // extern "C"
