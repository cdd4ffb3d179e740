// The gate transforms' C entries: check every argument (messages name it), describe the call
// (gate/call.h) and hand it to the backend of raw's device. dt_bias's rank says whether the gate is
// per head (raw [..., H]) or per channel (raw [..., H, D]).
#include <cmath>
#include <string>

#include "core/common.h"
#include "linear/checks.h"
#include "linear/gate/backend.h"
#if AK_WITH_CUDA
#include "linear/common/host_mirror.h"
#endif

using namespace ak;
using namespace ak::linear::gate;

namespace {

std::string str(int64_t v) { return std::to_string(v); }

constexpr int64_t kMaxChannels = (int64_t{1} << 31) - 1;

constexpr int32_t kKnownFlags = AK_GATE_FASTMATH | AK_GATE_IMPL_FUSED | AK_GATE_IMPL_REFERENCE;

Settings check_settings(int32_t kind, double lower_bound, int32_t flags) {
  require(kind == AK_GATE_SOFTPLUS || kind == AK_GATE_BOUNDED,
          "kind: expected 0 (AK_GATE_SOFTPLUS) or 1 (AK_GATE_BOUNDED), got " + str(kind));
  require((flags & ~kKnownFlags) == 0,
          "flags: unknown bits in " + str(flags) +
              " (expected AK_GATE_FASTMATH = 1, AK_GATE_IMPL_FUSED = 2, AK_GATE_IMPL_REFERENCE = 4)");
  Settings s;
  s.bounded = kind == AK_GATE_BOUNDED;
  s.fast = (flags & AK_GATE_FASTMATH) != 0;
  if (s.bounded) {
    require(std::isfinite(lower_bound) && lower_bound <= 0 && lower_bound >= -3.0e38,
            "lower_bound: expected a number in [-3e38, 0] with AK_GATE_BOUNDED, got " + std::to_string(lower_bound));
  } else {
    require(lower_bound == 0, "lower_bound: expected 0 with AK_GATE_SOFTPLUS (it has no bound), got " +
                                  std::to_string(lower_bound));
  }
  s.lower_bound = static_cast<float>(lower_bound);
  return s;
}

// raw, a_log and dt_bias: the call's shape.
Shape check_inputs(const ak_tensor* raw_p, const ak_tensor* a_log_p, const ak_tensor* dt_bias_p) {
  const ak_tensor& raw = check_tensor(raw_p, "raw");
  require(is_float_dtype(raw.dtype), std::string("raw: expected a float dtype, got ") + dtype_name(raw.dtype));
  const ak_tensor& a_log = check_contiguous(a_log_p, "a_log");
  check_dtype(a_log, "a_log", {AK_FLOAT32});
  check_same_device(a_log, "a_log", raw, "raw");
  require(a_log.rank == 1, "a_log: expected shape [H], got " + shape_string(a_log));
  const ak_tensor& dt_bias = check_contiguous(dt_bias_p, "dt_bias");
  check_dtype(dt_bias, "dt_bias", {AK_FLOAT32});
  check_same_device(dt_bias, "dt_bias", raw, "raw");
  Shape s;
  s.heads = a_log.shape[0];
  require(dt_bias.rank == 1 || dt_bias.rank == 2,
          "dt_bias: expected shape [H] (per head) or [H, D] (per channel), got " + shape_string(dt_bias));
  s.per_channel = dt_bias.rank == 2;
  s.columns = s.per_channel ? dt_bias.shape[1] : 1;
  require(dt_bias.shape[0] == s.heads,
          "dt_bias: expected " + str(s.heads) + " heads (a_log's), got shape " + shape_string(dt_bias));
  const int tail = dt_bias.rank;
  require(raw.rank >= tail, std::string("raw: expected shape [..., H") + (s.per_channel ? ", D" : "") +
                                "] matching dt_bias " + shape_string(dt_bias) + ", got " + shape_string(raw));
  bool ok = true;
  for (int i = 0; i < tail; ++i) ok = ok && raw.shape[raw.rank - tail + i] == dt_bias.shape[i];
  require(ok, std::string("raw: expected shape [..., H") + (s.per_channel ? ", D" : "") + "] matching dt_bias " +
                  shape_string(dt_bias) + ", got " + shape_string(raw));
  s.channels = s.heads * s.columns;
  require(s.channels <= kMaxChannels, "dt_bias: at most 2^31 - 1 channels, got " + str(s.channels));
  // Rows without channels hold nothing (and their count could exceed any bound).
  s.rows = s.channels == 0 ? 0 : 1;
  for (int i = 0; s.rows > 0 && i < raw.rank - tail; ++i) s.rows *= raw.shape[i];
  return s;
}

// A tensor shaped like raw (any strides; an output may not write one element twice).
const ak_tensor& like_raw(const ak_tensor* p, const char* name, const ak_tensor& raw, bool output) {
  const ak_tensor& t = check_tensor(p, name);
  check_same_device(t, name, raw, "raw");
  bool ok = t.rank == raw.rank;
  for (int i = 0; ok && i < t.rank; ++i) ok = t.shape[i] == raw.shape[i];
  require(ok, std::string(name) + ": expected shape " + shape_string(raw) + " (raw's), got " + shape_string(t));
  if (output && numel(t) > 0) {
    for (int i = 0; i < t.rank; ++i) {
      require(t.shape[i] <= 1 || t.strides[i] != 0,
              std::string(name) + ": a zero stride would write one element many times");
    }
  }
  return t;
}

Channels channels_of(const ak_tensor& t, bool per_channel) {
  Channels c;
  if (per_channel) {
    c.h = t.strides[t.rank - 2];
    c.d = t.strides[t.rank - 1];
  } else {
    c.h = t.strides[t.rank - 1];
  }
  return c;
}

#define AK_GATE_DISPATCH(t, call)  \
  if ((t).device_type == AK_CPU) { \
    cpu::call;                     \
  } else {                         \
    AK_CUDA_CALL(cuda::call);      \
  }

// The implementation the flags ask for; "reference" on CUDA runs the CPU backend on host copies.
linear::Impl impl_of(int32_t flags, const ak_tensor& raw) {
  return linear::impl_for_device(flags, AK_GATE_IMPL_FUSED, AK_GATE_IMPL_REFERENCE, "AK_GATE_IMPL_FUSED",
                                 "AK_GATE_IMPL_REFERENCE", raw.device_type);
}

// Runs `run` over the call's tensors: as given, or (the reference on a CUDA device) over host copies of
// them, the outputs copied back after. `tensors` lists the inputs, then `outputs` of them are written.
template <class F>
void with_backend_tensors(linear::Impl impl, std::initializer_list<const ak_tensor*> inputs,
                          std::initializer_list<const ak_tensor*> outputs, F&& run) {
  std::vector<const ak_tensor*> all(inputs);
  all.insert(all.end(), outputs.begin(), outputs.end());
  if (impl != linear::Impl::reference || all.front()->device_type == AK_CPU) return run(all);
#if AK_WITH_CUDA
  linear::cuda::HostMirror m;
  std::vector<const ak_tensor*> host;
  for (const ak_tensor* t : inputs) host.push_back(m.input(t));
  for (const ak_tensor* t : outputs) host.push_back(m.output(t));
  run(host);
  m.write_back();
#endif
}

}  // namespace

