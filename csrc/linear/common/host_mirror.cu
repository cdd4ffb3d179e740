#include "linear/common/host_mirror.h"

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

// `t` narrowed to the written part (the whole view when `w` says all).
ak_tensor narrowed(ak_tensor t, const Written& w) {
  if (w.axis < 0) return t;
  t.data = static_cast<char*>(t.data) + w.begin * t.strides[w.axis] * static_cast<int64_t>(dtype_size(t.dtype));
  t.shape[w.axis] = w.end - w.begin;
  return t;
}

// Copies the written part of an output's host buffer into the device view: a contiguous whole output
// in one copy; anything else (a part, or a strided view whose gaps must keep their bytes) through a
// device staging buffer of the same layout and a strided copy of just that part.
void copy_part_back(const ak_tensor& device, const std::vector<unsigned char>& bytes, const Written& w) {
  const int64_t span = span_bytes(device);
  if (w.axis < 0 && is_contiguous(device)) return ak::cuda::copy_from_host(device, bytes.data(), span);
  if (span_bytes(narrowed(device, w)) == 0) return;
  ak_tensor staged = device;
  staged.data = ak::cuda::alloc(device.device_index, span);
  try {
    ak::cuda::copy_from_host(staged, bytes.data(), span);
    ak::cuda::copy_strided(narrowed(device, w), narrowed(staged, w));
  } catch (...) {
    ak::cuda::free(device.device_index, staged.data);
    throw;
  }
  // The pool reuses the block in stream order, after the copy.
  ak::cuda::free(device.device_index, staged.data);
}

}  // namespace

const ak_tensor* HostMirror::add(const ak_tensor* t, Role role, Written written) {
  if (t == nullptr) return nullptr;
  ak::cuda::refuse_while_capturing(t->device_index, "the general path (the CPU backend on host copies)");
  Entry& e = entries_.emplace_back();
  e.device = t;
  e.host = *t;
  e.role = role;
  e.written = written;
  const int64_t bytes = span_bytes(*t);
  e.bytes.resize(static_cast<size_t>(bytes > 0 ? bytes : 1));  // zero-filled
  if (bytes > 0 && role != Role::kOutput) ak::cuda::copy_to_host(*t, e.bytes.data(), bytes);
  e.host.data = e.bytes.data();
  e.host.device_type = AK_CPU;
  e.host.device_index = 0;
  return &e.host;
}

void HostMirror::write_back() {
  for (const Entry& e : entries_) {
    if (e.role == Role::kInput || span_bytes(e.host) == 0) continue;
    if (e.role == Role::kInOut) {
      ak::cuda::copy_from_host(*e.device, e.bytes.data(), span_bytes(e.host));
    } else {
      copy_part_back(*e.device, e.bytes, e.written);
    }
  }
}

Written token_rows(bool varlen, const std::vector<int64_t>& seq_start) {
  if (!varlen || seq_start.empty()) return Written::all();
  return Written::along(1, seq_start.front(), seq_start.back());
}

}  // namespace ak::linear::cuda
