// The buffer a delta-rule forward fills for its backward (ak_delta_rule_fwd's `saved`), chunks of 64
// tokens in the fast backward's layouts: the state before each chunk [H][chunks][K][V], U = u - w S
// [H][chunks * 64][V] (both stored by the Hopper stage-2 kernels), A = (I + L)^-1 [H][chunks * 64][64]
// and w [H][chunks * 64][K] (stored by stage 1). One description for the forward that writes it, the
// backward that reads it and the entry that checks its size.
#pragma once

#include <cstdint>

namespace ak::linear {

constexpr int64_t kSavedChunk = 64;

// Elements of the buffer for `chunks` chunks (an upper bound on them is enough for the size check).
inline int64_t saved_elements(int64_t H, int64_t chunks, int64_t K, int64_t V) {
  return H * chunks * (K * V + kSavedChunk * V + kSavedChunk * kSavedChunk + kSavedChunk * K);
}

// Where each part starts, for a call of exactly `chunks` chunks (all null without a buffer).
template <class T>
struct SavedParts {
  T *hs = nullptr, *vs = nullptr, *a = nullptr, *w = nullptr;
  SavedParts(T* base, int64_t H, int64_t chunks, int64_t K, int64_t V) {
    if (base == nullptr) return;
    hs = base;
    vs = hs + H * chunks * K * V;
    a = vs + H * chunks * kSavedChunk * V;
    w = a + H * chunks * kSavedChunk * kSavedChunk;
  }
};

}  // namespace ak::linear
