// The replay plan of a paged chunked call with a replay state, made where the tensors live: which cached
// and new tokens form runs A and B, where each output row comes from, which tokens each slot keeps and its
// new count (replay_problem.h). A CUDA call reads nothing back unless it checks its arguments, so the whole
// replayed call can be captured in a graph; inside a capture the indices and offsets are checked on the
// device. The CPU backend walks the same per-sequence arithmetic.
#include <algorithm>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "core/common.h"
#include "linear/checks.h"
#include "linear/decode/replay_problem.h"
#include "linear/decode/slots.h"
#if AK_WITH_CUDA
#include "cuda/backend.h"
#include "linear/decode/replay_cuda.h"
#endif

using namespace ak;
using namespace ak::linear;

namespace {

constexpr int32_t kTrusted = 1;  // AK_REPLAY_TRUSTED

int64_t row_bytes_of(const ak_tensor& t) {
  int64_t bytes = static_cast<int64_t>(dtype_size(t.dtype));
  for (int d = 1; d < t.rank; ++d) bytes *= t.shape[d];
  return bytes;
}

// Reads an int32 / bool tensor to the host where it is not there already.
template <class E>
std::vector<E> host_copy(const ak_tensor* t, int64_t n) {
  std::vector<E> h(static_cast<size_t>(n));
  if (t == nullptr || n == 0) return h;
  if (t->device_type == AK_CPU) {
    std::memcpy(h.data(), t->data, static_cast<size_t>(n) * sizeof(E));
  } else {
    AK_CUDA_CALL(ak::cuda::copy_to_host(*t, h.data(), n * static_cast<int64_t>(sizeof(E))));
  }
  return h;
}

// The checks an eager call makes before anything is written: the pool's rule for the indices, the offsets
// (0 first, nondecreasing, within the B T rows) and every resumed live slot's count in 0..63.
void require_valid(const ReplayPlan& p, const ak_tensor& counts, const ak_tensor* has_initial) {
  const auto idx = host_copy<int32_t>(p.indices, p.in.N);
  require_slots_in_pool(idx.data(), p.in.N, p.in.slots);
  if (p.cu_seqlens != nullptr) read_cu_seqlens(*p.cu_seqlens, p.in.R);
  const auto held = host_copy<int32_t>(&counts, p.in.slots);
  const auto resume = host_copy<uint8_t>(has_initial, has_initial ? p.in.N : 0);
  for (int64_t n = 0; n < p.in.N; ++n) {
    const int32_t slot = idx[n];
    if (slot <= 0 || (has_initial != nullptr && resume[n] == 0)) continue;
    require(held[slot] >= 0 && held[slot] < kReplayChunk,
            "counts: slot " + std::to_string(slot) + " holds " + std::to_string(held[slot]) + " tokens, expected 0.." +
                std::to_string(kReplayChunk - 1));
  }
}

ReplayPlan parse_plan(const ak_tensor* indices_, const ak_tensor* has_initial_, const ak_tensor* counts_,
                      const ak_tensor* cu_, int64_t B, int64_t T, const ak_tensor* cu_a_, const ak_tensor* cu_b_,
                      const ak_tensor* plan_, int32_t flags) {
  require((flags & ~kTrusted) == 0, "flags: expected 0 or AK_REPLAY_TRUSTED = 1, got " + std::to_string(flags));
  require(B >= 0 && T >= 0 && B * T < (int64_t{1} << 30),
          "B, T: expected B T below 2^30 rows, got " + std::to_string(B) + " x " + std::to_string(T));
  ReplayPlan p;
  p.trusted = (flags & kTrusted) != 0;
  const ak_tensor& counts = check_contiguous(counts_, "counts");
  check_dtype(counts, "counts", {AK_INT32});
  require(counts.rank == 1 && counts.shape[0] >= 1, "counts: expected [num_slots], got " + shape_string(counts));
  require(counts.shape[0] < (int64_t{1} << 31) / kReplayChunk,
          "counts: at most 2^25 slots (each cached row is named by an int32)");
  const ak_tensor& idx = check_contiguous(indices_, "state_indices");
  require(idx.rank == 1, "state_indices: expected [N], got " + shape_string(idx));
  const int64_t N = idx.shape[0];
  p.indices = &check_per_sequence(indices_, "state_indices", AK_INT32, N, counts, "counts");
  const ak_tensor* has_initial =
      has_initial_ ? &check_per_sequence(has_initial_, "has_initial_state", AK_BOOL, N, counts, "counts") : nullptr;
  if (cu_ != nullptr) {
    const ak_tensor& cu = check_contiguous(cu_, "cu_seqlens");
    check_dtype(cu, "cu_seqlens", {AK_INT32});
    check_shape(cu, "cu_seqlens", {N + 1});
    check_same_device(cu, "cu_seqlens", counts, "counts");
    require(B == 1, "cu_seqlens: packed sequences need B = 1, got " + std::to_string(B));
    p.cu_seqlens = &cu;
  } else {
    require(N == B, "state_indices: expected one entry per batch row (" + std::to_string(B) + "), got " +
                        std::to_string(N));
  }
  p.layout.N = N, p.layout.R = B * T;
  // Every code is an int32 row number of a list no longer than the plan.
  require(N < (int64_t{1} << 24) && p.layout.size() < (int64_t{1} << 31) - 1,
          "state_indices: " + std::to_string(N) + " sequences over " + std::to_string(B * T) +
              " rows need a plan past 2^31 entries");
  const ak_tensor& plan = check_contiguous(plan_, "plan");
  check_dtype(plan, "plan", {AK_INT32});
  check_shape(plan, "plan", {p.layout.size()});
  check_same_device(plan, "plan", counts, "counts");
  p.plan = &plan;
  for (auto [t, name, out] : {std::tuple{cu_a_, "cu_a", &p.cu_a}, std::tuple{cu_b_, "cu_b", &p.cu_b}}) {
    const ak_tensor& c = check_contiguous(t, name);
    check_dtype(c, name, {AK_INT32});
    check_shape(c, name, {N + 1});
    check_same_device(c, name, counts, "counts");
    *out = &c;
  }
  p.in.indices = static_cast<const int32_t*>(p.indices->data);
  p.in.has_initial = has_initial ? static_cast<const uint8_t*>(has_initial->data) : nullptr;
  p.in.counts = static_cast<const int32_t*>(counts.data);
  p.in.cu = p.cu_seqlens ? static_cast<const int32_t*>(p.cu_seqlens->data) : nullptr;
  p.in.N = N, p.in.T = T, p.in.R = B * T, p.in.slots = counts.shape[0];
  // Inside a capture nothing is read back: the CUDA backend checks the indices and offsets on the device.
  bool capturing = false;
#if AK_WITH_CUDA
  capturing = counts.device_type == AK_CUDA && ak::cuda::capturing(counts.device_index);
#endif
  // The CPU always checks (it reads in place).
  if (counts.device_type == AK_CPU || (!p.trusted && !capturing)) require_valid(p, counts, has_initial);
  return p;
}

void cpu_plan(const ReplayPlan& p) {
  const ReplayLayout& L = p.layout;
  auto* plan = static_cast<int32_t*>(p.plan->data);
  auto* cu_a = static_cast<int32_t*>(p.cu_a->data);
  auto* cu_b = static_cast<int32_t*>(p.cu_b->data);
  std::fill(plan, plan + L.count(), 0);
  std::fill(plan + L.count(), plan + L.size(), -1);
  int64_t a = 0, b = 0;
  for (int64_t n = 0; n <= L.N; ++n) {
    cu_a[n] = static_cast<int32_t>(std::min(a, L.cap_a()));
    cu_b[n] = static_cast<int32_t>(std::min(b, L.cap_b()));
    if (n == L.N) break;
    const ReplaySequence s = replay_sequence(p.in, n);
    if (s.slot < 0) continue;
    a += s.full, b += s.total - s.full;
  }
  for (int64_t n = 0; n < L.N; ++n) {
    const ReplaySequence s = replay_sequence(p.in, n);
    if (s.slot < 0) continue;
    for (int64_t j = 0; j < s.total; ++j) replay_fill(s, n, j, cu_a[n], cu_a[n + 1], cu_b[n], L, plan);
    plan[L.count() + n] = static_cast<int32_t>(s.total - s.full);
  }
}

ReplayRows parse_rows(const ak_tensor* first_, const ak_tensor* second_, const ak_tensor* codes_,
                      const ak_tensor* out_) {
  ReplayRows r;
  const ak_tensor& out = check_contiguous(out_, "out");
  require(out.rank >= 1, "out: expected [M, ...], got " + shape_string(out));
  const ak_tensor& codes = check_contiguous(codes_, "codes");
  check_dtype(codes, "codes", {AK_INT32});
  check_shape(codes, "codes", {out.shape[0]});
  check_same_device(codes, "codes", out, "out");
  for (auto [t, name] : {std::pair{first_, "first"}, std::pair{second_, "second"}}) {
    const ak_tensor& s = check_contiguous(t, name);
    check_same_dtype(s, name, out, "out");
    check_same_device(s, name, out, "out");
    require(s.rank == out.rank && std::equal(s.shape + 1, s.shape + s.rank, out.shape + 1),
            std::string(name) + ": expected rows of out's shape, got " + shape_string(s) + " for out " +
                shape_string(out));
  }
  r.first = first_, r.second = second_, r.codes = &codes, r.out = &out;
  r.rows1 = first_->shape[0], r.rows2 = second_->shape[0], r.M = out.shape[0], r.row_bytes = row_bytes_of(out);
  return r;
}

void cpu_rows(const ReplayRows& r) {
  const auto* codes = static_cast<const int32_t*>(r.codes->data);
  const auto* first = static_cast<const unsigned char*>(r.first->data);
  const auto* second = static_cast<const unsigned char*>(r.second->data);
  auto* out = static_cast<unsigned char*>(r.out->data);
  const auto bytes = static_cast<size_t>(r.row_bytes);
  for (int64_t m = 0; m < r.M; ++m) {
    const int64_t c = codes[m];
    const unsigned char* src = c > 0 && c - 1 < r.rows1    ? first + (c - 1) * r.row_bytes
                               : c < 0 && -c - 1 < r.rows2 ? second + (-c - 1) * r.row_bytes
                                                           : nullptr;
    if (src != nullptr) {
      std::memcpy(out + m * r.row_bytes, src, bytes);
    } else {
      std::memset(out + m * r.row_bytes, 0, bytes);
    }
  }
}

ReplayKeep parse_keep(const ak_tensor* run_, const ak_tensor* cache_, const ak_tensor* counts_,
                      const ak_tensor* plan_, const ak_tensor* indices_) {
  ReplayKeep k;
  const ak_tensor& idx = check_contiguous(indices_, "state_indices");
  require(idx.rank == 1, "state_indices: expected [N], got " + shape_string(idx));
  check_dtype(idx, "state_indices", {AK_INT32});
  k.layout.N = idx.shape[0];
  const ak_tensor& plan = check_contiguous(plan_, "plan");
  check_dtype(plan, "plan", {AK_INT32});
  check_same_device(plan, "plan", idx, "state_indices");
  require(plan.rank == 1 && plan.shape[0] >= k.layout.size(), "plan: expected the plan of " +
                                                                  std::to_string(k.layout.N) +
                                                                  " sequences, got " + shape_string(plan));
  // The plan's size gives R back: size = 2 R + 191 N.
  k.layout.R = (plan.shape[0] - k.layout.size()) / 2;
  require(k.layout.size() == plan.shape[0], "plan: its size " + std::to_string(plan.shape[0]) +
                                                " is no plan's for " + std::to_string(k.layout.N) + " sequences");
  k.plan = &plan, k.indices = &idx;
  if (counts_ != nullptr) {
    const ak_tensor& counts = check_contiguous(counts_, "counts");
    check_dtype(counts, "counts", {AK_INT32});
    require(counts.rank == 1, "counts: expected [num_slots], got " + shape_string(counts));
    check_same_device(counts, "counts", idx, "state_indices");
    k.counts = &counts, k.slots = counts.shape[0];
    return k;
  }
  const ak_tensor& cache = check_contiguous(cache_, "cache");
  const ak_tensor& run = check_contiguous(run_, "run");
  check_same_device(cache, "cache", idx, "state_indices");
  check_same_device(run, "run", idx, "state_indices");
  check_same_dtype(run, "run", cache, "cache");
  require(cache.rank >= 2 && cache.shape[1] == kReplayChunk && run.rank == cache.rank - 1 &&
              std::equal(run.shape + 1, run.shape + run.rank, cache.shape + 2),
          "cache: expected [num_slots, 64, ...] over run's rows " + shape_string(run) + ", got " +
              shape_string(cache));
  k.run = &run, k.cache = &cache;
  k.slots = cache.shape[0], k.run_rows = run.shape[0], k.row_bytes = row_bytes_of(run);
  return k;
}

void cpu_keep(const ReplayKeep& k) {
  const auto* plan = static_cast<const int32_t*>(k.plan->data);
  const auto* idx = static_cast<const int32_t*>(k.indices->data);
  for (int64_t n = 0; n < k.layout.N; ++n) {
    const int64_t slot = idx[n];
    if (slot <= 0 || slot >= k.slots) continue;
    if (k.counts != nullptr) {
      const int32_t c = plan[k.layout.count() + n];
      if (c >= 0) static_cast<int32_t*>(k.counts->data)[slot] = c;
      continue;
    }
    for (int64_t r = 0; r < kReplayChunk; ++r) {
      const int64_t c = plan[k.layout.keep() + n * kReplayChunk + r];
      if (c <= 0 || c > k.run_rows) continue;
      std::memcpy(static_cast<unsigned char*>(k.cache->data) + (slot * kReplayChunk + r) * k.row_bytes,
                  static_cast<const unsigned char*>(k.run->data) + (c - 1) * k.row_bytes,
                  static_cast<size_t>(k.row_bytes));
    }
  }
}

}  // namespace

