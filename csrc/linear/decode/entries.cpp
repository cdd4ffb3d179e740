// The C entry of the paged decode step (recurrentGdnDecode, recurrentKdaDecode): every argument
// checked (the messages name it), the extents read off the pool and the packed row, then dispatched by
// device. Index values (unique, below the pool's rows) are the caller's to keep, as in serving loops
// that cannot read them back; the CPU backend refuses an index past the pool instead of reading it.
#include <cmath>
#include <string>

#include "core/common.h"
#include "linear/checks.h"
#include "linear/decode/cpu.h"
#include "linear/decode/problem.h"
#include "linear/decode/slots.h"
#if AK_WITH_CUDA
#include "linear/decode/cuda.h"
#endif

using namespace ak;
using namespace ak::linear;

namespace {

constexpr int32_t kKnownFlags = AK_DECODE_PER_CHANNEL | AK_DECODE_BOUNDED | AK_DECODE_TRUSTED_INDICES |
                                 AK_DECODE_IMPL_FUSED | AK_DECODE_IMPL_REFERENCE;

PagedDecode parse(const ak_tensor* qkv_, const ak_tensor* raw_gate, const ak_tensor* raw_beta, const ak_tensor* a_log,
                  const ak_tensor* dt_bias, const ak_tensor* state_, const ak_tensor* indices,
                  const ak_tensor* has_initial, double scale, double lower_bound, int32_t flags,
                  const ak_tensor* output) {
  require((flags & ~kKnownFlags) == 0, "flags: unknown bits in " + std::to_string(flags) +
                                           " (expected AK_DECODE_PER_CHANNEL = 1, AK_DECODE_BOUNDED = 2, " +
                                           "AK_DECODE_TRUSTED_INDICES = 4, AK_DECODE_IMPL_FUSED = 8, " +
                                           "AK_DECODE_IMPL_REFERENCE = 16)");
  PagedDecode d;
  d.impl = impl_from_flags(flags, AK_DECODE_IMPL_FUSED, AK_DECODE_IMPL_REFERENCE, "AK_DECODE_IMPL_FUSED",
                           "AK_DECODE_IMPL_REFERENCE");
  d.per_channel = (flags & AK_DECODE_PER_CHANNEL) != 0;
  d.bounded = (flags & AK_DECODE_BOUNDED) != 0;
  d.trusted_indices = (flags & AK_DECODE_TRUSTED_INDICES) != 0;
  require(d.per_channel || !d.bounded, "flags: the bounded gate transform needs a gate per key channel");
  check_scale(scale);
  require(std::isfinite(lower_bound) && lower_bound <= 0,
          "lower_bound: expected a finite number <= 0, got " + std::to_string(lower_bound));
  d.scale = scale, d.lower_bound = lower_bound;
  const ak_tensor& qkv = check_tensor(qkv_, "packed_qkv");
  check_dtype(qkv, "packed_qkv", {AK_FLOAT16, AK_BFLOAT16, AK_FLOAT32});
  require(qkv.rank == 2, "packed_qkv: expected [B, 2 HK K + H V], got " + shape_string(qkv));
  check_row_layout(qkv, "packed_qkv");
  check_device(qkv, "packed_qkv");
  const ak_tensor& st = check_tensor(state_, "state_cache");
  check_dtype(st, "state_cache", {AK_FLOAT32, AK_BFLOAT16});
  require(st.rank == 4, "state_cache: expected [num_slots, H, V, K], got " + shape_string(st));
  check_same_device(st, "state_cache", qkv, "packed_qkv");
  d.B = qkv.shape[0], d.slots = st.shape[0], d.H = st.shape[1], d.V = st.shape[2], d.K = st.shape[3];
  require(st.strides[3] == 1 && st.strides[2] == d.K && st.strides[1] == d.V * d.K && st.strides[0] >= d.H * d.V * d.K,
          "state_cache: expected every slot's [H, V, K] dense (slots may be apart)");
  require(d.H >= 1 && d.K >= 1 && d.V >= 1, "state_cache: expected H, V and K >= 1, got " + shape_string(st));
  require(d.K <= kMaxHeadDim, "state_cache: K must be at most " + std::to_string(kMaxHeadDim) + ", got " +
                                  std::to_string(d.K));
  const int64_t width = qkv.shape[1] - d.H * d.V;
  require(width > 0 && width % (2 * d.K) == 0,
          "packed_qkv: a row of " + std::to_string(qkv.shape[1]) + " values does not split into [Q | K] of " +
              "K = " + std::to_string(d.K) + " per head and V = " + std::to_string(d.V) + " for " +
              std::to_string(d.H) + " value heads");
  d.HK = width / (2 * d.K);
  require(d.H % d.HK == 0, "packed_qkv: its " + std::to_string(d.HK) + " query/key heads do not divide the " +
                               std::to_string(d.H) + " value heads of state_cache");
  if (d.per_channel) {
    check_rows(raw_gate, "raw_gate", {1, d.B, d.H, d.K}, qkv, "packed_qkv");
    check_dtype(check_rows(dt_bias, "dt_bias", {d.H, d.K}, qkv, "packed_qkv"), "dt_bias", {AK_FLOAT32});
  } else {
    check_rows(raw_gate, "raw_gate", {1, d.B, d.H}, qkv, "packed_qkv");
    check_dtype(check_rows(dt_bias, "dt_bias", {d.H}, qkv, "packed_qkv"), "dt_bias", {AK_FLOAT32});
  }
  check_dtype(*raw_gate, "raw_gate", {AK_FLOAT16, AK_BFLOAT16, AK_FLOAT32});
  check_dtype(check_rows(raw_beta, "raw_beta", {1, d.B, d.H}, qkv, "packed_qkv"), "raw_beta",
              {AK_FLOAT16, AK_BFLOAT16, AK_FLOAT32});
  check_dtype(check_rows(a_log, "a_log", {d.H}, qkv, "packed_qkv"), "a_log", {AK_FLOAT32});
  check_per_sequence(indices, "state_indices", AK_INT32, d.B, qkv, "packed_qkv");
  if (has_initial) check_per_sequence(has_initial, "has_initial_state", AK_BOOL, d.B, qkv, "packed_qkv");
  check_rows_like_q(output, "output", {1, d.B, d.H, d.V}, qkv);
  d.qkv = qkv_, d.raw_gate = raw_gate, d.raw_beta = raw_beta, d.a_log = a_log, d.dt_bias = dt_bias;
  d.state = state_, d.indices = indices, d.has_initial = has_initial, d.output = output;
  return d;
}

}  // namespace

extern "C" {

AK_API ak_status ak_paged_decode(const ak_tensor* packed_qkv, const ak_tensor* raw_gate, const ak_tensor* raw_beta,
                                 const ak_tensor* a_log, const ak_tensor* dt_bias, const ak_tensor* state_cache,
                                 const ak_tensor* state_indices, const ak_tensor* has_initial_state, double scale,
                                 double lower_bound, int32_t flags, const ak_tensor* output) {
  AK_ENTRY("ak_paged_decode", {
    const PagedDecode d = parse(packed_qkv, raw_gate, raw_beta, a_log, dt_bias, state_cache, state_indices,
                                has_initial_state, scale, lower_bound, flags, output);
    if (packed_qkv->device_type == AK_CPU) {
      if (d.impl == DecodeImpl::fused) refuse_fused_on_cpu();
      if (d.B == 0) return;
      require_slots_in_pool(state_indices, d.B, d.slots);
      ak::linear::cpu::paged_decode(d);
    } else {
      AK_CUDA_CALL(ak::linear::cuda::paged_decode(d));
    }
  });
}

}  // extern "C"
