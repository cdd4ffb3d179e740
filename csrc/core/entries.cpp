// The runtime's C entries: library info, devices, memory, copies, fills, random numbers, events.
#include <cmath>
#include <cstring>
#include <string>

#include "cpu/backend.h"
#include "core/common.h"
#if AK_WITH_CUDA
#include "cuda/backend.h"
#endif

#ifndef AK_VERSION
#define AK_VERSION "0.0.0-dev"
#endif

using namespace ak;

namespace {

bool same_shape(const ak_tensor& a, const ak_tensor& b) {
  if (a.rank != b.rank) return false;
  for (int i = 0; i < a.rank; ++i) {
    if (a.shape[i] != b.shape[i]) return false;
  }
  return true;
}

int64_t nbytes(const ak_tensor& t) { return numel(t) * static_cast<int64_t>(dtype_size(t.dtype)); }

}  // namespace

extern "C" {

AK_API const char* ak_last_error(void) { return current_error(); }
AK_API const char* ak_version(void) { return AK_VERSION; }
AK_API int32_t ak_built_with_cuda(void) { return AK_WITH_CUDA; }

AK_API ak_status ak_device_count(int32_t* out_count) {
  AK_ENTRY("ak_device_count", {
    require(out_count != nullptr, "out_count: expected a pointer");
#if AK_WITH_CUDA
    *out_count = cuda::device_count();
#else
    *out_count = 0;
#endif
  });
}

AK_API ak_status ak_device_info(int32_t device_index, ak_device_props* out) {
  AK_ENTRY("ak_device_info", {
    require(out != nullptr, "out: expected a pointer");
    check_device_args(AK_CUDA, device_index);
    AK_CUDA_CALL(cuda::device_info(device_index, out));
  });
}

AK_API ak_status ak_synchronize(int32_t device_type, int32_t device_index) {
  AK_ENTRY("ak_synchronize", {
    check_device_args(device_type, device_index);
    if (device_type == AK_CUDA) AK_CUDA_CALL(cuda::synchronize(device_index));
  });
}

AK_API ak_status ak_alloc(int32_t device_type, int32_t device_index, int64_t bytes, void** out) {
  AK_ENTRY("ak_alloc", {
    require(out != nullptr, "out: expected a pointer");
    *out = nullptr;
    require(bytes >= 0, "bytes: expected a non-negative size, got " + std::to_string(bytes));
    check_device_args(device_type, device_index);
    if (bytes == 0) return;
    if (device_type == AK_CPU) {
      *out = cpu::alloc(bytes);
    } else {
      AK_CUDA_CALL(*out = cuda::alloc(device_index, bytes));
    }
  });
}

AK_API ak_status ak_free(int32_t device_type, int32_t device_index, void* ptr) {
  AK_ENTRY("ak_free", {
    check_device_args(device_type, device_index);
    if (ptr == nullptr) return;
    if (device_type == AK_CPU) {
      cpu::free(ptr);
    } else {
      AK_CUDA_CALL(cuda::free(device_index, ptr));
    }
  });
}

AK_API ak_status ak_memory_stats(int32_t device_type, int32_t device_index, ak_memory_stats_t* out) {
  AK_ENTRY("ak_memory_stats", {
    require(out != nullptr, "out: expected a pointer");
    check_device_args(device_type, device_index);
    if (device_type == AK_CPU) {
      cpu::memory_stats(out);
    } else {
      AK_CUDA_CALL(cuda::memory_stats(device_index, out));
    }
  });
}

AK_API ak_status ak_thread_bytes_in_use(int32_t device_type, int32_t device_index, int64_t* out) {
  AK_ENTRY("ak_thread_bytes_in_use", {
    require(out != nullptr, "out: expected a pointer");
    check_device_args(device_type, device_index);
    if (device_type == AK_CPU) {
      *out = cpu::thread_bytes_in_use();
    } else {
      AK_CUDA_CALL(*out = cuda::thread_bytes_in_use(device_index));
    }
  });
}

AK_API ak_status ak_trim_pool(int32_t device_index) {
  AK_ENTRY("ak_trim_pool", {
    check_device_args(AK_CUDA, device_index);
    AK_CUDA_CALL(cuda::trim_pool(device_index));
  });
}

AK_API ak_status ak_cuda_stream(int32_t device_index, void** out) {
  AK_ENTRY("ak_cuda_stream", {
    require(out != nullptr, "out: expected a pointer");
    check_device_args(AK_CUDA, device_index);
    AK_CUDA_CALL(*out = cuda::stream_handle(device_index));
  });
}

AK_API ak_status ak_cuda_set_current(int32_t device_index) {
  AK_ENTRY("ak_cuda_set_current", {
    check_device_args(AK_CUDA, device_index);
    AK_CUDA_CALL(cuda::set_current(device_index));
  });
}

AK_API ak_status ak_copy(const ak_tensor* dst_p, const ak_tensor* src_p) {
  AK_ENTRY("ak_copy", {
    const ak_tensor& dst = check_tensor(dst_p, "dst");
    const ak_tensor& src = check_tensor(src_p, "src");
    require(same_shape(dst, src), "dst: expected shape " + shape_string(src) + " (same as src), got " +
                                      shape_string(dst));
    if (numel(dst) == 0) return;
    const bool same_device = dst.device_type == src.device_type &&
                             (dst.device_type == AK_CPU || dst.device_index == src.device_index);
    if (same_device) {
      if (dst.device_type == AK_CPU) {
        cpu::copy_strided(dst, src);
      } else {
        AK_CUDA_CALL(cuda::copy_strided(dst, src));
      }
      return;
    }
    require(dst.dtype == src.dtype, std::string("dst: a copy across devices keeps the dtype; expected ") +
                                        dtype_name(src.dtype) + ", got " + dtype_name(dst.dtype));
    require(is_contiguous(dst) && is_contiguous(src), "src: a copy across devices needs contiguous tensors");
    AK_CUDA_CALL(cuda::copy_across(dst, src));
  });
}

AK_API ak_status ak_copy_to_host(const ak_tensor* src_p, void* host_dst, int64_t bytes) {
  AK_ENTRY("ak_copy_to_host", {
    const ak_tensor& src = check_contiguous(src_p, "src");
    require(bytes == nbytes(src), "bytes: expected " + std::to_string(nbytes(src)) + " (the size of src), got " +
                                      std::to_string(bytes));
    if (bytes == 0) return;
    require(host_dst != nullptr, "host_dst: expected a buffer");
    if (src.device_type == AK_CPU) {
      std::memcpy(host_dst, src.data, static_cast<size_t>(bytes));
    } else {
      AK_CUDA_CALL(cuda::copy_to_host(src, host_dst, bytes));
    }
  });
}

AK_API ak_status ak_copy_from_host(const ak_tensor* dst_p, const void* host_src, int64_t bytes) {
  AK_ENTRY("ak_copy_from_host", {
    const ak_tensor& dst = check_contiguous(dst_p, "dst");
    require(bytes == nbytes(dst), "bytes: expected " + std::to_string(nbytes(dst)) + " (the size of dst), got " +
                                      std::to_string(bytes));
    if (bytes == 0) return;
    require(host_src != nullptr, "host_src: expected a buffer");
    if (dst.device_type == AK_CPU) {
      std::memcpy(dst.data, host_src, static_cast<size_t>(bytes));
    } else {
      AK_CUDA_CALL(cuda::copy_from_host(dst, host_src, bytes));
    }
  });
}

AK_API ak_status ak_fill(const ak_tensor* dst_p, double value) {
  AK_ENTRY("ak_fill", {
    const ak_tensor& dst = check_contiguous(dst_p, "dst");
    if (dst.device_type == AK_CPU) {
      cpu::fill(dst, value);
    } else {
      AK_CUDA_CALL(cuda::fill(dst, value));
    }
  });
}

AK_API ak_status ak_arange(const ak_tensor* dst_p, double start, double step) {
  AK_ENTRY("ak_arange", {
    const ak_tensor& dst = check_contiguous(dst_p, "dst");
    require(dst.dtype != AK_BOOL, "dst: a sequence needs a numeric dtype, got bool");
    require(std::isfinite(start) && std::isfinite(step), "start, step: expected finite numbers");
    if (dst.device_type == AK_CPU) {
      cpu::arange(dst, start, step);
    } else {
      AK_CUDA_CALL(cuda::arange(dst, start, step));
    }
  });
}

AK_API ak_status ak_random(const ak_tensor* dst_p, uint64_t seed, uint64_t offset, int32_t kind, double a,
                           double b) {
  AK_ENTRY("ak_random", {
    const ak_tensor& dst = check_contiguous(dst_p, "dst");
    require(kind == 0 || kind == 1, "kind: expected 0 (uniform) or 1 (normal), got " + std::to_string(kind));
    require(is_float_dtype(dst.dtype) || dst.dtype == AK_FLOAT8_E4M3,
            std::string("dst: random numbers need a floating dtype, got ") + dtype_name(dst.dtype));
    if (dst.device_type == AK_CPU) {
      cpu::random(dst, seed, offset, kind, a, b);
    } else {
      AK_CUDA_CALL(cuda::random(dst, seed, offset, kind, a, b));
    }
  });
}

AK_API ak_status ak_event_create(int32_t device_index, void** out_event) {
  AK_ENTRY("ak_event_create", {
    require(out_event != nullptr, "out_event: expected a pointer");
    check_device_args(AK_CUDA, device_index);
    AK_CUDA_CALL(*out_event = cuda::event_create(device_index));
  });
}

AK_API ak_status ak_event_record(void* event) {
  AK_ENTRY("ak_event_record", {
    require(event != nullptr, "event: expected an event");
    AK_CUDA_CALL(cuda::event_record(event));
  });
}

AK_API ak_status ak_event_elapsed_ms(void* start, void* end, double* out_ms) {
  AK_ENTRY("ak_event_elapsed_ms", {
    require(start != nullptr && end != nullptr, "start, end: expected two events");
    require(out_ms != nullptr, "out_ms: expected a pointer");
    AK_CUDA_CALL(*out_ms = cuda::event_elapsed_ms(start, end));
  });
}

AK_API ak_status ak_event_destroy(void* event) {
  AK_ENTRY("ak_event_destroy", {
    if (event == nullptr) return;
    AK_CUDA_CALL(cuda::event_destroy(event));
  });
}

}  // extern "C"
