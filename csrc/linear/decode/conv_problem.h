// The causal convolution over a paged history pool (pagedCausalConv1d, causalConv1dDecode): the call
// as the backends see it, after ak_paged_conv1d checked it.
#pragma once

#include <cstdint>

#include "core/common.h"

namespace ak::linear {

// The widest window the fused CUDA kernel keeps in registers; wider ones take the general path.
constexpr int64_t kMaxFusedConvWidth = 8;

struct PagedConv {
  int64_t B = 0, T = 0, C = 0, W = 0;  // x as [B, T, C] (a decode step: T = 1)
  int64_t N = 0;                       // sequences: B, or the packed ones
  int64_t slots = 0;
  int32_t activation = 0;              // AK_CONV_NONE or AK_CONV_SILU
  bool trusted_indices = false;        // CUDA: no host read of the indices (AK_CONV_TRUSTED_INDICES)
  bool reference = false;              // the exact general path (AK_CONV_IMPL_REFERENCE)
  const int32_t* offsets = nullptr;    // host copy of cu_seqlens [N + 1], or null (batch rows)
  const ak_tensor* cu_seqlens = nullptr;  // the same offsets on x's device (int32), or null
  const ak_tensor* x = nullptr;        // rank 3 [B, T, C] or rank 2 [B, C] (one token each)
  const ak_tensor* weight = nullptr;   // [C, W] contiguous
  const ak_tensor* state = nullptr;    // [slots, W - 1, C], each slot dense; updated in place
  const ak_tensor* indices = nullptr;  // [N] int32, or null: sequence n uses slot n
  const ak_tensor* has_initial = nullptr;  // [N] bool, or null (every live slot resumes)
  const ak_tensor* output = nullptr;   // x's shape and dtype
};

}  // namespace ak::linear