extern "C" {

AK_API ak_status ak_replay_plan(const ak_tensor* state_indices, const ak_tensor* has_initial_state,
                                const ak_tensor* counts, const ak_tensor* cu_seqlens, int64_t B, int64_t T,
                                const ak_tensor* cu_a, const ak_tensor* cu_b, const ak_tensor* plan,
                                int32_t flags) {
  AK_ENTRY("ak_replay_plan", {
    const ReplayPlan p =
        parse_plan(state_indices, has_initial_state, counts, cu_seqlens, B, T, cu_a, cu_b, plan, flags);
    if (p.plan->device_type == AK_CPU) return cpu_plan(p);
    AK_CUDA_CALL(ak::linear::cuda::replay_plan(p));
  });
}

AK_API ak_status ak_replay_rows(const ak_tensor* first, const ak_tensor* second, const ak_tensor* codes,
                                const ak_tensor* out) {
  AK_ENTRY("ak_replay_rows", {
    const ReplayRows r = parse_rows(first, second, codes, out);
    if (r.M == 0 || r.row_bytes == 0) return;
    if (r.out->device_type == AK_CPU) return cpu_rows(r);
    AK_CUDA_CALL(ak::linear::cuda::replay_rows(r));
  });
}

AK_API ak_status ak_replay_keep(const ak_tensor* run, const ak_tensor* cache, const ak_tensor* plan,
                                const ak_tensor* state_indices) {
  AK_ENTRY("ak_replay_keep", {
    const ReplayKeep k = parse_keep(run, cache, nullptr, plan, state_indices);
    if (k.layout.N == 0 || k.row_bytes == 0) return;
    if (k.cache->device_type == AK_CPU) return cpu_keep(k);
    AK_CUDA_CALL(ak::linear::cuda::replay_keep(k));
  });
}

AK_API ak_status ak_replay_commit(const ak_tensor* counts, const ak_tensor* plan, const ak_tensor* state_indices) {
  AK_ENTRY("ak_replay_commit", {
    const ReplayKeep k = parse_keep(nullptr, nullptr, counts, plan, state_indices);
    if (k.layout.N == 0) return;
    if (k.counts->device_type == AK_CPU) return cpu_keep(k);
    AK_CUDA_CALL(ak::linear::cuda::replay_keep(k));
  });
}

}  // extern "C"
