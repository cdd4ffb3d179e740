// The delta-rule family's internal interface: entries (entries.cpp) validate the C arguments and
// fill these structs; each backend implements the same three functions.
#pragma once

#include <cstdint>
#include <vector>

#include "core/common.h"
#include "linear/decode/pool_problem.h"

namespace ak::linear {

// Sizes and options shared by every delta-rule call, validated by the entry.
struct DeltaProblem {
  int64_t B = 0, T = 0, H = 0, HK = 0, K = 0, V = 0;
  int64_t N = 0;              // sequences: B, or cu_seqlens length - 1
  int32_t dtype = AK_FLOAT32; // of q, k, v, output
  int32_t device_type = AK_CPU, device_index = 0;
  double scale = 1.0;
  int32_t chunk_size = 64;
  bool gated = false, l2norm = false, recurrent = false;
  bool varlen = false;
  // Sequence n covers tokens [seq_start[n], seq_start[n + 1]) of batch row (varlen ? 0 : n);
  // host copy of cu_seqlens (or 0, T, 2T... without it: each row starts at 0 then).
  std::vector<int64_t> seq_start;  // N + 1 entries, varlen only, unless offsets_on_device
  const ak_tensor* cu_seqlens = nullptr;  // the device tensor, when varlen
  // A packed CUDA call inside a graph capture: the offsets are not read back (seq_start stays empty);
  // they are checked on the device, and the call's work is sized by chunk_capacity.
  bool offsets_on_device = false;

  int64_t group() const { return H / HK; }  // value heads per q/k head
  // Token range of sequence n within its batch row.
  int64_t begin(int64_t n) const { return varlen ? seq_start[n] : 0; }
  int64_t end(int64_t n) const { return varlen ? seq_start[n + 1] : T; }
  int64_t row(int64_t n) const { return varlen ? 0 : n; }
  // The chunks of C tokens the call's kernels are sized for: a packed call's capacity (the most any
  // offsets over T tokens and N sequences need; chunk_map.cuh), or B rows of ceil(T / C).
  int64_t chunk_capacity(int64_t C) const { return chunks_for(varlen, B, T, N, C); }
  static int64_t chunks_for(bool varlen, int64_t B, int64_t T, int64_t N, int64_t C) {
    return varlen ? (T + C - 1) / C + N : B * ((T + C - 1) / C);
  }
};

struct DeltaFwd {
  DeltaProblem p;
  const ak_tensor *q = nullptr, *k = nullptr, *v = nullptr, *g = nullptr, *beta = nullptr;
  const ak_tensor* initial_state = nullptr;
  const ak_tensor *output = nullptr, *final_state = nullptr, *chunk_states = nullptr;
  const ak_tensor *aw = nullptr, *au = nullptr;
  // What the backward would recompute (attnkit_linear.h, `saved`): a backend that stores it sets
  // *saved_written = 1 (the entry sets 0 first).
  const ak_tensor* saved = nullptr;
  int32_t* saved_written = nullptr;
};

// A pool forward through per-sequence states (where the state kernels do not serve the slots in place):
// the slots gathered into `initial` and the forward's final states, written to `final_state` (N H K V
// floats each), scattered back. `copy` and `forward` are one backend's pool copy and forward.
template <class Copy, class Forward>
void fwd_through_states(DeltaFwd a, const StatePool& pool, float* initial, float* final_state, Copy&& copy,
                        Forward&& forward) {
  const ak_tensor initial_view = kv_states_view(initial, *pool.cache, a.p.N);
  const ak_tensor final_view = kv_states_view(final_state, *pool.cache, a.p.N);
  // The forward's own [N, H, K, V] views of the same buffers.
  const ak_tensor initial_kv = swap_last_dims(initial_view), final_kv = swap_last_dims(final_view);
  copy(pool_states_copy(pool, initial_view, true));
  a.initial_state = &initial_kv, a.final_state = &final_kv;
  forward(a);
  copy(pool_states_copy(pool, final_view, false));
}

struct DeltaBwd {
  DeltaProblem p;
  const ak_tensor *q = nullptr, *k = nullptr, *v = nullptr, *g = nullptr, *beta = nullptr;
  const ak_tensor* initial_state = nullptr;
  const ak_tensor *d_output = nullptr, *d_final_state = nullptr;
  const ak_tensor *dq = nullptr, *dk = nullptr, *dv = nullptr, *dbeta = nullptr, *dg = nullptr;
  const ak_tensor* d_initial_state = nullptr;
  const ak_tensor* saved = nullptr;  // filled by a forward (saved_written 1), or nullptr
};

struct DeltaDecode {
  DeltaProblem p;  // T = 1, N = B
  const ak_tensor *q = nullptr, *k = nullptr, *v = nullptr, *g = nullptr, *beta = nullptr;
  const ak_tensor *state = nullptr, *output = nullptr, *new_state = nullptr;
};

// What each backend defines for the entries.
AK_DECLARE_BACKENDS(void delta_fwd(const DeltaFwd& a); void delta_bwd(const DeltaBwd& a);
                    void delta_decode(const DeltaDecode& a);)

namespace cuda {
// The forward advancing a state pool (ak_delta_rule_fwd_pool; a's initial and final states unset): the
// fast path's state kernels read and write the slots, any other call runs between a gather and a scatter.
void delta_fwd_pool(const DeltaFwd& a, const StatePool& pool);
}  // namespace cuda

}  // namespace ak::linear
