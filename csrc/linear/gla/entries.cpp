// The gated linear family's C entries (GLA, simple GLA, retention, linear attention): validate every
// argument (messages name it; the checks shared with the delta rule live in linear/checks.h), fill
// the structs of gla/problem.h and dispatch by device. A call without tokens is answered here: the
// states pass through unchanged.
#include <cmath>
#include <string>
#include <vector>

#include "core/common.h"
#include "cpu/backend.h"
#include "linear/checks.h"
#include "linear/gla/problem.h"
#if AK_WITH_CUDA
#include "cuda/backend.h"
#endif

using namespace ak;
using namespace ak::linear;

namespace {

constexpr int32_t kKnownFlags = AK_GLA_RECURRENT | AK_GLA_NORMALIZE;
constexpr int64_t kChunk = 64;  // chunk_states holds the state every 64 tokens

void check_flags(int32_t flags) {
  require((flags & ~kKnownFlags) == 0, "flags: unknown bits in " + std::to_string(flags) +
                                           " (expected a combination of AK_GLA_RECURRENT = 1 and AK_GLA_NORMALIZE = 2)");
}

// The gates of a call, each optional: gk [.., H, K] and g [.., H] float32 views with a contiguous last
// dimension, g_gamma [H] float32 contiguous. `tokens` as in check_qkv.
GlaGates check_gates(const DeltaProblem& p, bool tokens, const ak_tensor* gk, const ak_tensor* g,
                     const ak_tensor* g_gamma, const ak_tensor& q) {
  GlaGates gates;
  if (gk) {
    check_dtype(check_rows(gk, "gk", token_dims(p, tokens, {p.H, p.K}), q, "q"), "gk", {AK_FLOAT32});
    gates.gk = true;
  }
  if (g) {
    check_dtype(check_rows(g, "g", token_dims(p, tokens, {p.H}), q, "q"), "g", {AK_FLOAT32});
    gates.g = true;
  }
  if (g_gamma) {
    check_state(g_gamma, "g_gamma", {p.H}, q, "q");
    gates.gamma = true;
  }
  return gates;
}

// Validates the inputs shared by the forward and the backward and describes the problem.
DeltaProblem parse_problem(const ak_tensor* q_, const ak_tensor* k_, const ak_tensor* v_, const ak_tensor* gk,
                           const ak_tensor* g, const ak_tensor* g_gamma, const ak_tensor* initial_state,
                           const ak_tensor* cu_seqlens, double scale, int32_t flags, GlaGates& gates) {
  check_flags(flags);
  check_scale(scale);
  DeltaProblem p;
  p.recurrent = (flags & AK_GLA_RECURRENT) != 0;
  p.scale = scale;
  p.chunk_size = kChunk;
  const ak_tensor& q = check_qkv(p, true, q_, k_, v_);
  gates = check_gates(p, true, gk, g, g_gamma, q);
  p.gated = gates.any();
  parse_sequences(p, cu_seqlens, q);
  if (initial_state) check_state(initial_state, "initial_state", {p.N, p.H, p.K, p.V}, q, "q");
  return p;
}

// chunk_states [B, NT + 1, H, K, V] (fixed length only), written by the forward or read by the backward.
void check_chunk_states(const DeltaProblem& p, const ak_tensor* chunk_states, const ak_tensor& q) {
  if (!chunk_states) return;
  require(!p.varlen, "chunk_states: only available for fixed-length input (pass NULL with cu_seqlens)");
  const int64_t NT = (p.T + kChunk - 1) / kChunk;
  check_state(chunk_states, "chunk_states", {p.B, NT + 1, p.H, p.K, p.V}, q, "q");
}

// A contiguous fp32 tensor of N * H * K * V elements seen as [N, H, K, V] (chunk_states of a call
// without tokens is [B, 1, H, K, V]).
ak_tensor as_states(const ak_tensor& t, const DeltaProblem& p) {
  ak_tensor view = t;
  view.rank = 4;
  const int64_t shape[4] = {p.N, p.H, p.K, p.V};
  for (int i = 0; i < 4; ++i) view.shape[i] = shape[i];
  set_contiguous_strides(view);
  return view;
}

// dst = src, or zeros without src; on the call's device.
void copy_or_zero(const DeltaProblem& p, const ak_tensor& dst, const ak_tensor* src) {
  if (p.device_type == AK_CPU) {
    if (src) {
      ak::cpu::copy_strided(dst, as_states(*src, p));
    } else {
      ak::cpu::fill(dst, 0.0);
    }
  } else if (src) {
    AK_CUDA_CALL(ak::cuda::copy_strided(dst, as_states(*src, p)));
  } else {
    AK_CUDA_CALL(ak::cuda::fill(dst, 0.0));
  }
}

// AK_GLA_NORMALIZE in `flags`: linear attention only (no decays), with a finite eps >= 0.
template <class Args>
void set_normalize(Args& a, int32_t flags, double normalize_eps) {
  if ((flags & AK_GLA_NORMALIZE) == 0) return;
  require(!a.gates.any(), "flags: AK_GLA_NORMALIZE is for linear attention (pass NULL gk, g and g_gamma)");
  require(std::isfinite(normalize_eps) && normalize_eps >= 0,
          "normalize_eps: expected a finite value >= 0, got " + std::to_string(normalize_eps));
  a.normalize = true;
  a.normalize_eps = normalize_eps;
}

}  // namespace

