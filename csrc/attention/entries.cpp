// The softmax-attention C entries: validate every argument (messages name it), fill AttnProblem,
// and hand the call to the backend of the tensors' device.
//
// Causal and windows: causal is folded into window_right = 0. A call with causal and
// window_right > 0 is accepted and clamped to 0: a key must pass every condition (causal and both
// window sides), so the causal bound is the binding one, as the seed's sliding-window ops state.
#include <cmath>
#include <string>
#include <vector>

#include "core/common.h"
#include "attention/problem.h"
#if AK_WITH_CUDA
#include "cuda/backend.h"
#endif

using namespace ak;
using namespace ak::attention;

namespace {

std::string str(int64_t v) { return std::to_string(v); }

// Any strides, as long as the head dimension is contiguous and nothing runs backwards.
void check_strides(const ak_tensor& t, const char* name) {
  require(t.strides[t.rank - 1] == 1 || t.shape[t.rank - 1] <= 1,
          std::string(name) + ": the last (head) dimension must be contiguous (stride 1), got stride " +
              str(t.strides[t.rank - 1]));
  for (int i = 0; i < t.rank; ++i) {
    require(t.strides[i] >= 0, std::string(name) + ": negative strides are not supported (dimension " + str(i) +
                                   " has stride " + str(t.strides[i]) + ")");
  }
}

int64_t longest(const std::vector<int64_t>& starts) {
  int64_t m = 0;
  for (size_t i = 1; i < starts.size(); ++i) m = std::max(m, starts[i] - starts[i - 1]);
  return m;
}

// Validates q, k, v and the scalar options; fills everything of AttnProblem.
AttnProblem make_problem(const ak_tensor* q_p, const ak_tensor* k_p, const ak_tensor* v_p, const ak_tensor* cu_q_p,
                         const ak_tensor* cu_kv_p, double sm_scale, double softcap, int32_t flags,
                         int32_t window_left, int32_t window_right, bool fp8 = false) {
  const ak_tensor& q = check_tensor(q_p, "q");
  const ak_tensor& k = check_tensor(k_p, "k");
  const ak_tensor& v = check_tensor(v_p, "v");
  if (fp8) {
    check_dtype(q, "q", {AK_FLOAT8_E4M3});
  } else {
    check_dtype(q, "q", {AK_FLOAT16, AK_BFLOAT16});
  }
  check_same_dtype(k, "k", q, "q");
  check_same_dtype(v, "v", q, "q");
  check_same_device(k, "k", q, "q");
  check_same_device(v, "v", q, "q");

  AttnProblem p;
  p.varlen = cu_q_p != nullptr || cu_kv_p != nullptr;
  require(!p.varlen || cu_q_p != nullptr,
          "cu_seqlens_q: expected a tensor because cu_seqlens_kv is given (varlen needs both), got none");
  require(!p.varlen || cu_kv_p != nullptr,
          "cu_seqlens_kv: expected a tensor because cu_seqlens_q is given (varlen needs both), got none");
  const int rank = p.varlen ? 3 : 4;
  const char* q_layout = p.varlen ? "[Tq, Hq, D] (varlen)" : "[B, Sq, Hq, D]";
  const char* kv_layout = p.varlen ? "[Tkv, Hkv, D] (varlen)" : "[B, Skv, Hkv, D]";
  require(q.rank == rank, std::string("q: expected rank ") + str(rank) + " " + q_layout + ", got " + shape_string(q));
  require(k.rank == rank, std::string("k: expected rank ") + str(rank) + " " + kv_layout + ", got " + shape_string(k));
  const int h = rank - 2, d = rank - 1;
  p.D = q.shape[d];
  p.Hq = q.shape[h];
  p.Hkv = k.shape[h];
  if (p.varlen) {
    check_shape(k, "k", {-1, -1, p.D});
  } else {
    p.B = q.shape[0];
    p.Sq = q.shape[1];
    p.Skv = k.shape[1];
    check_shape(k, "k", {p.B, -1, -1, p.D});
  }
  require(v.rank == k.rank, "v: expected shape " + shape_string(k) + " (same as k), got " + shape_string(v));
  for (int i = 0; i < k.rank; ++i) {
    require(v.shape[i] == k.shape[i],
            "v: expected shape " + shape_string(k) + " (same as k), got " + shape_string(v));
  }
  require(p.D % 8 == 0 && p.D >= 8 && p.D <= 256,
          "q: head dim D must be a multiple of 8 between 8 and 256, got " + str(p.D));
  require(p.Hkv >= 1, "k: expected at least one KV head, got shape " + shape_string(k));
  require(p.Hq % p.Hkv == 0, "q: the query heads (" + str(p.Hq) + ") must be a multiple of the KV heads of k (" +
                                 str(p.Hkv) + ") for grouped-query attention");
  check_strides(q, "q");
  check_strides(k, "k");
  check_strides(v, "v");

  require(std::isfinite(sm_scale) && sm_scale > 0, "sm_scale: expected a finite positive number, got " +
                                                       std::to_string(sm_scale));
  require(std::isfinite(softcap) && softcap >= 0,
          "softcap: expected a finite number >= 0 (0 for none), got " + std::to_string(softcap));
  require((flags & ~(AK_ATTN_CAUSAL | AK_ATTN_DETERMINISTIC)) == 0,
          "flags: unknown bits in " + str(flags) + " (known: AK_ATTN_CAUSAL = 1, AK_ATTN_DETERMINISTIC = 2)");
  require(window_left >= -1, "window_left: expected -1 (unlimited) or a size >= 0, got " + str(window_left));
  require(window_right >= -1, "window_right: expected -1 (unlimited) or a size >= 0, got " + str(window_right));

  p.dtype = q.dtype;
  p.out_dtype = q.dtype;
  p.device_type = q.device_type;
  p.device_index = q.device_index;
  p.sm_scale = static_cast<float>(sm_scale);
  p.softcap = static_cast<float>(softcap);
  p.causal = (flags & AK_ATTN_CAUSAL) != 0;
  p.deterministic = (flags & AK_ATTN_DETERMINISTIC) != 0;
  p.window_left = window_left;
  p.window_right = p.causal ? 0 : window_right;  // causal clamps any right window to 0 (see the top)

  if (p.varlen) {
    p.q_start = read_offsets(cu_q_p, "cu_seqlens_q", q, q.shape[0], "q");
    p.kv_start = read_offsets(cu_kv_p, "cu_seqlens_kv", q, k.shape[0], "k");
    require(p.q_start.size() == p.kv_start.size(),
            "cu_seqlens_kv: expected " + str(static_cast<int64_t>(p.q_start.size())) +
                " entries (same as cu_seqlens_q), got " + str(static_cast<int64_t>(p.kv_start.size())));
    p.N = static_cast<int64_t>(p.q_start.size()) - 1;
    p.B = p.N;
    p.Sq = longest(p.q_start);  // the longest sequence, for grid sizes
    p.Skv = longest(p.kv_start);
    p.cu_seqlens_q = cu_q_p;
    p.cu_seqlens_kv = cu_kv_p;
  } else {
    p.N = p.B;
  }
  return p;
}

// A tensor shaped, typed and placed like `ref` (an output or a gradient).
void check_like(const ak_tensor* t_p, const char* name, const ak_tensor& ref, const char* ref_name) {
  const ak_tensor& t = check_tensor(t_p, name);
  check_same_dtype(t, name, ref, ref_name);
  check_same_device(t, name, ref, ref_name);
  bool same = t.rank == ref.rank;
  for (int i = 0; same && i < t.rank; ++i) same = t.shape[i] == ref.shape[i];
  require(same, std::string(name) + ": expected shape " + shape_string(ref) + " (same as " + ref_name + "), got " +
                    shape_string(t));
  check_strides(t, name);
}

// LSE: float32, contiguous, [B, Hq, Sq] or [Hq, Tq] for varlen.
void check_lse(const ak_tensor* t_p, const AttnProblem& p, const ak_tensor& q) {
  const ak_tensor& t = check_tensor(t_p, "lse");
  check_dtype(t, "lse", {AK_FLOAT32});
  check_same_device(t, "lse", q, "q");
  if (p.varlen) {
    require(t.rank == 2 && t.shape[0] == p.Hq && t.shape[1] == q.shape[0],
            "lse: expected shape [Hq, Tq] = [" + str(p.Hq) + ", " + str(q.shape[0]) + "] (varlen), got " +
                shape_string(t));
  } else {
    require(t.rank == 3 && t.shape[0] == p.B && t.shape[1] == p.Hq && t.shape[2] == p.Sq,
            "lse: expected shape [B, Hq, Sq] = [" + str(p.B) + ", " + str(p.Hq) + ", " + str(p.Sq) + "], got " +
                shape_string(t));
  }
  require(is_contiguous(t), "lse: expected a contiguous tensor");
}

}  // namespace

