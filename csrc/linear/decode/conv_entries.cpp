// The C entry of the causal convolution over a paged history pool (pagedCausalConv1d for many tokens,
// causalConv1dDecode for one per sequence): every argument checked (the messages name it), then
// dispatched by device. An index past the pool or a live slot named twice is refused before anything is
// written (slots.h), on either device.
#include <algorithm>
#include <string>
#include <vector>

#include "core/common.h"
#include "linear/checks.h"
#include "linear/decode/conv_cpu.h"
#include "linear/decode/conv_problem.h"
#include "linear/decode/slots.h"
#if AK_WITH_CUDA
#include "linear/decode/conv_cuda.h"
#endif

using namespace ak;
using namespace ak::linear;

namespace {

// Inside a graph capture nothing can be read back: a CUDA call's offsets are checked on the device.
bool checked_on_device(const ak_tensor& x) {
#if AK_WITH_CUDA
  return x.device_type == AK_CUDA && ak::cuda::capturing(x.device_index);
#else
  (void)x;
  return false;
#endif
}

}  // namespace

extern "C" {

AK_API ak_status ak_paged_conv1d(const ak_tensor* x_, const ak_tensor* weight, const ak_tensor* state_cache,
                                 const ak_tensor* state_indices, const ak_tensor* has_initial_state,
                                 const ak_tensor* cu_seqlens, int32_t flags, const ak_tensor* output) {
  AK_ENTRY("ak_paged_conv1d", {
    PagedConv d;
    const ak_tensor& x = check_tensor(x_, "x");
    check_dtype(x, "x", {AK_FLOAT16, AK_BFLOAT16, AK_FLOAT32});
    require(x.rank == 2 || x.rank == 3, "x: expected [B, T, C] or, one token per sequence, [B, C]; got " +
                                            shape_string(x));
    check_row_layout(x, "x");
    check_device(x, "x");
    d.B = x.shape[0], d.T = x.rank == 3 ? x.shape[1] : 1, d.C = x.shape[x.rank - 1];
    constexpr int32_t known = AK_CONV_SILU | AK_CONV_TRUSTED_INDICES | AK_CONV_IMPL_FUSED | AK_CONV_IMPL_REFERENCE;
    require((flags & ~known) == 0, "flags: expected AK_CONV_NONE = 0 or AK_CONV_SILU = 1, optionally | " +
                                       std::string("AK_CONV_TRUSTED_INDICES = 4, AK_CONV_IMPL_FUSED = 8 or ") +
                                       "AK_CONV_IMPL_REFERENCE = 16, got " + std::to_string(flags));
    check_impl_flags(flags, AK_CONV_IMPL_FUSED, AK_CONV_IMPL_REFERENCE, "AK_CONV_IMPL_FUSED",
                     "AK_CONV_IMPL_REFERENCE");
    d.activation = flags & AK_CONV_SILU;
    d.trusted_indices = (flags & AK_CONV_TRUSTED_INDICES) != 0;
    d.reference = (flags & AK_CONV_IMPL_REFERENCE) != 0;
    const bool fused_only = (flags & AK_CONV_IMPL_FUSED) != 0;
    const ak_tensor& w = check_contiguous(weight, "weight");
    check_dtype(w, "weight", {AK_FLOAT32, x.dtype});
    require(w.rank == 2 && w.shape[0] == d.C && w.shape[1] >= 2,
            "weight: expected [C=" + std::to_string(d.C) + ", W] with W >= 2, got " + shape_string(w));
    check_same_device(w, "weight", x, "x");
    d.W = w.shape[1];
    const ak_tensor& st = check_tensor(state_cache, "state_cache");
    check_same_dtype(st, "state_cache", x, "x");
    require(st.rank == 3 && st.shape[1] == d.W - 1 && st.shape[2] == d.C,
            "state_cache: expected [num_slots, W - 1=" + std::to_string(d.W - 1) + ", C=" + std::to_string(d.C) +
                "], got " + shape_string(st));
    require(st.strides[2] == 1 && st.strides[1] == d.C && st.strides[0] >= (d.W - 1) * d.C,
            "state_cache: expected every slot's [W - 1, C] dense (slots may be apart)");
    check_same_device(st, "state_cache", x, "x");
    d.slots = st.shape[0];
    std::vector<int32_t> offsets;
    d.N = d.B;
    if (cu_seqlens) {
      require(x.rank == 3 && d.B == 1, "cu_seqlens: packed sequences need x as [1, T, C], got " + shape_string(x));
      const ak_tensor& cu = check_tensor(cu_seqlens, "cu_seqlens");
      check_dtype(cu, "cu_seqlens", {AK_INT32});
      require(cu.rank == 1 && cu.shape[0] >= 2,
              "cu_seqlens: expected [N + 1] with N >= 1 sequences, got shape " + shape_string(cu));
      require(is_contiguous(cu), "cu_seqlens: expected a contiguous tensor");
      check_same_device(cu, "cu_seqlens", x, "x");
      d.N = cu.shape[0] - 1;
      if (!checked_on_device(x)) {
        for (int64_t o : read_cu_seqlens(cu, d.T)) offsets.push_back(static_cast<int32_t>(o));
        d.offsets = offsets.data();
      }
    }
    if (state_indices) {
      check_per_sequence(state_indices, "state_indices", AK_INT32, d.N, x, "x");
    } else {
      require(x.rank == 2, "state_indices: required for the multi-token form (one slot per sequence)");
      require(d.N <= d.slots, "state_cache: " + std::to_string(d.N) + " sequences without state_indices need as " +
                                  "many slots, the pool has " + std::to_string(d.slots));
    }
    if (has_initial_state) check_per_sequence(has_initial_state, "has_initial_state", AK_BOOL, d.N, x, "x");
    const ak_tensor& out = check_tensor(output, "output");
    check_same_dtype(out, "output", x, "x");
    require(out.rank == x.rank && std::equal(out.shape, out.shape + out.rank, x.shape),
            "output: expected the shape of x " + shape_string(x) + ", got " + shape_string(out));
    check_row_layout(out, "output");
    check_same_device(out, "output", x, "x");
    d.x = x_, d.weight = weight, d.state = state_cache, d.indices = state_indices;
    d.has_initial = has_initial_state, d.output = output, d.cu_seqlens = cu_seqlens;
    if (fused_only) {
      if (x.device_type == AK_CPU) refuse_fused_on_cpu();
      if (d.W > kMaxFusedConvWidth) {
        fail(AK_ERR_UNSUPPORTED, "impl 'fused': the fused kernel serves W up to " +
                                     std::to_string(kMaxFusedConvWidth) + ", got W = " + std::to_string(d.W));
      }
    }
    if (d.N == 0 || d.C == 0) return;
    if (x.device_type == AK_CPU) {
      require_slots_in_pool(state_indices, d.N, d.slots);
      ak::linear::cpu::paged_conv(d);
    } else {
      AK_CUDA_CALL(ak::linear::cuda::paged_conv(d));
    }
  });
}

}  // extern "C"
