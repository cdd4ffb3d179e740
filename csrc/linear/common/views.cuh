// Views of the token-major tensors the chunked linear-attention kernels read and write.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "arch/sm80.cuh"
#include "linear/common/l2norm.cuh"

namespace ak::linear::cuda {

using namespace ::ak::arch;

// A token-major view [B, T, heads, D] with a contiguous last dimension; strides in elements.
template <class T>
struct Rows {
  T* p = nullptr;
  int64_t sb = 0, st = 0, sh = 0;
  __host__ __device__ __forceinline__ T* row(int64_t b, int64_t t, int64_t head) const {
    return p + b * sb + t * st + head * sh;
  }
};

// A view [B, T, H] of fp32 scalars (g, beta); p == nullptr reads as zero.
struct Scalars {
  const float* p = nullptr;
  int64_t sb = 0, st = 0, sh = 0;
  __device__ __forceinline__ float at(int64_t b, int64_t t, int64_t h) const {
    return p ? p[b * sb + t * st + h * sh] : 0.f;
  }
};

}  // namespace ak::linear::cuda