extern "C" {

AK_API ak_status ak_attention_fwd(const ak_tensor* q, const ak_tensor* k, const ak_tensor* v,
                                  const ak_tensor* cu_seqlens_q, const ak_tensor* cu_seqlens_kv, double sm_scale,
                                  double softcap, int32_t flags, int32_t window_left, int32_t window_right,
                                  const ak_tensor* output, const ak_tensor* lse) {
  AK_ENTRY("ak_attention_fwd", {
    AttnFwd a;
    a.p = make_problem(q, k, v, cu_seqlens_q, cu_seqlens_kv, sm_scale, softcap, flags, window_left, window_right);
    a.q = q;
    a.k = k;
    a.v = v;
    check_like(output, "output", *q, "q");
    if (lse != nullptr) check_lse(lse, a.p, *q);
    a.output = output;
    a.lse = lse;
    if (numel(*output) == 0) return;  // no row to write (and then no LSE entry either)
    if (a.p.device_type == AK_CPU) {
      cpu::attention_fwd(a);
    } else {
      AK_CUDA_CALL(ak::attention::cuda::attention_fwd(a));
    }
  });
}

AK_API ak_status ak_attention_fwd_fp8(const ak_tensor* q, const ak_tensor* k, const ak_tensor* v,
                                      const ak_tensor* q_scale, const ak_tensor* k_scale, const ak_tensor* v_scale,
                                      double sm_scale, double softcap, int32_t flags, int32_t window_left,
                                      int32_t window_right, const ak_tensor* output) {
  AK_ENTRY("ak_attention_fwd_fp8", {
    AttnFwd a;
    a.p = make_problem(q, k, v, nullptr, nullptr, sm_scale, softcap, flags, window_left, window_right, true);
    a.q = q;
    a.k = k;
    a.v = v;
    const char* names[3] = {"q_scale", "k_scale", "v_scale"};
    const ak_tensor* scales[3] = {q_scale, k_scale, v_scale};
    for (int i = 0; i < 3; ++i) {
      const ak_tensor& s = check_tensor(scales[i], names[i]);
      check_dtype(s, names[i], {AK_FLOAT32});
      check_same_device(s, names[i], *q, "q");
      check_shape(s, names[i], {a.p.B, a.p.Hkv});
      require(is_contiguous(s), std::string(names[i]) + ": expected a contiguous tensor");
    }
    const ak_tensor& o = check_tensor(output, "output");
    check_dtype(o, "output", {AK_FLOAT16, AK_BFLOAT16});
    check_same_device(o, "output", *q, "q");
    check_shape(o, "output", {a.p.B, a.p.Sq, a.p.Hq, a.p.D});
    check_strides(o, "output");
    a.p.out_dtype = o.dtype;
    a.q_scale = q_scale;
    a.k_scale = k_scale;
    a.v_scale = v_scale;
    a.output = output;
    if (numel(o) == 0) return;
    if (a.p.device_type == AK_CPU) {
      cpu::attention_fwd(a);
    } else {
      AK_CUDA_CALL(ak::attention::cuda::attention_fwd(a));
    }
  });
}

AK_API ak_status ak_attention_bwd(const ak_tensor* q, const ak_tensor* k, const ak_tensor* v,
                                  const ak_tensor* output, const ak_tensor* d_output, const ak_tensor* lse,
                                  const ak_tensor* cu_seqlens_q, const ak_tensor* cu_seqlens_kv, double sm_scale,
                                  double softcap, int32_t flags, int32_t window_left, int32_t window_right,
                                  const ak_tensor* dq, const ak_tensor* dk, const ak_tensor* dv) {
  AK_ENTRY("ak_attention_bwd", {
    AttnBwd a;
    a.p = make_problem(q, k, v, cu_seqlens_q, cu_seqlens_kv, sm_scale, softcap, flags, window_left, window_right);
    check_like(output, "output", *q, "q");
    check_like(d_output, "d_output", *q, "q");
    check_lse(lse, a.p, *q);
    check_like(dq, "dq", *q, "q");
    check_like(dk, "dk", *k, "k");
    check_like(dv, "dv", *k, "k");
    a.q = q;
    a.k = k;
    a.v = v;
    a.output = output;
    a.d_output = d_output;
    a.lse = lse;
    a.dq = dq;
    a.dk = dk;
    a.dv = dv;
    if (numel(*dq) == 0 && numel(*dk) == 0) return;  // no gradient to write
    if (a.p.device_type == AK_CPU) {
      cpu::attention_bwd(a);
    } else {
      AK_CUDA_CALL(ak::attention::cuda::attention_bwd(a));
    }
  });
}

}  // extern "C"
