// The delta-rule family's C entries: validate every argument (messages name it), fill the internal
// structs of delta_rule.h and dispatch by device.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/common.h"
#include "linear/planner.h"
#include "linear/problem.h"
#include "linear/saved_layout.h"
#if AK_WITH_CUDA
#include "cuda/backend.h"
#endif

using namespace ak;
using namespace ak::linear;

namespace {

constexpr int32_t kKnownFlags = AK_DELTA_GATED | AK_DELTA_QK_L2NORM | AK_DELTA_RECURRENT;
constexpr int64_t kMaxHeadDim = 256;

std::string str(const char* s) { return std::string(s); }

// The last dimension must be contiguous; every stride non-negative (views read in place).
void check_row_layout(const ak_tensor& t, const char* name) {
  for (int i = 0; i < t.rank; ++i) {
    require(t.strides[i] >= 0, str(name) + ": strides must be non-negative, got " + std::to_string(t.strides[i]) +
                                   " in dimension " + std::to_string(i));
  }
  if (t.rank > 0 && t.shape[t.rank - 1] > 1) {
    require(t.strides[t.rank - 1] == 1, str(name) + ": the last dimension must be contiguous (stride 1), got stride " +
                                            std::to_string(t.strides[t.rank - 1]));
  }
}

// A tensor read or written row by row: well formed, of the expected rank and shape, last dim contiguous,
// on the reference device.
const ak_tensor& check_rows(const ak_tensor* t, const char* name, const std::vector<int64_t>& shape,
                            const ak_tensor& ref, const char* ref_name) {
  const ak_tensor& r = check_tensor(t, name);
  check_shape(r, name, shape);
  check_row_layout(r, name);
  check_same_device(r, name, ref, ref_name);
  return r;
}

// The same for a tensor of q's dtype.
const ak_tensor& check_rows_like_q(const ak_tensor* t, const char* name, const std::vector<int64_t>& shape,
                                   const ak_tensor& q) {
  const ak_tensor& r = check_rows(t, name, shape, q, "q");
  check_same_dtype(r, name, q, "q");
  return r;
}

// A state-like tensor: contiguous, fp32, exact shape, on the reference device.
const ak_tensor& check_state(const ak_tensor* t, const char* name, std::initializer_list<int64_t> shape,
                             const ak_tensor& ref, const char* ref_name) {
  const ak_tensor& r = check_tensor(t, name);
  check_dtype(r, name, {AK_FLOAT32});
  check_shape(r, name, shape);
  require(is_contiguous(r), str(name) + ": expected a contiguous tensor");
  check_same_device(r, name, ref, ref_name);
  return r;
}

void check_flags(int32_t flags) {
  require((flags & ~kKnownFlags) == 0,
          "flags: unknown bits in " + std::to_string(flags) +
              " (expected a combination of AK_DELTA_GATED = 1, AK_DELTA_QK_L2NORM = 2, AK_DELTA_RECURRENT = 4)");
}

void check_scale(double scale) {
  require(std::isfinite(scale), "scale: expected a finite number, got " + std::to_string(scale));
}

void check_chunk_size(int32_t chunk_size) {
  require(chunk_size == 32 || chunk_size == 64 || chunk_size == 128,
          "chunk_size: expected 32, 64 or 128, got " + std::to_string(chunk_size));
}

void check_head_dims(int64_t K, int64_t V, const char* q_name, const char* v_name) {
  require(K >= 1 && K <= kMaxHeadDim,
          str(q_name) + ": head dimension K must be in 1.." + std::to_string(kMaxHeadDim) + ", got " + std::to_string(K));
  require(V >= 1 && V <= kMaxHeadDim,
          str(v_name) + ": head dimension V must be in 1.." + std::to_string(kMaxHeadDim) + ", got " + std::to_string(V));
}

void check_heads(int64_t HK, int64_t H, const char* qk_name, const char* v_name) {
  require(HK >= 1, str(qk_name) + ": expected at least one head, got " + std::to_string(HK));
  require(H >= 1, str(v_name) + ": expected at least one head, got " + std::to_string(H));
  require(H % HK == 0, str(v_name) + ": its " + std::to_string(H) + " value heads must be a multiple of the " +
                           std::to_string(HK) + " query/key heads of " + qk_name);
}

// Reads cu_seqlens to the host and checks it: int32 [N + 1], N >= 1, starting at 0, nondecreasing,
// ending at or before T.
std::vector<int64_t> read_cu_seqlens(const ak_tensor& cu, int64_t T) {
  const int64_t count = cu.shape[0];
  std::vector<int32_t> host(static_cast<size_t>(count));
  const int64_t bytes = count * static_cast<int64_t>(sizeof(int32_t));
  if (cu.device_type == AK_CPU) {
    std::memcpy(host.data(), cu.data, static_cast<size_t>(bytes));
  } else {
    AK_CUDA_CALL(ak::cuda::copy_to_host(cu, host.data(), bytes));
  }
  require(host[0] == 0, "cu_seqlens: must start at 0, got " + std::to_string(host[0]));
  std::vector<int64_t> starts(host.begin(), host.end());
  for (int64_t i = 1; i < count; ++i) {
    require(starts[i] >= starts[i - 1], "cu_seqlens: must be nondecreasing, but entry " + std::to_string(i) + " (" +
                                            std::to_string(starts[i]) + ") is below entry " + std::to_string(i - 1) +
                                            " (" + std::to_string(starts[i - 1]) + ")");
  }
  require(starts[count - 1] <= T, "cu_seqlens: the last offset " + std::to_string(starts[count - 1]) +
                                      " exceeds the " + std::to_string(T) + " tokens of q");
  return starts;
}

// q, k, v, g and beta of a call, each [B, T, ...] (tokens) or [B, ...] (one decode step): q and k
// [.., HK, K], v [.., H, V], g (with AK_DELTA_GATED) and beta [.., H] in float32. Fills p's extents,
// dtype and device (T = 1 for a decode step); returns q.
const ak_tensor& check_inputs(DeltaProblem& p, bool tokens, const ak_tensor* q_, const ak_tensor* k_,
                              const ak_tensor* v_, const ak_tensor* g_, const ak_tensor* beta_) {
  const int rank = tokens ? 4 : 3;
  const std::string lead = tokens ? "B, T, " : "B, ";
  auto expected_rank = [&](const char* name, const char* tail, const ak_tensor& t) {
    require(t.rank == rank, str(name) + ": expected rank " + std::to_string(rank) + " [" + lead + tail +
                                "], got shape " + shape_string(t));
  };
  const ak_tensor& q = check_tensor(q_, "q");
  check_dtype(q, "q", {AK_FLOAT16, AK_BFLOAT16, AK_FLOAT32});
  expected_rank("q", "HK, K", q);
  check_row_layout(q, "q");
  p.B = q.shape[0];
  p.T = tokens ? q.shape[1] : 1;
  p.HK = q.shape[rank - 2];
  p.K = q.shape[rank - 1];
  p.dtype = q.dtype;
  p.device_type = q.device_type;
  p.device_index = q.device_index;
  auto dims = [&](std::initializer_list<int64_t> tail) {
    std::vector<int64_t> d{p.B};
    if (tokens) d.push_back(p.T);
    d.insert(d.end(), tail);
    return d;
  };

  const ak_tensor& k = check_rows(k_, "k", dims({p.HK, p.K}), q, "q");
  check_same_dtype(k, "k", q, "q");
  const ak_tensor& v = check_tensor(v_, "v");
  expected_rank("v", "H, V", v);
  check_rows(v_, "v", dims({-1, -1}), q, "q");
  check_same_dtype(v, "v", q, "q");
  p.H = v.shape[rank - 2];
  p.V = v.shape[rank - 1];
  check_heads(p.HK, p.H, "q", "v");
  check_head_dims(p.K, p.V, "q", "v");

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

  if (cu_seqlens_) {
    const ak_tensor& cu = check_tensor(cu_seqlens_, "cu_seqlens");
    check_dtype(cu, "cu_seqlens", {AK_INT32});
    require(cu.rank == 1, "cu_seqlens: expected rank 1 [N + 1], got shape " + shape_string(cu));
    require(cu.shape[0] >= 2, "cu_seqlens: expected at least 2 offsets ([N + 1] for N >= 1 sequences), got " +
                                  std::to_string(cu.shape[0]));
    require(is_contiguous(cu), "cu_seqlens: expected a contiguous tensor");
    check_same_device(cu, "cu_seqlens", q, "q");
    require(p.B == 1, "q: packed input (cu_seqlens given) needs batch size 1, got " + std::to_string(p.B));
    p.varlen = true;
    p.cu_seqlens = cu_seqlens_;
    p.seq_start = read_cu_seqlens(cu, p.T);
    p.N = cu.shape[0] - 1;
  } else {
    p.N = p.B;
  }
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

// An upper bound on the chunks of 64 of a call (the saved buffer's size is counted in them).
int64_t saved_chunks_bound(const DeltaProblem& p) {
  return p.varlen ? (p.T + 63) / 64 + p.N : p.B * ((p.T + 63) / 64);
}

// The saved-for-backward buffer: contiguous, 1-D, dtype of q, on q's device, large enough for the
// per-chunk states and v - w S of every chunk of 64 (attnkit_linear.h).
void check_saved(const DeltaProblem& p, const ak_tensor* saved, const ak_tensor& q) {
  const ak_tensor& t = check_contiguous(saved, "saved");
  require(t.rank == 1, "saved: expected a 1-D buffer, got shape " + shape_string(t));
  check_same_dtype(t, "saved", q, "q");
  check_same_device(t, "saved", q, "q");
  const int64_t need = saved_elements(p.H, saved_chunks_bound(p), p.K, p.V);
  require(t.shape[0] >= need, "saved: expected at least " + std::to_string(need) +
                                  " elements (H * NCS * (K V + 64 V + 64 * 64 + 64 K)), got " +
                                  std::to_string(t.shape[0]));
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
    if (plan.save) *elements = saved_elements(p.H, saved_chunks_bound(p), p.K, p.V);
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
    // In place (the same memory) or apart; a partial overlap would read half-written states.
    const int64_t bytes = numel(st) * static_cast<int64_t>(dtype_size(st.dtype));
    const char* s0 = static_cast<const char*>(st.data);
    const char* n0 = static_cast<const char*>(ns.data);
    require(bytes == 0 || s0 == n0 || n0 + bytes <= s0 || s0 + bytes <= n0,
            "new_state: must be the same memory as state (in place) or not overlap it");
    a = DeltaDecode{a.p, q, k, v, g, beta, state, output, new_state};
    if (p.B == 0) return;
    if (p.device_type == AK_CPU) {
      ak::linear::cpu::delta_decode(a);
    } else {
      AK_CUDA_CALL(ak::linear::cuda::delta_decode(a));
    }
  });
}

}  // extern "C"
