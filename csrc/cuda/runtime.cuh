// What CUDA kernels and their launchers share: error checks, the per-device stream, a device guard.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "core/common.h"

namespace ak::cuda {

// Throws ak::Error for a failed CUDA call; allocation failures map to AK_ERR_OUT_OF_MEMORY.
void check(cudaError_t err, const char* what);
#define AK_CUDA_CHECK(call) ::ak::cuda::check((call), #call)
// Checks the launch that just happened (bad configuration, missing kernel image).
inline void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }
// Fails at once, naming the first fault, once a kernel fault has made the CUDA context unusable.
void check_usable();

// The stream all of attnkit's work on `device` goes to (created on first use, non-blocking).
cudaStream_t stream(int device);

// Makes `device` current for the guard's lifetime, restoring the caller's device afterwards.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  int device_;
};

// Properties cached per device (multiprocessors, shared memory limits, compute capability).
const cudaDeviceProp& props(int device);

// Device-side scratch from the stream-ordered pool, released (stream-ordered) on scope exit.
class Scratch {
 public:
  Scratch(int device, size_t bytes);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* get() const { return ptr_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  int device_;
  void* ptr_ = nullptr;
};

inline unsigned ceil_div(int64_t a, int64_t b) { return static_cast<unsigned>((a + b - 1) / b); }

}  // namespace ak::cuda
