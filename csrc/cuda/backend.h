// The CUDA backend's host-side interface, in plain C++ types so that .cpp entries can call it
// without CUDA headers. Implemented in csrc/cuda/*.cu; only linked when AK_WITH_CUDA is 1.
#pragma once

#include <cstdint>

#include "core/registry.h"
#include "include/attnkit.h"

namespace ak::cuda {

int device_count();
void device_info(int device, ak_device_props* out);
void synchronize(int device);

void* alloc(int device, int64_t bytes);
void free(int device, void* ptr);
void memory_stats(int device, ak_memory_stats_t* out);
void trim_pool(int device);

// Same device, same shape; any strides and dtypes.
void copy_strided(const ak_tensor& dst, const ak_tensor& src);
// Contiguous, same dtype, across devices (CPU <-> CUDA or CUDA <-> CUDA). Synchronous.
void copy_across(const ak_tensor& dst, const ak_tensor& src);
void copy_to_host(const ak_tensor& src, void* host, int64_t bytes);
void copy_from_host(const ak_tensor& dst, const void* host, int64_t bytes);
void fill(const ak_tensor& dst, double value);
void random(const ak_tensor& dst, uint64_t seed, uint64_t offset, int kind, double a, double b);

void* event_create(int device);
void event_record(void* event);
double event_elapsed_ms(void* start, void* end);
void event_destroy(void* event);

// What the planners know about device `device`: its limits, and which registry rows were built for it.
const registry::Caps& caps(int device);

}  // namespace ak::cuda