extern "C" {

AK_API ak_status ak_gate_transform_fwd(const ak_tensor* raw_p, const ak_tensor* a_log, const ak_tensor* dt_bias,
                                       int32_t kind, double lower_bound, int32_t flags, const ak_tensor* gate_p) {
  AK_ENTRY("ak_gate_transform_fwd", {
    ForwardArgs a;
    a.settings = check_settings(kind, lower_bound, flags);
    a.shape = check_inputs(raw_p, a_log, dt_bias);
    const linear::Impl impl = impl_of(flags, *raw_p);
    const ak_tensor& gate_checked = like_raw(gate_p, "gate", *raw_p, true);
    check_dtype(gate_checked, "gate", {AK_FLOAT32});
    if (a.shape.rows == 0 || a.shape.channels == 0) return;
    with_backend_tensors(impl, {raw_p, a_log, dt_bias}, {gate_p}, [&](const std::vector<const ak_tensor*>& t) {
      const ak_tensor &raw = *t[0], &gate = *t[3];
      const int lead = raw.rank - (a.shape.per_channel ? 2 : 1);
      const ak_tensor* views[2] = {&raw, &gate};
      a.rows = math::make_walk(views, lead);
      a.raw_ch = channels_of(raw, a.shape.per_channel);
      a.gate_ch = channels_of(gate, a.shape.per_channel);
      a.raw = raw.data;
      a.raw_dtype = raw.dtype;
      a.gate = static_cast<float*>(gate.data);
      a.a_log = static_cast<const float*>(t[1]->data);
      a.dt_bias = static_cast<const float*>(t[2]->data);
      a.device = raw.device_index;
      AK_GATE_DISPATCH(raw, forward(a));
    });
  });
}

AK_API ak_status ak_gate_transform_bwd(const ak_tensor* raw_p, const ak_tensor* a_log, const ak_tensor* dt_bias,
                                       const ak_tensor* d_gate_p, int32_t kind, double lower_bound, int32_t flags,
                                       const ak_tensor* d_raw_p, const ak_tensor* d_a_log_p,
                                       const ak_tensor* d_dt_bias_p) {
  AK_ENTRY("ak_gate_transform_bwd", {
    BackwardArgs a;
    a.settings = check_settings(kind, lower_bound, flags);
    a.shape = check_inputs(raw_p, a_log, dt_bias);
    const linear::Impl impl = impl_of(flags, *raw_p);
    const ak_tensor& raw = *raw_p;
    const ak_tensor& d_gate = like_raw(d_gate_p, "d_gate", raw, false);
    check_dtype(d_gate, "d_gate", {AK_FLOAT32});
    const ak_tensor& d_raw = like_raw(d_raw_p, "d_raw", raw, true);
    check_same_dtype(d_raw, "d_raw", raw, "raw");
    const ak_tensor& d_a_log = check_contiguous(d_a_log_p, "d_a_log");
    check_dtype(d_a_log, "d_a_log", {AK_FLOAT32});
    check_same_device(d_a_log, "d_a_log", raw, "raw");
    check_shape(d_a_log, "d_a_log", shape_of(*a_log));
    const ak_tensor& d_dt_bias = check_contiguous(d_dt_bias_p, "d_dt_bias");
    check_dtype(d_dt_bias, "d_dt_bias", {AK_FLOAT32});
    check_same_device(d_dt_bias, "d_dt_bias", raw, "raw");
    check_shape(d_dt_bias, "d_dt_bias", shape_of(*dt_bias));
    if (a.shape.heads == 0) return;
    const std::initializer_list<const ak_tensor*> inputs = {raw_p, d_gate_p, a_log, dt_bias};
    const std::initializer_list<const ak_tensor*> outputs = {d_raw_p, d_a_log_p, d_dt_bias_p};
    with_backend_tensors(impl, inputs, outputs, [&](const std::vector<const ak_tensor*>& t) {
      const ak_tensor &x = *t[0], &dg = *t[1], &dx = *t[4];
      const int lead = x.rank - (a.shape.per_channel ? 2 : 1);
      const ak_tensor* views[3] = {&x, &dg, &dx};
      a.rows = math::make_walk(views, lead);
      a.raw_ch = channels_of(x, a.shape.per_channel);
      a.dg_ch = channels_of(dg, a.shape.per_channel);
      a.draw_ch = channels_of(dx, a.shape.per_channel);
      a.raw = x.data;
      a.raw_dtype = x.dtype;
      a.d_gate = static_cast<const float*>(dg.data);
      a.d_raw = dx.data;
      a.a_log = static_cast<const float*>(t[2]->data);
      a.dt_bias = static_cast<const float*>(t[3]->data);
      a.d_a_log = static_cast<float*>(t[5]->data);
      a.d_dt_bias = static_cast<float*>(t[6]->data);
      a.device = x.device_index;
      AK_GATE_DISPATCH(x, backward(a));
    });
  });
}

}  // extern "C"
