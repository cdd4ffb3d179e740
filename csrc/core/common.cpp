#include "core/common.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#if AK_WITH_CUDA
#include "cuda/backend.h"
#endif

namespace ak {

namespace {
thread_local std::string last_error;
}

void fail(ak_status status, const std::string& message) { throw Error(status, message); }

ak_status set_error(ak_status status, const std::string& message) {
  last_error = message;
  return status;
}

const char* current_error() { return last_error.c_str(); }

void fail_no_cuda() {
  fail(AK_ERR_UNSUPPORTED, "this attnkit library was built without CUDA (nvcc was not found at build time)");
}

size_t dtype_size(int32_t dtype) {
  switch (dtype) {
    case AK_FLOAT32: return 4;
    case AK_FLOAT64: return 8;
    case AK_FLOAT16: return 2;
    case AK_BFLOAT16: return 2;
    case AK_INT32: return 4;
    case AK_INT64: return 8;
    case AK_BOOL: return 1;
    case AK_FLOAT8_E4M3: return 1;
    default: return 0;
  }
}

const char* dtype_name(int32_t dtype) {
  switch (dtype) {
    case AK_FLOAT32: return "float32";
    case AK_FLOAT64: return "float64";
    case AK_FLOAT16: return "float16";
    case AK_BFLOAT16: return "bfloat16";
    case AK_INT32: return "int32";
    case AK_INT64: return "int64";
    case AK_BOOL: return "bool";
    case AK_FLOAT8_E4M3: return "float8_e4m3";
    default: return "unknown";
  }
}

bool is_float_dtype(int32_t dtype) {
  return dtype == AK_FLOAT32 || dtype == AK_FLOAT64 || dtype == AK_FLOAT16 || dtype == AK_BFLOAT16;
}

int64_t numel(const ak_tensor& t) {
  int64_t n = 1;
  for (int i = 0; i < t.rank; ++i) {
    if (t.shape[i] == 0) return 0;
  }
  for (int i = 0; i < t.rank; ++i) {
    // The largest count a descriptor may describe: its bytes must fit int64 (check_tensor refuses more).
    if (t.shape[i] < 0 || n > kMaxElements / t.shape[i]) return -1;
    n *= t.shape[i];
  }
  return n;
}

bool is_contiguous(const ak_tensor& t) {
  int64_t expected = 1;
  for (int i = t.rank - 1; i >= 0; --i) {
    if (t.shape[i] != 1 && t.strides[i] != expected) return false;
    expected *= t.shape[i];
  }
  return true;
}

void set_contiguous_strides(ak_tensor& t) {
  int64_t stride = 1;
  for (int i = t.rank - 1; i >= 0; --i) {
    t.strides[i] = stride;
    stride *= t.shape[i];
  }
}

std::string shape_string(const ak_tensor& t) {
  std::ostringstream s;
  s << "[";
  for (int i = 0; i < t.rank; ++i) s << (i ? ", " : "") << t.shape[i];
  s << "]";
  return s.str();
}

std::string device_string(int32_t device_type, int32_t device_index) {
  if (device_type == AK_CPU) return "cpu";
  if (device_type == AK_CUDA) return "cuda:" + std::to_string(device_index);
  return "unknown device " + std::to_string(device_type);
}

const ak_tensor& check_tensor(const ak_tensor* t, const char* name) {
  require(t != nullptr, std::string(name) + ": expected a tensor, got none");
  require(t->rank >= 0 && t->rank <= AK_MAX_RANK,
          std::string(name) + ": rank " + std::to_string(t->rank) + " is out of range 0.." +
              std::to_string(AK_MAX_RANK));
  require(dtype_size(t->dtype) != 0, std::string(name) + ": unknown dtype code " + std::to_string(t->dtype));
  require(t->device_type == AK_CPU || t->device_type == AK_CUDA,
          std::string(name) + ": unknown device type " + std::to_string(t->device_type));
  for (int i = 0; i < t->rank; ++i) {
    require(t->shape[i] >= 0, std::string(name) + ": negative size in shape " + shape_string(*t));
  }
  require(numel(*t) >= 0, std::string(name) + ": shape " + shape_string(*t) + " holds more than 2^60 elements");
  require(numel(*t) == 0 || t->data != nullptr, std::string(name) + ": has no data (was it disposed?)");
  check_device(*t, name);
  return *t;
}

const ak_tensor& check_contiguous(const ak_tensor* t, const char* name) {
  const ak_tensor& r = check_tensor(t, name);
  require(is_contiguous(r), std::string(name) + ": expected a contiguous tensor");
  return r;
}

void check_dtype(const ak_tensor& t, const char* name, std::initializer_list<int32_t> allowed) {
  for (int32_t d : allowed) {
    if (t.dtype == d) return;
  }
  std::string list;
  for (int32_t d : allowed) list += (list.empty() ? "" : " | ") + std::string(dtype_name(d));
  fail(AK_ERR_INVALID_ARGUMENT, std::string(name) + ": expected dtype " + list + ", got " + dtype_name(t.dtype));
}

void check_same_dtype(const ak_tensor& t, const char* name, const ak_tensor& ref, const char* ref_name) {
  require(t.dtype == ref.dtype, std::string(name) + ": expected dtype " + dtype_name(ref.dtype) + " (same as " +
                                    ref_name + "), got " + dtype_name(t.dtype));
}

std::string json_quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

void check_shape(const ak_tensor& t, const char* name, const std::vector<int64_t>& expected) {
  bool ok = static_cast<size_t>(t.rank) == expected.size();
  int i = 0;
  for (int64_t e : expected) {
    if (ok && e >= 0 && t.shape[i] != e) ok = false;
    ++i;
  }
  if (ok) return;
  std::ostringstream s;
  s << name << ": expected shape [";
  i = 0;
  for (int64_t e : expected) {
    s << (i++ ? ", " : "");
    if (e < 0) s << "*"; else s << e;
  }
  s << "], got " << shape_string(t);
  fail(AK_ERR_INVALID_ARGUMENT, s.str());
}

void check_same_device(const ak_tensor& t, const char* name, const ak_tensor& ref, const char* ref_name) {
  require(t.device_type == ref.device_type && (t.device_type == AK_CPU || t.device_index == ref.device_index),
          std::string(name) + ": expected device " + device_string(ref.device_type, ref.device_index) +
              " (same as " + ref_name + "), got " + device_string(t.device_type, t.device_index));
}

void check_device_args(int32_t device_type, int32_t device_index) {
  require(device_type == AK_CPU || device_type == AK_CUDA,
          "device_type: expected 0 (cpu) or 1 (cuda), got " + std::to_string(device_type));
  if (device_type == AK_CPU) {
    require(device_index == 0, "device_index: the CPU device has index 0, got " + std::to_string(device_index));
    return;
  }
  ak_tensor probe{};
  probe.device_type = device_type;
  probe.device_index = device_index;
  check_device(probe, "device");
}

void check_device(const ak_tensor& t, const char* name) {
  if (t.device_type == AK_CPU) return;
#if AK_WITH_CUDA
  const int count = cuda::device_count();
  if (t.device_index < 0 || t.device_index >= count) {
    fail(AK_ERR_NO_DEVICE, std::string(name) + ": device cuda:" + std::to_string(t.device_index) +
                               " does not exist (" + std::to_string(count) + " CUDA devices)");
  }
#else
  (void)name;
  fail_no_cuda();
#endif
}

int cpu_threads() {
  static const int n = [] {
    const unsigned hw = std::thread::hardware_concurrency();
    return static_cast<int>(std::max(1u, std::min(hw, 64u)));
  }();
  return n;
}

void parallel_for(int64_t n, const std::function<void(int64_t)>& body) {
  if (n <= 0) return;
  const int threads = static_cast<int>(std::min<int64_t>(n, cpu_threads()));
  if (threads <= 1) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto worker = [&] {
    for (;;) {
      const int64_t i = next.fetch_add(1);
      if (i >= n) return;
      try {
        body(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        next.store(n);
        return;
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

// Packed offsets: int32 [N + 1] on q's device, copied to the host and checked value by value.
std::vector<int64_t> read_offsets(const ak_tensor* p, const char* name, const ak_tensor& q, int64_t tokens,
                                  const char* token_source) {
  const ak_tensor& t = check_tensor(p, name);
  check_dtype(t, name, {AK_INT32});
  require(t.rank == 1, std::string(name) + ": expected shape [N + 1] (rank 1), got " + shape_string(t));
  require(t.shape[0] >= 1, std::string(name) + ": expected at least one entry (N + 1 with N >= 0), got none");
  require(t.strides[0] == 1 || t.shape[0] == 1, std::string(name) + ": expected a contiguous tensor");
  check_same_device(t, name, q, "q");
  const int64_t n = t.shape[0];
  std::vector<int32_t> host(static_cast<size_t>(n));
  if (t.device_type == AK_CPU) {
    const int32_t* src = static_cast<const int32_t*>(t.data);
    for (int64_t i = 0; i < n; ++i) host[i] = src[i];
  } else {
#if AK_WITH_CUDA
    ak::cuda::copy_to_host(t, host.data(), n * static_cast<int64_t>(sizeof(int32_t)));
#else
    fail_no_cuda();
#endif
  }
  require(host[0] == 0, std::string(name) + ": must start at 0, got " + std::to_string(host[0]));
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    out[i] = host[i];
    if (i > 0) {
      require(out[i] >= out[i - 1], std::string(name) + ": must be nondecreasing, but entry " + std::to_string(i) + " (" +
                                        std::to_string(out[i]) + ") is below entry " + std::to_string(i - 1) + " (" + std::to_string(out[i - 1]) +
                                        ")");
    }
  }
  require(out[n - 1] == tokens, std::string(name) + ": the last entry (" + std::to_string(out[n - 1]) +
                                    ") must equal the number of packed tokens in " + token_source + " (" +
                                    std::to_string(tokens) + ")");
  return out;
}

}  // namespace ak
