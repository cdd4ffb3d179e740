// The softmax-attention family's internal interface: entries (entries.cpp) validate the C arguments
// and fill these structs; each backend implements the same two functions.
#pragma once

#include <cstdint>
#include <vector>

#include "core/common.h"

namespace ak::attention {

struct AttnProblem {
  int64_t B = 0, Sq = 0, Skv = 0, Hq = 0, Hkv = 0, D = 0;
  int64_t N = 0;  // sequences: B, or cu_seqlens length - 1
  int32_t dtype = AK_BFLOAT16;      // q, k, v
  int32_t out_dtype = AK_BFLOAT16;  // the output: dtype, except for float8_e4m3 inputs
  int32_t device_type = AK_CPU, device_index = 0;
  float sm_scale = 1.0f, softcap = 0.0f;
  bool causal = false, deterministic = false;
  int64_t window_left = -1, window_right = -1;  // causal already folded into window_right = 0
  bool varlen = false;
  std::vector<int64_t> q_start, kv_start;       // host copies of cu_seqlens (N + 1), varlen only
  const ak_tensor *cu_seqlens_q = nullptr, *cu_seqlens_kv = nullptr;  // device tensors, varlen only

  int64_t group() const { return Hq / Hkv; }
};

struct AttnFwd {
  AttnProblem p;
  const ak_tensor *q = nullptr, *k = nullptr, *v = nullptr;
  const ak_tensor *output = nullptr, *lse = nullptr;
  // float8_e4m3 inputs: float32 [B, Hkv] dequantisation scales (null otherwise).
  const ak_tensor *q_scale = nullptr, *k_scale = nullptr, *v_scale = nullptr;
};

struct AttnBwd {
  AttnProblem p;
  const ak_tensor *q = nullptr, *k = nullptr, *v = nullptr, *output = nullptr, *d_output = nullptr, *lse = nullptr;
  const ak_tensor *dq = nullptr, *dk = nullptr, *dv = nullptr;
};

// What each backend defines for the entries.
AK_DECLARE_BACKENDS(void attention_fwd(const AttnFwd& a); void attention_bwd(const AttnBwd& a);)

}  // namespace ak::attention
