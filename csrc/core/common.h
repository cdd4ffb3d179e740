// Internal helpers shared by every translation unit: errors, tensor checks, entry guards.
// Nothing here is part of the C ABI.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "include/attnkit.h"

// build.ts defines AK_WITH_CUDA=1 for every unit when it compiles with nvcc.
#ifndef AK_WITH_CUDA
#define AK_WITH_CUDA 0
#endif

namespace ak {

// Internal code throws Error; every C entry catches it (AK_ENTRY) and turns it into a status.
struct Error : std::runtime_error {
  ak_status status;
  Error(ak_status s, const std::string& message) : std::runtime_error(message), status(s) {}
};

[[noreturn]] void fail(ak_status status, const std::string& message);
inline void require(bool ok, const std::string& message) {
  if (!ok) fail(AK_ERR_INVALID_ARGUMENT, message);
}
// Stores the message for ak_last_error() and returns the status.
ak_status set_error(ak_status status, const std::string& message);
const char* current_error();

// The body of every C entry: run it, map exceptions to a status.
template <class F>
ak_status guarded(const char* entry, F&& body) {
  try {
    body();
    return AK_OK;
  } catch (const Error& e) {
    return set_error(e.status, std::string(entry) + ": " + e.what());
  } catch (const std::bad_alloc&) {
    return set_error(AK_ERR_OUT_OF_MEMORY, std::string(entry) + ": out of host memory");
  } catch (const std::exception& e) {
    return set_error(AK_ERR_INTERNAL, std::string(entry) + ": " + e.what());
  } catch (...) {
    return set_error(AK_ERR_INTERNAL, std::string(entry) + ": unknown exception");
  }
}
#define AK_ENTRY(name, ...) return ::ak::guarded(name, [&]() __VA_ARGS__)

// ---- dtypes ----
size_t dtype_size(int32_t dtype);
const char* dtype_name(int32_t dtype);
bool is_float_dtype(int32_t dtype);

// ---- tensor descriptors ----
// The most elements a tensor may hold: 2^60, so that its bytes (8 at most per element) fit int64.
constexpr int64_t kMaxElements = int64_t{1} << 60;
// Elements of a descriptor, -1 when its shape holds more than kMaxElements (or a negative size).
int64_t numel(const ak_tensor& t);
bool is_contiguous(const ak_tensor& t);
// Sets t's strides to those of a contiguous tensor of its shape (row-major).
void set_contiguous_strides(ak_tensor& t);
std::string shape_string(const ak_tensor& t);
std::string device_string(int32_t device_type, int32_t device_index);
// s as a JSON string literal (quotes and backslashes escaped; the library's names hold nothing else).
std::string json_quoted(const std::string& s);

// Checks a descriptor is well formed (non-null, rank in range, known dtype and device, non-negative
// shape, data present when non-empty). `name` is the argument name used in messages.
const ak_tensor& check_tensor(const ak_tensor* t, const char* name);
// As check_tensor, but also contiguous.
const ak_tensor& check_contiguous(const ak_tensor* t, const char* name);
void check_dtype(const ak_tensor& t, const char* name, std::initializer_list<int32_t> allowed);
void check_same_dtype(const ak_tensor& t, const char* name, const ak_tensor& ref, const char* ref_name);
// Expects an exact shape; -1 entries match anything.
void check_shape(const ak_tensor& t, const char* name, const std::vector<int64_t>& expected);
void check_same_device(const ak_tensor& t, const char* name, const ak_tensor& ref, const char* ref_name);

// A std::vector-like view of the shape for iteration.
inline std::vector<int64_t> shape_of(const ak_tensor& t) {
  return std::vector<int64_t>(t.shape, t.shape + t.rank);
}

// Devices: validates device_type/index of a tensor (for CUDA: the index exists and the build has CUDA).
void check_device(const ak_tensor& t, const char* name);
// Offsets of packed sequences (`name`: int32 [N + 1] on q's device), read to the host and checked: 0 first,
// nondecreasing, the last equal to `tokens`, the packed tokens of `token_source`.
std::vector<int64_t> read_offsets(const ak_tensor* p, const char* name, const ak_tensor& q, int64_t tokens,
                                  const char* token_source);
// The same for a device given by type and index, as the runtime's entries take it.
void check_device_args(int32_t device_type, int32_t device_index);
// Declares a family's backend functions (`decls`) in both backends' namespaces, cpu:: and cuda::: the
// entries call one or the other by the tensors' device.
#define AK_DECLARE_BACKENDS(decls) \
  namespace cpu {                  \
  decls                            \
  }                                \
  namespace cuda {                 \
  decls                            \
  }

[[noreturn]] void fail_no_cuda();

// Calls a CUDA-backend function, or refuses clearly when the library was built without CUDA.
#if AK_WITH_CUDA
#define AK_CUDA_CALL(...) __VA_ARGS__
#else
#define AK_CUDA_CALL(...) ::ak::fail_no_cuda()
#endif

// ---- misc ----
int cpu_threads();
// Runs body(i) for i in [0, n) on up to cpu_threads() threads; the first exception is rethrown.
void parallel_for(int64_t n, const std::function<void(int64_t)>& body);

}  // namespace ak
