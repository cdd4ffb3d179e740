// Argument checks shared by the linear-attention entries (checks.h).
#include "linear/checks.h"

#include <cmath>
#include <cstring>
#include <string>

#if AK_WITH_CUDA
#include "cuda/backend.h"
#endif

namespace ak::linear {
namespace {

std::string str(const char* s) { return std::string(s); }

}  // namespace

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

const ak_tensor& check_rows(const ak_tensor* t, const char* name, const std::vector<int64_t>& shape,
                            const ak_tensor& ref, const char* ref_name) {
  const ak_tensor& r = check_tensor(t, name);
  check_shape(r, name, shape);
  check_row_layout(r, name);
  check_same_device(r, name, ref, ref_name);
  return r;
}

const ak_tensor& check_rows_like_q(const ak_tensor* t, const char* name, const std::vector<int64_t>& shape,
                                   const ak_tensor& q) {
  const ak_tensor& r = check_rows(t, name, shape, q, "q");
  check_same_dtype(r, name, q, "q");
  return r;
}

const ak_tensor& check_state(const ak_tensor* t, const char* name, std::initializer_list<int64_t> shape,
                             const ak_tensor& ref, const char* ref_name) {
  const ak_tensor& r = check_tensor(t, name);
  check_dtype(r, name, {AK_FLOAT32});
  check_shape(r, name, shape);
  require(is_contiguous(r), str(name) + ": expected a contiguous tensor");
  check_same_device(r, name, ref, ref_name);
  return r;
}

void check_scale(double scale) {
  require(std::isfinite(scale), "scale: expected a finite number, got " + std::to_string(scale));
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

void check_impl_flags(int32_t flags, int32_t fused_bit, int32_t reference_bit, const char* fused_name,
                      const char* reference_name) {
  require((flags & fused_bit) == 0 || (flags & reference_bit) == 0,
          str("flags: ") + fused_name + " and " + reference_name + " together");
}

Impl impl_from_flags(int32_t flags, int32_t fused_bit, int32_t reference_bit, const char* fused_name,
                     const char* reference_name) {
  check_impl_flags(flags, fused_bit, reference_bit, fused_name, reference_name);
  return (flags & fused_bit) ? Impl::fused : (flags & reference_bit) ? Impl::reference : Impl::any;
}

Impl impl_for_device(int32_t flags, int32_t fused_bit, int32_t reference_bit, const char* fused_name,
                     const char* reference_name, int32_t device_type) {
  const Impl impl = impl_from_flags(flags, fused_bit, reference_bit, fused_name, reference_name);
  if (impl == Impl::fused && device_type == AK_CPU) refuse_fused_on_cpu();
  return impl;
}

void refuse_fused_on_cpu() {
  fail(AK_ERR_UNSUPPORTED, "impl 'fused': the CPU has no fused kernel (its backend is the reference)");
}

std::vector<int64_t> read_cu_seqlens(const ak_tensor& cu, int64_t T) {
  const int64_t count = cu.shape[0];
  std::vector<int32_t> host(static_cast<size_t>(count));
  const int64_t bytes = count * static_cast<int64_t>(sizeof(int32_t));
  if (cu.device_type == AK_CPU) {
    std::memcpy(host.data(), cu.data, static_cast<size_t>(bytes));
  } else {
#if AK_WITH_CUDA
    if (ak::cuda::capturing(cu.device_index)) {
      fail(AK_ERR_UNSUPPORTED, "cu_seqlens: this op plans its work from the offsets on the host, so a packed call "
                               "cannot be captured in a graph yet (a dense [B, T] batch can)");
    }
#endif
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

void parse_sequences(DeltaProblem& p, const ak_tensor* cu_seqlens, const ak_tensor& q) {
  if (!cu_seqlens) {
    p.N = p.B;
    return;
  }
  const ak_tensor& cu = check_tensor(cu_seqlens, "cu_seqlens");
  check_dtype(cu, "cu_seqlens", {AK_INT32});
  require(cu.rank == 1, "cu_seqlens: expected rank 1 [N + 1], got shape " + shape_string(cu));
  require(cu.shape[0] >= 2, "cu_seqlens: expected at least 2 offsets ([N + 1] for N >= 1 sequences), got " +
                                std::to_string(cu.shape[0]));
  require(is_contiguous(cu), "cu_seqlens: expected a contiguous tensor");
  check_same_device(cu, "cu_seqlens", q, "q");
  require(p.B == 1, "q: packed input (cu_seqlens given) needs batch size 1, got " + std::to_string(p.B));
  p.varlen = true;
  p.cu_seqlens = cu_seqlens;
  p.N = cu.shape[0] - 1;
#if AK_WITH_CUDA
  // Nothing is read back inside a capture: the backend checks the offsets on the device.
  if (cu.device_type == AK_CUDA && ak::cuda::capturing(cu.device_index)) {
    p.offsets_on_device = true;
    return;
  }
#endif
  p.seq_start = read_cu_seqlens(cu, p.T);
}

std::vector<int64_t> token_dims(const DeltaProblem& p, bool tokens, std::initializer_list<int64_t> tail) {
  std::vector<int64_t> d{p.B};
  if (tokens) d.push_back(p.T);
  d.insert(d.end(), tail);
  return d;
}

const ak_tensor& check_qkv(DeltaProblem& p, bool tokens, const ak_tensor* q_, const ak_tensor* k_,
                           const ak_tensor* v_) {
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

  const ak_tensor& k = check_rows(k_, "k", token_dims(p, tokens, {p.HK, p.K}), q, "q");
  check_same_dtype(k, "k", q, "q");
  const ak_tensor& v = check_tensor(v_, "v");
  expected_rank("v", "H, V", v);
  check_rows(v_, "v", token_dims(p, tokens, {-1, -1}), q, "q");
  check_same_dtype(v, "v", q, "q");
  p.H = v.shape[rank - 2];
  p.V = v.shape[rank - 1];
  check_heads(p.HK, p.H, "q", "v");
  check_head_dims(p.K, p.V, "q", "v");
  return q;
}

void check_in_place_or_apart(const ak_tensor& state, const ak_tensor& new_state) {
  const int64_t bytes = numel(state) * static_cast<int64_t>(dtype_size(state.dtype));
  const char* s0 = static_cast<const char*>(state.data);
  const char* n0 = static_cast<const char*>(new_state.data);
  require(bytes == 0 || s0 == n0 || n0 + bytes <= s0 || s0 + bytes <= n0,
          "new_state: must be the same memory as state (in place) or not overlap it");
}

}  // namespace ak::linear
