// The causal convolution's C entries: check every argument (messages name it), then hand the call
// to the backend of x's device. The final histories and the weight gradient are written even when
// there are no tokens (an empty sequence passes its history through; the gradient is zero).
#include <string>
#include <vector>

#include "core/common.h"
#include "linear/checks.h"
#include "linear/conv/backend.h"

using namespace ak;
using namespace ak::linear::conv;

namespace {

std::string str(int64_t v) { return std::to_string(v); }

Floats floats(const ak_tensor* t) {
  Floats f;
  if (t != nullptr) {
    f.data = t->data;
    f.dtype = t->dtype;
  }
  return f;
}

Tokens tokens(const ak_tensor& t) {
  Tokens v;
  v.f = floats(&t);
  v.batch_stride = t.strides[0];
  v.token_stride = t.strides[1];
  return v;
}

// A [B, T, C] tensor of x's dtype on x's device, channels contiguous.
const ak_tensor& check_like_x(const ak_tensor* t, const char* name, const ak_tensor& x) {
  const ak_tensor& r = ak::linear::check_rows(t, name, {x.shape[0], x.shape[1], x.shape[2]}, x, "x");
  check_same_dtype(r, name, x, "x");
  return r;
}

// A history [N, W - 1, C]: contiguous, x's dtype and device.
const ak_tensor& check_history(const ak_tensor* t, const char* name, const ak_tensor& x, int64_t N, int64_t W) {
  const ak_tensor& h = check_contiguous(t, name);
  check_same_dtype(h, name, x, "x");
  check_same_device(h, name, x, "x");
  check_shape(h, name, {N, W - 1, x.shape[2]});
  return h;
}

// Writes must not land on memory another element still reads.
void check_apart(const ak_tensor* out, const char* name, const ak_tensor* in, const char* in_name) {
  if (out == nullptr || in == nullptr || out->data == nullptr) return;
  require(out->data != in->data, std::string(name) + ": must not be the memory of " + in_name);
}

// The arguments both directions share: x, weight, the sequences, the initial history. The host
// copy of the offsets is kept alive in `offsets` (the CPU backend reads the tensor itself).
Problem check_problem(const ak_tensor* x_p, const ak_tensor* weight_p, const ak_tensor* initial_p,
                      const ak_tensor* cu_p, int32_t activation) {
  require(activation == AK_CONV_NONE || activation == AK_CONV_SILU,
          "activation: expected 0 (none) or 1 (silu), got " + str(activation));
  const ak_tensor& x = check_tensor(x_p, "x");
  require(x.rank == 3, "x: expected rank 3 [B, T, C], got " + shape_string(x));
  check_dtype(x, "x", {AK_FLOAT16, AK_BFLOAT16, AK_FLOAT32});
  ak::linear::check_row_layout(x, "x");
  const ak_tensor& w = check_contiguous(weight_p, "weight");
  require(w.rank == 2, "weight: expected rank 2 [C, W], got " + shape_string(w));
  require(w.dtype == AK_FLOAT32 || w.dtype == x.dtype,
          std::string("weight: expected dtype float32 or x's (") + dtype_name(x.dtype) + "), got " +
              dtype_name(w.dtype));
  check_same_device(w, "weight", x, "x");
  require(w.shape[0] == x.shape[2], "weight: expected " + str(x.shape[2]) + " rows (x's channels), got " +
                                        shape_string(w));
  require(w.shape[1] >= 1 && w.shape[1] <= kMaxWidth,
          "weight: the width W (its second dim) must be in 1.." + str(kMaxWidth) + ", got " + str(w.shape[1]));
  Problem p;
  p.seqs.B = x.shape[0];
  p.seqs.T = x.shape[1];
  p.seqs.N = x.shape[0];
  if (cu_p != nullptr) {
    const ak_tensor& cu = check_contiguous(cu_p, "cu_seqlens");
    check_dtype(cu, "cu_seqlens", {AK_INT32});
    require(cu.rank == 1 && cu.shape[0] >= 2,
            "cu_seqlens: expected shape [N + 1] with N >= 1, got " + shape_string(cu));
    check_same_device(cu, "cu_seqlens", x, "x");
    require(x.shape[0] == 1, "x: packed input (cu_seqlens given) needs batch size 1, got " + str(x.shape[0]));
    ak::linear::read_cu_seqlens(cu, x.shape[1]);
    p.seqs.offsets = static_cast<const int32_t*>(cu.data);
    p.seqs.N = cu.shape[0] - 1;
  }
  p.C = x.shape[2];
  p.W = w.shape[1];
  p.activation = activation;
  p.x = tokens(x);
  p.weight = floats(&w);
  if (initial_p != nullptr) p.initial = floats(&check_history(initial_p, "initial_state", x, p.seqs.N, p.W));
  p.device = x.device_index;
  return p;
}

#define AK_CONV_DISPATCH(x, call)    \
  if ((x)->device_type == AK_CPU) {  \
    cpu::call;                       \
  } else {                           \
    AK_CUDA_CALL(cuda::call);        \
  }

}  // namespace

