#include "linear/gla/cuda/host_mirror.h"

#include "cuda/backend.h"

namespace ak::linear::cuda {

namespace {

// Bytes from the first element to one past the last of a strided view (0 when it has no element).
int64_t span_bytes(const ak_tensor& t) {
  int64_t last = 0;
  for (int i = 0; i < t.rank; ++i) {
    if (t.shape[i] == 0) return 0;
    last += (t.shape[i] - 1) * t.strides[i];
  }
  return (last + 1) * static_cast<int64_t>(dtype_size(t.dtype));
}

}  // namespace

const ak_tensor* HostMirror::add(const ak_tensor* t, bool output, bool whole) {
  if (t == nullptr) return nullptr;
  Entry& e = entries_.emplace_back();
  e.device = t;
  e.host = *t;
  e.output = output;
  const int64_t bytes = span_bytes(*t);
  e.bytes.resize(static_cast<size_t>(bytes > 0 ? bytes : 1));
  // A strided output keeps its gaps through the copy in: only a contiguous one may skip it.
  const bool skip = output && whole && is_contiguous(*t);
  if (bytes > 0 && !skip) ak::cuda::copy_to_host(*t, e.bytes.data(), bytes);
  e.host.data = e.bytes.data();
  e.host.device_type = AK_CPU;
  e.host.device_index = 0;
  return &e.host;
}

void HostMirror::write_back() {
  for (const Entry& e : entries_) {
    const int64_t bytes = span_bytes(e.host);
    if (e.output && bytes > 0) ak::cuda::copy_from_host(*e.device, e.bytes.data(), bytes);
  }
}

}  // namespace ak::linear::cuda
