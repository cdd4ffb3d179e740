// The CPU backend's runtime: host memory and element-wise work (copies, casts, fills, random
// numbers). Operator families add their own CPU kernels beside their entries.
#pragma once

#include <cstdint>

#include "include/attnkit.h"

namespace ak::cpu {

void* alloc(int64_t bytes);
void free(void* ptr);
void memory_stats(ak_memory_stats_t* out);
int64_t thread_bytes_in_use();

// Same shape; any strides and dtypes.
void copy_strided(const ak_tensor& dst, const ak_tensor& src);
void fill(const ak_tensor& dst, double value);
void random(const ak_tensor& dst, uint64_t seed, uint64_t offset, int kind, double a, double b);
// dst[i] = start + i step, computed in double and rounded once to dst's dtype.
void arange(const ak_tensor& dst, double start, double step);

}  // namespace ak::cpu
