// The delta-rule family's C entries: validate every argument (messages name it), fill the internal
// structs of delta_rule.h and dispatch by device.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/common.h"
#include "linear/checks.h"
#include "linear/decode/slots.h"
#include "linear/planner.h"
#include "linear/problem.h"
#include "linear/saved_layout.h"
#if AK_WITH_CUDA
#include "cuda/backend.h"
#include "linear/decode/pool_cuda.h"
#endif

using namespace ak;
using namespace ak::linear;

namespace {

constexpr int32_t kKnownFlags = AK_DELTA_GATED | AK_DELTA_QK_L2NORM | AK_DELTA_RECURRENT;

std::string str(const char* s) { return std::string(s); }

void check_flags(int32_t flags) {
  require((flags & ~kKnownFlags) == 0,
          "flags: unknown bits in " + std::to_string(flags) +
              " (expected a combination of AK_DELTA_GATED = 1, AK_DELTA_QK_L2NORM = 2, AK_DELTA_RECURRENT = 4)");
}

void check_chunk_size(int32_t chunk_size) {
  require(chunk_size == 32 || chunk_size == 64 || chunk_size == 128,
          "chunk_size: expected 32, 64 or 128, got " + std::to_string(chunk_size));
}

// q, k, v (checks.h check_qkv), g and beta of a call: g (with AK_DELTA_GATED) and beta [.., H] in
// float32. Fills p's extents, dtype and device (T = 1 for a decode step); returns q.
const ak_tensor& check_inputs(DeltaProblem& p, bool tokens, const ak_tensor* q_, const ak_tensor* k_,
                              const ak_tensor* v_, const ak_tensor* g_, const ak_tensor* beta_) {
  const std::string lead = tokens ? "B, T, " : "B, ";
  const ak_tensor& q = check_qkv(p, tokens, q_, k_, v_);
  auto dims = [&](std::initializer_list<int64_t> tail) { return token_dims(p, tokens, tail); };

  if (p.gated) {
    require(g_ != nullptr, "g: expected a tensor [" + lead + "H] because flags include AK_DELTA_GATED");
    check_dtype(check_rows(g_, "g", dims({p.H}), q, "q"), "g", {AK_FLOAT32});
  } else {
    require(g_ == nullptr, "g: given, but flags lack AK_DELTA_GATED (pass NULL for the ungated delta rule)");
  }
  check_dtype(check_rows(beta_, "beta", dims({p.H}), q, "q"), "beta", {AK_FLOAT32});
  return q;
}

// Validates the inputs shared by the forward and the backward and describes the problem.
DeltaProblem parse_problem(const ak_tensor* q_, const ak_tensor* k_, const ak_tensor* v_, const ak_tensor* g_,
                           const ak_tensor* beta_, const ak_tensor* initial_state_, const ak_tensor* cu_seqlens_,
                           double scale, int32_t chunk_size, int32_t flags) {
  check_flags(flags);
  DeltaProblem p;
  p.gated = (flags & AK_DELTA_GATED) != 0;
  p.l2norm = (flags & AK_DELTA_QK_L2NORM) != 0;
  p.recurrent = (flags & AK_DELTA_RECURRENT) != 0;
  check_scale(scale);
  p.scale = scale;
  if (!p.recurrent) check_chunk_size(chunk_size);
  p.chunk_size = p.recurrent ? 64 : chunk_size;

  const ak_tensor& q = check_inputs(p, true, q_, k_, v_, g_, beta_);

  parse_sequences(p, cu_seqlens_, q);
  if (initial_state_) check_state(initial_state_, "initial_state", {p.N, p.H, p.K, p.V}, q, "q");
  return p;
}

// Outputs that only the chunked, fixed-length forward can give.
void check_chunk_outputs(const DeltaProblem& p, const ak_tensor& q, const ak_tensor* chunk_states,
                         const ak_tensor* aw, const ak_tensor* au) {
  const char* names[3] = {"chunk_states", "aw", "au"};
  const ak_tensor* outs[3] = {chunk_states, aw, au};
  for (int i = 0; i < 3; ++i) {
    if (!outs[i]) continue;
    require(!p.varlen, str(names[i]) + ": only available for fixed-length input (pass NULL with cu_seqlens)");
    require(!p.recurrent,
            str(names[i]) + ": only available for the chunked algorithm (pass NULL with AK_DELTA_RECURRENT)");
  }
  const int64_t C = p.chunk_size, NC = (p.T + C - 1) / C;
  if (chunk_states) check_state(chunk_states, "chunk_states", {p.B, p.H, NC + 1, p.K, p.V}, q, "q");
  if (aw) check_state(aw, "aw", {p.B, p.H, p.T, C}, q, "q");
  if (au) check_state(au, "au", {p.B, p.H, p.T, C}, q, "q");
}

// The saved-for-backward buffer: contiguous, 1-D, dtype of q, on q's device, 16-byte aligned (its parts
// are read in 16-byte pieces), large enough for the per-chunk states and v - w S of every chunk of 64
// (attnkit_linear.h).
void check_saved(const DeltaProblem& p, const ak_tensor* saved, const ak_tensor& q) {
  const ak_tensor& t = check_contiguous(saved, "saved");
  require(t.rank == 1, "saved: expected a 1-D buffer, got shape " + shape_string(t));
  require(reinterpret_cast<uintptr_t>(t.data) % 16 == 0, "saved: expected a 16-byte aligned buffer");
  check_same_dtype(t, "saved", q, "q");
  check_same_device(t, "saved", q, "q");
  const int64_t need = saved_elements(p.H, p.chunk_capacity(64), p.K, p.V);
  require(t.shape[0] >= need, "saved: expected at least " + std::to_string(need) +
                                  " elements (H * NCS * (K V + 64 V + 64 * 64 + 64 K)), got " +
                                  std::to_string(t.shape[0]));
}

// A state pool [num_slots, H, V, K] of q's call: float32 or bfloat16 on q's device, every slot dense,
// slots apart; its [N] indices and has_initial_state flags.
StatePool check_state_pool(const DeltaProblem& p, const ak_tensor& q, const ak_tensor* cache_,
                           const ak_tensor* indices, const ak_tensor* has_initial, int32_t pool_mode) {
  require((pool_mode & ~AK_POOL_TRUSTED_INDICES) == 0,
          "pool_mode: expected 0 or AK_POOL_TRUSTED_INDICES = 2, got " + std::to_string(pool_mode));
  const ak_tensor& cache = check_tensor(cache_, "state_cache");
  check_dtype(cache, "state_cache", {AK_FLOAT32, AK_BFLOAT16});
  check_same_device(cache, "state_cache", q, "q");
  require(cache.rank == 4 && cache.shape[1] == p.H && cache.shape[2] == p.V && cache.shape[3] == p.K,
          "state_cache: expected [num_slots, " + std::to_string(p.H) + ", " + std::to_string(p.V) + ", " +
              std::to_string(p.K) + "] (H, V, K of the call), got " + shape_string(cache));
  check_pool_slots(cache, "state_cache");
  StatePool pool;
  pool.cache = &cache;
  pool.indices = &check_per_sequence(indices, "state_indices", AK_INT32, p.N, q, "q");
  if (has_initial) pool.has_initial = &check_per_sequence(has_initial, "has_initial_state", AK_BOOL, p.N, q, "q");
  pool.trusted = (pool_mode & AK_POOL_TRUSTED_INDICES) != 0;
  return pool;
}

// The CPU backend on a pool: the slots gathered into per-sequence states, the forward, the scatter.
void cpu_fwd_pool(const DeltaFwd& a, const StatePool& pool) {
  const DeltaProblem& p = a.p;
  const size_t size = static_cast<size_t>(p.N * p.H * p.K * p.V);
  std::vector<float> buffer(2 * size);
  fwd_through_states(a, pool, buffer.data(), buffer.data() + size, ak::linear::cpu::pool_copy,
                     ak::linear::cpu::delta_fwd);
}

}  // namespace

