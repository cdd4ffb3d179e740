// Zeroing the output rows of padding sequences (index <= 0) after the paged chunked prefill, where the
// output lives: the indices and offsets are read there too, so a CUDA call never waits on the host.
#include <cstring>
#include <string>

#include "core/common.h"
#include "linear/decode/pool_problem.h"
#include "linear/decode/slots.h"
#if AK_WITH_CUDA
#include "linear/decode/pool_cuda.h"
#endif

using namespace ak;
using namespace ak::linear;

namespace {

PaddingRows parse(const ak_tensor* output, const ak_tensor* indices, const ak_tensor* cu_seqlens) {
  PaddingRows p;
  const ak_tensor& out = check_contiguous(output, "output");
  require(out.rank >= 2, "output: expected [B, T, ...], got " + shape_string(out));
  p.B = out.shape[0], p.T = out.shape[1], p.N = p.B;
  p.row_bytes = static_cast<int64_t>(dtype_size(out.dtype));
  for (int d = 2; d < out.rank; ++d) p.row_bytes *= out.shape[d];
  if (cu_seqlens) {
    const ak_tensor& cu = check_contiguous(cu_seqlens, "cu_seqlens");
    check_dtype(cu, "cu_seqlens", {AK_INT32, AK_INT64});
    require(cu.rank == 1 && cu.shape[0] >= 1, "cu_seqlens: expected [N + 1], got shape " + shape_string(cu));
    require(p.B == 1, "cu_seqlens: packed sequences need output as [1, T, ...], got " + shape_string(out));
    check_same_device(cu, "cu_seqlens", out, "output");
    p.N = cu.shape[0] - 1, p.cu_seqlens = &cu;
  }
  p.indices = &check_per_sequence(indices, "state_indices", AK_INT32, p.N, out, "output");
  p.output = &out;
  return p;
}

}  // namespace

void ak::linear::cpu::zero_padding_rows(const PaddingRows& p) {
  const auto* slots = static_cast<const int32_t*>(p.indices->data);
  auto* out = static_cast<unsigned char*>(p.output->data);
  for (int64_t n = 0; n < p.N; ++n) {
    if (slots[n] > 0) continue;
    int64_t begin = n * p.T, end = begin + p.T;
    if (p.cu_seqlens) {
      const bool wide = p.cu_seqlens->dtype == AK_INT64;
      const auto at = [&](int64_t i) -> int64_t {
        return wide ? static_cast<const int64_t*>(p.cu_seqlens->data)[i]
                    : static_cast<const int32_t*>(p.cu_seqlens->data)[i];
      };
      begin = at(n), end = at(n + 1);
      clamp_rows(p.T, begin, end);
    }
    std::memset(out + begin * p.row_bytes, 0, static_cast<size_t>((end - begin) * p.row_bytes));
  }
}

extern "C" {

AK_API ak_status ak_zero_padding_rows(const ak_tensor* output, const ak_tensor* state_indices,
                                      const ak_tensor* cu_seqlens) {
  AK_ENTRY("ak_zero_padding_rows", {
    const PaddingRows p = parse(output, state_indices, cu_seqlens);
    if (p.N == 0 || numel(*p.output) == 0) return;
    if (p.output->device_type == AK_CPU) {
      ak::linear::cpu::zero_padding_rows(p);
    } else {
      AK_CUDA_CALL(ak::linear::cuda::zero_padding_rows(p));
    }
  });
}

}  // extern "C"