extern "C" {

AK_API ak_status ak_gla_fwd(const ak_tensor* q, const ak_tensor* k, const ak_tensor* v, const ak_tensor* gk,
                            const ak_tensor* g, const ak_tensor* g_gamma, const ak_tensor* initial_state,
                            const ak_tensor* cu_seqlens, double scale, int32_t flags, const ak_tensor* output,
                            const ak_tensor* final_state, const ak_tensor* chunk_states, double normalize_eps) {
  AK_ENTRY("ak_gla_fwd", {
    GlaFwd a;
    a.p = parse_problem(q, k, v, gk, g, g_gamma, initial_state, cu_seqlens, scale, flags, a.gates);
    set_normalize(a, flags, normalize_eps);
    const DeltaProblem& p = a.p;
    const ak_tensor& qt = *q;
    check_rows_like_q(output, "output", {p.B, p.T, p.H, p.V}, qt);
    if (final_state) check_state(final_state, "final_state", {p.N, p.H, p.K, p.V}, qt, "q");
    check_chunk_states(p, chunk_states, qt);
    a.q = q, a.k = k, a.v = v, a.gk = gk, a.g = g, a.g_gamma = g_gamma, a.initial_state = initial_state;
    a.output = output, a.final_state = final_state, a.chunk_states = chunk_states;
    if (p.N == 0) return;  // an empty batch: nothing to read or write
    if (p.T == 0) {        // no tokens: every state is the initial one
      if (final_state) copy_or_zero(p, as_states(*final_state, p), initial_state);
      if (chunk_states) copy_or_zero(p, as_states(*chunk_states, p), initial_state);
      return;
    }
    if (p.device_type == AK_CPU) {
      ak::linear::cpu::gla_fwd(a);
    } else {
      AK_CUDA_CALL(ak::linear::cuda::gla_fwd(a));
    }
  });
}

AK_API ak_status ak_gla_bwd(const ak_tensor* q, const ak_tensor* k, const ak_tensor* v, const ak_tensor* gk,
                            const ak_tensor* g, const ak_tensor* g_gamma, const ak_tensor* initial_state,
                            const ak_tensor* cu_seqlens, const ak_tensor* chunk_states, const ak_tensor* d_output,
                            const ak_tensor* d_final_state, double scale, int32_t flags, const ak_tensor* dq,
                            const ak_tensor* dk, const ak_tensor* dv, const ak_tensor* dgk, const ak_tensor* dg,
                            const ak_tensor* d_initial_state, double normalize_eps) {
  AK_ENTRY("ak_gla_bwd", {
    GlaBwd a;
    a.p = parse_problem(q, k, v, gk, g, g_gamma, initial_state, cu_seqlens, scale, flags, a.gates);
    set_normalize(a, flags, normalize_eps);
    const DeltaProblem& p = a.p;
    const ak_tensor& qt = *q;
    check_chunk_states(p, chunk_states, qt);
    check_rows_like_q(d_output, "d_output", {p.B, p.T, p.H, p.V}, qt);
    if (d_final_state) check_state(d_final_state, "d_final_state", {p.N, p.H, p.K, p.V}, qt, "q");
    check_rows_like_q(dq, "dq", {p.B, p.T, p.HK, p.K}, qt);
    check_rows_like_q(dk, "dk", {p.B, p.T, p.HK, p.K}, qt);
    check_rows_like_q(dv, "dv", {p.B, p.T, p.H, p.V}, qt);
    if (a.gates.gk) {
      require(dgk != nullptr, "dgk: expected a tensor [B, T, H, K] because gk is given");
      check_dtype(check_rows(dgk, "dgk", {p.B, p.T, p.H, p.K}, qt, "q"), "dgk", {AK_FLOAT32});
    } else {
      require(dgk == nullptr, "dgk: given, but gk is NULL (pass NULL without a per-channel decay)");
    }
    if (a.gates.g || a.gates.gamma) {
      if (dg) check_dtype(check_rows(dg, "dg", {p.B, p.T, p.H}, qt, "q"), "dg", {AK_FLOAT32});
    } else {
      require(dg == nullptr, "dg: given, but g and g_gamma are NULL (pass NULL without a scalar decay)");
    }
    if (d_initial_state) check_state(d_initial_state, "d_initial_state", {p.N, p.H, p.K, p.V}, qt, "q");
    a.q = q, a.k = k, a.v = v, a.gk = gk, a.g = g, a.g_gamma = g_gamma, a.initial_state = initial_state;
    a.chunk_states = chunk_states, a.d_output = d_output, a.d_final_state = d_final_state;
    a.dq = dq, a.dk = dk, a.dv = dv, a.dgk = dgk, a.dg = dg, a.d_initial_state = d_initial_state;
    if (p.N == 0) return;
    if (p.T == 0) {  // no tokens: the initial state is the final one
      if (d_initial_state) copy_or_zero(p, as_states(*d_initial_state, p), d_final_state);
      return;
    }
    if (p.device_type == AK_CPU) {
      ak::linear::cpu::gla_bwd(a);
    } else {
      AK_CUDA_CALL(ak::linear::cuda::gla_bwd(a));
    }
  });
}

AK_API ak_status ak_gla_decode(const ak_tensor* q, const ak_tensor* k, const ak_tensor* v, const ak_tensor* gk,
                               const ak_tensor* g, const ak_tensor* g_gamma, const ak_tensor* state, double scale,
                               const ak_tensor* output, const ak_tensor* new_state) {
  AK_ENTRY("ak_gla_decode", {
    check_scale(scale);
    GlaDecode a;
    DeltaProblem& p = a.p;
    p.recurrent = true;
    p.scale = scale;
    const ak_tensor& qt = check_qkv(p, false, q, k, v);
    p.N = p.B;
    a.gates = check_gates(p, false, gk, g, g_gamma, qt);
    p.gated = a.gates.any();
    const ak_tensor& st = check_state(state, "state", {p.B, p.H, p.K, p.V}, qt, "q");
    check_rows_like_q(output, "output", {p.B, p.H, p.V}, qt);
    const ak_tensor& ns = check_state(new_state, "new_state", {p.B, p.H, p.K, p.V}, qt, "q");
    check_in_place_or_apart(st, ns);
    a.q = q, a.k = k, a.v = v, a.gk = gk, a.g = g, a.g_gamma = g_gamma;
    a.state = state, a.output = output, a.new_state = new_state;
    if (p.B == 0) return;
    if (p.device_type == AK_CPU) {
      ak::linear::cpu::gla_decode(a);
    } else {
      AK_CUDA_CALL(ak::linear::cuda::gla_decode(a));
    }
  });
}

}  // extern "C"
