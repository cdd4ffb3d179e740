// One paged decode step of the delta rule with its preprocessing fused (recurrentGdnDecode and
// recurrentKdaDecode): the call as the backends see it, after ak_paged_decode checked it.
#pragma once

#include <cstdint>

#include "core/common.h"
#include "linear/checks.h"

namespace ak::linear {

using DecodeImpl = Impl;

struct PagedDecode {
  int64_t B = 0;      // sequences (one token each)
  int64_t H = 0;      // value heads
  int64_t HK = 0;     // query/key heads (H % HK == 0)
  int64_t K = 0, V = 0;
  int64_t slots = 0;  // rows of the pool
  bool per_channel = false;  // a gate per key channel (KDA); else one per head (GDN)
  bool bounded = false;      // lower_bound * sigmoid(a x); else -a softplus(x)
  bool trusted_indices = false;  // CUDA: no host read of the indices (the kernels skip one past the pool)
  DecodeImpl impl = DecodeImpl::any;
  double scale = 0, lower_bound = 0;
  const ak_tensor* qkv = nullptr;          // [B, HK K + HK K + H V]
  const ak_tensor* raw_gate = nullptr;     // [1, B, H] or [1, B, H, K]
  const ak_tensor* raw_beta = nullptr;     // [1, B, H]
  const ak_tensor* a_log = nullptr;        // [H] fp32
  const ak_tensor* dt_bias = nullptr;      // [H] or [H, K] fp32
  const ak_tensor* state = nullptr;        // [slots, H, V, K] fp32 or bf16, each slot dense
  const ak_tensor* indices = nullptr;      // [B] int32
  const ak_tensor* has_initial = nullptr;  // [B] bool, or null (every live slot resumes)
  const ak_tensor* output = nullptr;       // [1, B, H, V] in qkv's dtype
};

}  // namespace ak::linear