extern "C" {

AK_API ak_status ak_delta_rule_fwd(const ak_tensor* q, const ak_tensor* k, const ak_tensor* v, const ak_tensor* g,
                                   const ak_tensor* beta, const ak_tensor* initial_state,
                                   const ak_tensor* cu_seqlens, double scale, int32_t chunk_size, int32_t flags,
                                   const ak_tensor* output, const ak_tensor* final_state,
                                   const ak_tensor* chunk_states, const ak_tensor* aw, const ak_tensor* au,
                                   const ak_tensor* saved, int32_t* saved_written) {
  AK_ENTRY("ak_delta_rule_fwd", {
    if (saved_written) *saved_written = 0;
    DeltaFwd a;
    a.p = parse_problem(q, k, v, g, beta, initial_state, cu_seqlens, scale, chunk_size, flags);
    const DeltaProblem& p = a.p;
    const ak_tensor& qt = *q;
    check_rows_like_q(output, "output", {p.B, p.T, p.H, p.V}, qt);
    if (final_state) check_state(final_state, "final_state", {p.N, p.H, p.K, p.V}, qt, "q");
    check_chunk_outputs(p, qt, chunk_states, aw, au);
    if (saved) {
      require(saved_written != nullptr, "saved_written: expected a pointer because saved is given");
      check_saved(p, saved, qt);
    }
    a = DeltaFwd{a.p, q, k, v, g, beta, initial_state, output, final_state, chunk_states, aw, au, saved, saved_written};
    if (p.N == 0) return;  // an empty batch: nothing to read or write
    if (p.device_type == AK_CPU) {
      ak::linear::cpu::delta_fwd(a);
    } else {
      AK_CUDA_CALL(ak::linear::cuda::delta_fwd(a));
    }
  });
}

AK_API ak_status ak_delta_rule_fwd_pool(const ak_tensor* q, const ak_tensor* k, const ak_tensor* v, const ak_tensor* g,
                                        const ak_tensor* beta, const ak_tensor* cu_seqlens, double scale,
                                        int32_t chunk_size, int32_t flags, const ak_tensor* output,
                                        const ak_tensor* state_cache, const ak_tensor* state_indices,
                                        const ak_tensor* has_initial_state, int32_t pool_mode) {
  AK_ENTRY("ak_delta_rule_fwd_pool", {
    DeltaFwd a;
    a.p = parse_problem(q, k, v, g, beta, nullptr, cu_seqlens, scale, chunk_size, flags);
    const DeltaProblem& p = a.p;
    check_rows_like_q(output, "output", {p.B, p.T, p.H, p.V}, *q);
    require(is_contiguous(*output), "output: expected a contiguous tensor (padding sequences' rows are zeroed)");
    const StatePool pool = check_state_pool(p, *q, state_cache, state_indices, has_initial_state, pool_mode);
    a.q = q, a.k = k, a.v = v, a.g = g, a.beta = beta, a.output = output;
    if (p.N == 0) return;
    PaddingRows padding;
    padding.N = p.N, padding.B = p.B, padding.T = p.T;
    padding.row_bytes = p.H * p.V * static_cast<int64_t>(dtype_size(output->dtype));
    padding.output = output, padding.indices = pool.indices, padding.cu_seqlens = cu_seqlens;
    if (p.device_type == AK_CPU) {
      require_slots_in_pool(pool.indices, p.N, state_cache->shape[0]);
      cpu_fwd_pool(a, pool);
      ak::linear::cpu::zero_padding_rows(padding);
    } else {
      AK_CUDA_CALL(ak::linear::cuda::delta_fwd_pool(a, pool));
      AK_CUDA_CALL(ak::linear::cuda::zero_padding_rows(padding));
    }
  });
}

AK_API ak_status ak_delta_rule_saved_size(const ak_tensor* q, const ak_tensor* k, const ak_tensor* v,
                                          const ak_tensor* g, const ak_tensor* beta, const ak_tensor* initial_state,
                                          const ak_tensor* cu_seqlens, double scale, int32_t chunk_size,
                                          int32_t flags, const ak_tensor* output, const ak_tensor* chunk_states,
                                          const ak_tensor* aw, const ak_tensor* au, int64_t* elements) {
  AK_ENTRY("ak_delta_rule_saved_size", {
    require(elements != nullptr, "elements: expected a pointer");
    *elements = 0;
    DeltaFwd a;
    a.p = parse_problem(q, k, v, g, beta, initial_state, cu_seqlens, scale, chunk_size, flags);
    const DeltaProblem& p = a.p;
    check_rows_like_q(output, "output", {p.B, p.T, p.H, p.V}, *q);
    check_chunk_outputs(p, *q, chunk_states, aw, au);
    a.q = q, a.k = k, a.v = v, a.output = output;
    a.chunk_states = chunk_states, a.aw = aw, a.au = au;
    if (p.N == 0 || p.device_type == AK_CPU) return;
#if AK_WITH_CUDA
    const planning::FwdChoice plan =
        planning::plan_fwd(planning::fwd_shape(a, true), ::ak::cuda::caps(p.device_index), tuning::current());
    if (plan.save) *elements = saved_elements(p.H, p.chunk_capacity(64), p.K, p.V);
#endif
  });
}

AK_API ak_status ak_delta_rule_bwd(const ak_tensor* q, const ak_tensor* k, const ak_tensor* v, const ak_tensor* g,
                                   const ak_tensor* beta, const ak_tensor* initial_state,
                                   const ak_tensor* cu_seqlens, const ak_tensor* d_output,
                                   const ak_tensor* d_final_state, double scale, int32_t chunk_size,
                                   int32_t flags, const ak_tensor* dq, const ak_tensor* dk, const ak_tensor* dv,
                                   const ak_tensor* dbeta, const ak_tensor* dg, const ak_tensor* d_initial_state,
                                   const ak_tensor* saved) {
  AK_ENTRY("ak_delta_rule_bwd", {
    DeltaBwd a;
    a.p = parse_problem(q, k, v, g, beta, initial_state, cu_seqlens, scale, chunk_size, flags);
    const DeltaProblem& p = a.p;
    const ak_tensor& qt = *q;
    check_rows_like_q(d_output, "d_output", {p.B, p.T, p.H, p.V}, qt);
    if (d_final_state) check_state(d_final_state, "d_final_state", {p.N, p.H, p.K, p.V}, qt, "q");
    check_rows_like_q(dq, "dq", {p.B, p.T, p.HK, p.K}, qt);
    check_rows_like_q(dk, "dk", {p.B, p.T, p.HK, p.K}, qt);
    check_rows_like_q(dv, "dv", {p.B, p.T, p.H, p.V}, qt);
    const ak_tensor& dbt = check_rows(dbeta, "dbeta", {p.B, p.T, p.H}, qt, "q");
    check_dtype(dbt, "dbeta", {AK_FLOAT32});
    if (p.gated) {
      require(dg != nullptr, "dg: expected a tensor [B, T, H] because flags include AK_DELTA_GATED");
      const ak_tensor& dgt = check_rows(dg, "dg", {p.B, p.T, p.H}, qt, "q");
      check_dtype(dgt, "dg", {AK_FLOAT32});
    } else {
      require(dg == nullptr, "dg: given, but flags lack AK_DELTA_GATED (pass NULL for the ungated delta rule)");
    }
    if (d_initial_state) check_state(d_initial_state, "d_initial_state", {p.N, p.H, p.K, p.V}, qt, "q");
    if (saved) check_saved(p, saved, qt);
    a = DeltaBwd{a.p, q, k, v, g, beta, initial_state, d_output, d_final_state,
                 dq, dk, dv, dbeta, dg, d_initial_state, saved};
    if (p.N == 0) return;
    if (p.device_type == AK_CPU) {
      ak::linear::cpu::delta_bwd(a);
    } else {
      AK_CUDA_CALL(ak::linear::cuda::delta_bwd(a));
    }
  });
}

AK_API ak_status ak_delta_rule_decode(const ak_tensor* q, const ak_tensor* k, const ak_tensor* v, const ak_tensor* g,
                                      const ak_tensor* beta, const ak_tensor* state, double scale, int32_t flags,
                                      const ak_tensor* output, const ak_tensor* new_state) {
  AK_ENTRY("ak_delta_rule_decode", {
    check_flags(flags);
    check_scale(scale);
    DeltaDecode a;
    DeltaProblem& p = a.p;
    p.gated = (flags & AK_DELTA_GATED) != 0;
    p.l2norm = (flags & AK_DELTA_QK_L2NORM) != 0;
    p.recurrent = true;
    p.scale = scale;
    const ak_tensor& qt = check_inputs(p, false, q, k, v, g, beta);
    p.N = p.B;
    const ak_tensor& st = check_tensor(state, "state");
    require(st.dtype == AK_FLOAT32 || st.dtype == qt.dtype,
            str("state: expected dtype float32 or ") + dtype_name(qt.dtype) + " (that of q), got " +
                dtype_name(st.dtype));
    check_shape(st, "state", {p.B, p.H, p.K, p.V});
    require(is_contiguous(st), "state: expected a contiguous tensor");
    check_same_device(st, "state", qt, "q");
    check_rows_like_q(output, "output", {p.B, p.H, p.V}, qt);
    const ak_tensor& ns = check_tensor(new_state, "new_state");
    check_same_dtype(ns, "new_state", st, "state");
    check_shape(ns, "new_state", {p.B, p.H, p.K, p.V});
    require(is_contiguous(ns), "new_state: expected a contiguous tensor");
    check_same_device(ns, "new_state", qt, "q");
    check_in_place_or_apart(st, ns);
    a = DeltaDecode{a.p, q, k, v, g, beta, state, output, new_state};
    if (p.device_type == AK_CPU) {
      if (p.B == 0) return;
      ak::linear::cpu::delta_decode(a);
    } else {
      AK_CUDA_CALL(ak::linear::cuda::delta_decode(a));
    }
  });
}

}  // extern "C"