extern "C" {

AK_API ak_status ak_causal_conv1d_fwd(const ak_tensor* x, const ak_tensor* weight, const ak_tensor* initial_state,
                                      const ak_tensor* cu_seqlens, int32_t activation, const ak_tensor* output,
                                      const ak_tensor* final_state) {
  AK_ENTRY("ak_causal_conv1d_fwd", {
    ForwardArgs a;
    a.p = check_problem(x, weight, initial_state, cu_seqlens, activation);
    a.output = tokens(check_like_x(output, "output", *x));
    check_apart(output, "output", x, "x");
    if (final_state != nullptr) {
      a.final_state = floats(&check_history(final_state, "final_state", *x, a.p.seqs.N, a.p.W));
      check_apart(final_state, "final_state", initial_state, "initial_state");
    }
    a.rows = x->shape[0] * x->shape[1];
    if (a.p.C == 0) return;
    AK_CONV_DISPATCH(x, forward(a));
  });
}

AK_API ak_status ak_causal_conv1d_bwd(const ak_tensor* x, const ak_tensor* weight, const ak_tensor* initial_state,
                                      const ak_tensor* cu_seqlens, const ak_tensor* d_output,
                                      const ak_tensor* d_final_state, int32_t activation, const ak_tensor* dx,
                                      const ak_tensor* dweight, const ak_tensor* d_initial_state) {
  AK_ENTRY("ak_causal_conv1d_bwd", {
    BackwardArgs a;
    a.p = check_problem(x, weight, initial_state, cu_seqlens, activation);
    a.d_output = tokens(check_like_x(d_output, "d_output", *x));
    if (d_final_state != nullptr) {
      a.d_final = floats(&check_history(d_final_state, "d_final_state", *x, a.p.seqs.N, a.p.W));
    }
    if (dx != nullptr) {
      a.dx = tokens(check_like_x(dx, "dx", *x));
      check_apart(dx, "dx", x, "x");
      check_apart(dx, "dx", d_output, "d_output");
    }
    if (dweight != nullptr) {
      const ak_tensor& dw = check_contiguous(dweight, "dweight");
      require(dw.dtype == AK_FLOAT32 || dw.dtype == weight->dtype,
              std::string("dweight: expected dtype float32 or weight's (") + dtype_name(weight->dtype) + "), got " +
                  dtype_name(dw.dtype));
      check_same_device(dw, "dweight", *x, "x");
      check_shape(dw, "dweight", {a.p.C, a.p.W});
      check_apart(dweight, "dweight", weight, "weight");
      a.dweight = floats(&dw);
    }
    if (d_initial_state != nullptr) {
      a.d_initial = floats(&check_history(d_initial_state, "d_initial_state", *x, a.p.seqs.N, a.p.W));
      check_apart(d_initial_state, "d_initial_state", d_final_state, "d_final_state");
    }
    a.rows = x->shape[0] * x->shape[1];
    if (a.p.C == 0) return;
    AK_CONV_DISPATCH(x, backward(a));
  });
}

}  // extern "C"
