// Argument checks shared by the linear-attention entries (the delta rule's and the gated linear
// family's): the same rules and the same messages, each naming the argument it refuses.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/common.h"
#include "linear/problem.h"

namespace ak::linear {

constexpr int64_t kMaxHeadDim = 256;

// The last dimension must be contiguous; every stride non-negative (views read in place).
void check_row_layout(const ak_tensor& t, const char* name);

// A tensor read or written row by row: well formed, of the expected rank and shape (-1 matches any
// size), last dim contiguous, on the reference device.
const ak_tensor& check_rows(const ak_tensor* t, const char* name, const std::vector<int64_t>& shape,
                            const ak_tensor& ref, const char* ref_name);

// The same for a tensor of q's dtype.
const ak_tensor& check_rows_like_q(const ak_tensor* t, const char* name, const std::vector<int64_t>& shape,
                                   const ak_tensor& q);

// A state-like tensor: contiguous, fp32, exact shape, on the reference device.
const ak_tensor& check_state(const ak_tensor* t, const char* name, std::initializer_list<int64_t> shape,
                             const ak_tensor& ref, const char* ref_name);

void check_scale(double scale);

// Which implementation a call asks for: whatever the planner picks, a fused kernel only, or the exact
// general path.
enum class Impl { any, fused, reference };

// `impl` in a call's flags: at most one of its fused and reference bits (named as the header spells them).
void check_impl_flags(int32_t flags, int32_t fused_bit, int32_t reference_bit, const char* fused_name,
                      const char* reference_name);
// The implementation the flags ask for (both bits together are refused).
Impl impl_from_flags(int32_t flags, int32_t fused_bit, int32_t reference_bit, const char* fused_name,
                     const char* reference_name);
// As impl_from_flags, for a call on `device_type`: "fused" is refused on the CPU, whatever the sizes.
Impl impl_for_device(int32_t flags, int32_t fused_bit, int32_t reference_bit, const char* fused_name,
                     const char* reference_name, int32_t device_type);
// impl 'fused' asked of the CPU, whose backend is the reference: refused.
[[noreturn]] void refuse_fused_on_cpu();
void check_head_dims(int64_t K, int64_t V, const char* q_name, const char* v_name);
void check_heads(int64_t HK, int64_t H, const char* qk_name, const char* v_name);

// Reads cu_seqlens to the host and checks it: int32 [N + 1], N >= 1, starting at 0, nondecreasing,
// ending at or before T.
std::vector<int64_t> read_cu_seqlens(const ak_tensor& cu, int64_t T);

// Checks cu_seqlens (when given) against q and fills p's sequences: N = B without it; with it B must
// be 1 and N = its length - 1. p.T and p.B must be set.
void parse_sequences(DeltaProblem& p, const ak_tensor* cu_seqlens, const ak_tensor& q);

// The leading dimensions of a call's per-token tensors followed by `tail`: [B, T, tail...] for
// `tokens`, [B, tail...] for one decode step.
std::vector<int64_t> token_dims(const DeltaProblem& p, bool tokens, std::initializer_list<int64_t> tail);

// q, k and v of a call, each [B, T, ...] (tokens) or [B, ...] (one decode step): q and k [.., HK, K],
// v [.., H, V], all of one dtype (float16, bfloat16 or float32). Fills p's extents, dtype and device
// (T = 1 for a decode step); returns q.
const ak_tensor& check_qkv(DeltaProblem& p, bool tokens, const ak_tensor* q, const ak_tensor* k,
                           const ak_tensor* v);

// new_state is the same memory as state (in place) or apart from it; a partial overlap would read
// half-written states.
void check_in_place_or_apart(const ak_tensor& state, const ak_tensor& new_state);

}  // namespace ak::linear
