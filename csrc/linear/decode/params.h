// The fused paged decode kernel's view of a call (decode/fused.cuh): device pointers, strides in
// elements, sizes. T is packed_qkv's and the output's dtype; the pool is float32 or bfloat16
// (state_bf16), the raw gate and beta any float dtype (their codes).
#pragma once

#include <cstdint>

#include "cuda/device_check.h"

namespace ak::linear::cuda::paged {

template <class T>
struct DecodeParams {
  const T* qkv = nullptr;
  int64_t qkv_row = 0;          // elements between sequences
  const void* raw_gate = nullptr;
  int32_t gate_dtype = 0;       // AK_FLOAT32 | AK_BFLOAT16 | AK_FLOAT16
  int64_t gate_b = 0, gate_h = 0;  // strides of [1, B, H(, K)]: sequence, head
  const void* raw_beta = nullptr;
  int32_t beta_dtype = 0;
  int64_t beta_b = 0, beta_h = 0;
  const float* a_log = nullptr;
  const float* dt_bias = nullptr;  // [H] or [H, K] contiguous
  void* state = nullptr;
  bool state_bf16 = false;
  int64_t slot_stride = 0;      // elements between slots; each slot [H, V, K] dense
  int64_t slots = 0;            // the pool's slot count
  const int32_t* indices = nullptr;
  const uint8_t* has_initial = nullptr;  // or null
  T* out = nullptr;
  int64_t out_b = 0, out_h = 0;
  int B = 0, H = 0, HK = 0, K = 0, V = 0;
  bool per_channel = false, bounded = false;
  float scale = 0.f, lower_bound = 0.f;
  const ak::cuda::DeviceCheck* check = nullptr;  // in a graph: write nothing once a check has failed
};

}  // namespace ak::linear::cuda::paged
