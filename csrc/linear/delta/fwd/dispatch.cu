// The CUDA forward and decode of the delta-rule family: fills the kernels' parameters from the
// validated call, asks the planner (linear/planner.cpp) what to run, and runs it:
//   fast     stage 1 (FwdPrep) into a scratch of w, u, gc, 1/|k|, then stage 2 (a state kernel), as
//            one pass or as a pass split into segments (summaries, combine, outputs)
//   general  the fp32 token-by-token recurrence, plus the fp32 WY factors when aw / au are asked for
#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "cuda/backend.h"
#include "cuda/registry_launch.h"
#include "cuda/runtime.cuh"
#include "cuda/tensor_map.h"
#include "linear/common/packed_tables.h"
#include "linear/common/segments.h"
#include "linear/decode/pool_cuda.h"
#include "linear/decode/slots.h"
#include "generated/linear_launchers.h"
#include "linear/planner.h"
#include "linear/problem.h"
#include "linear/saved_layout.h"

namespace ak::linear::cuda {
namespace {

using namespace fwd;

template <class T>
Rows<const T> rows_in(const ak_tensor* t) {
  return {static_cast<const T*>(t->data), t->strides[0], t->strides[1], t->strides[2]};
}
template <class T>
Rows<T> rows_out(const ak_tensor* t) {
  return {static_cast<T*>(t->data), t->strides[0], t->strides[1], t->strides[2]};
}
Scalars scalars(const ak_tensor* t) {
  if (t == nullptr) return {};
  return {static_cast<const float*>(t->data), t->strides[0], t->strides[1], t->strides[2]};
}
float* f32(const ak_tensor* t) { return t ? static_cast<float*>(t->data) : nullptr; }

int as_int(int64_t x, const char* what) {
  require(x >= 0 && x <= INT32_MAX, std::string("delta_rule_fwd on CUDA: ") + what + " exceeds 2^31 - 1");
  return static_cast<int>(x);
}

size_t round_up(size_t x) { return (x + 255) / 256 * 256; }

// ---- general path ----

template <class T>
void general_fwd(const DeltaFwd& a, const planning::FwdChoice& plan, cudaStream_t stream) {
  const DeltaProblem& p = a.p;
  RecurrentParams<T> r;
  r.q = rows_in<T>(a.q);
  r.k = rows_in<T>(a.k);
  r.v = rows_in<T>(a.v);
  r.o = rows_out<T>(a.output);
  r.g = p.gated ? scalars(a.g) : Scalars{};
  r.beta = scalars(a.beta);
  r.initial_state = f32(a.initial_state);
  r.final_state = f32(a.final_state);
  r.chunk_states = f32(a.chunk_states);
  r.map.T = as_int(p.T, "T");
  r.N = as_int(p.N, "N");
  r.H = as_int(p.H, "H");
  r.group = as_int(p.group(), "group");
  r.K = as_int(p.K, "K");
  r.V = as_int(p.V, "V");
  r.C = p.chunk_size;
  r.NC = as_int((p.T + p.chunk_size - 1) / p.chunk_size, "chunks");
  r.scale = static_cast<float>(p.scale);
  r.l2norm = p.l2norm;
  // Packed sequences: the map's tables, built on the device (the recurrence walks whole sequences,
  // so the tables are built in chunks of T tokens: at most one a sequence; only seq is read).
  const ChunkTables tables(p, std::max(1, r.map.T), stream, "delta_rule_fwd");
  r.map.seq = tables.map.seq;
  ak::cuda::launch_row<T>(plan.recurrent_row, "linear.fwd.recurrent", r, stream);

  if (plan.wy_row >= 0) {
    WyParams<T> w;
    w.k = r.k;
    w.g = r.g;
    w.beta = r.beta;
    w.aw = f32(a.aw);
    w.au = f32(a.au);
    w.B = as_int(p.B, "B");
    w.tokens = r.map.T;
    w.H = r.H;
    w.group = r.group;
    w.K = r.K;
    w.C = p.chunk_size;
    w.NC = r.NC;
    w.l2norm = p.l2norm;
    ak::cuda::launch_row<T>(plan.wy_row, "linear.fwd.wy", w, stream);
  }
}

// ---- fast path ----

// Tensor maps of the split kernel's TMA loads (fixed-length calls): q, k as [B, T, heads, D], w, u as
// [chunks * H * 64, D], boxes of 64 x 64.
template <class T>
void encode_split_maps(const DeltaFwd& a, const T* w, const T* u, int64_t chunks, SplitMaps& maps) {
  const int dtype = std::is_same_v<T, __half> ? AK_FLOAT16 : AK_BFLOAT16;
  const DeltaProblem& p = a.p;
  ak::cuda::encode_token_rows_map(maps.q, *a.q, 64, "delta rule q");
  ak::cuda::encode_token_rows_map(maps.k, *a.k, 64, "delta rule k");
  const int64_t rows = chunks * p.H * 64;
  ak::cuda::encode_rows_map(maps.w, dtype, w, p.K, rows, 1, 1, p.K, 0, 0, 64, "delta rule w");
  ak::cuda::encode_rows_map(maps.u, dtype, u, p.K, rows, 1, 1, p.K, 0, 0, 64, "delta rule u");
}

// Tensor maps of the saved states' stores (saved_layout.h).
template <class T>
void encode_save_maps(const DeltaFwd& a, const SavedParts<T>& parts, int64_t chunks, SaveMaps& maps) {
  const int dtype = std::is_same_v<T, __half> ? AK_FLOAT16 : AK_BFLOAT16;
  const int64_t D = a.p.K, H = a.p.H;
  ak::cuda::encode_rows_map(maps.hs, dtype, parts.hs, D, H * chunks * D, 1, 1, D, 0, 0, static_cast<int>(D),
                            "delta rule saved states");
  ak::cuda::encode_rows_map(maps.vs, dtype, parts.vs, D, H * chunks * 64, 1, 1, D, 0, 0, 64,
                            "delta rule saved v_new");
}

// The state kernels' view of a pool whose slots they read and write in place (float32 slots).
struct PoolSlots {
  const StatePool* pool = nullptr;
  const ak::cuda::DeviceCheck* check = nullptr;
};

template <class T>
void fast_fwd(const DeltaFwd& a, const planning::FwdChoice& plan, int64_t chunks64, cudaStream_t stream,
              const PoolSlots& slots = {}) {
  const DeltaProblem& p = a.p;
  const int device = p.device_index;
  const int D = static_cast<int>(p.K);
  const int chunks = as_int(chunks64, "chunks");
  const int H = as_int(p.H, "H"), N = as_int(p.N, "N");

  // Scratch: w, u [chunks, H, 64, D] (16-bit), gc and rk [chunks, H, 64] (fp32).
  const size_t vec_elems = static_cast<size_t>(chunks64) * H * 64;
  const size_t bytes_wu = round_up(vec_elems * D * sizeof(T));
  const size_t bytes_vec = round_up(vec_elems * sizeof(float));
  ak::cuda::Scratch scratch(device, 2 * bytes_wu + (p.l2norm ? 2 : 1) * bytes_vec);
  unsigned char* s = scratch.as<unsigned char>();
  T* w = reinterpret_cast<T*>(s);
  T* u = reinterpret_cast<T*>(s + bytes_wu);
  float* gc = reinterpret_cast<float*>(s + 2 * bytes_wu);
  float* rk = p.l2norm ? reinterpret_cast<float*>(s + 2 * bytes_wu + bytes_vec) : nullptr;

  const ChunkTables tables(p, kFastChunk, stream, "delta_rule_fwd");
  const ChunkMap& map = tables.map;

  PrepParams<T> pp;
  pp.k = rows_in<T>(a.k);
  pp.v = rows_in<T>(a.v);
  pp.g = p.gated ? scalars(a.g) : Scalars{};
  pp.beta = scalars(a.beta);
  pp.map = map;
  pp.w = w;
  pp.u = u;
  pp.gc = gc;
  pp.rk = rk;
  pp.aw = f32(a.aw);
  pp.au = f32(a.au);
  pp.chunks = chunks;
  pp.H = H;
  pp.group = as_int(p.group(), "group");
  pp.tokens = map.T;
  pp.l2norm = p.l2norm;
  // With the states saved for the backward, stage 1 stores A and w there too.
  const SavedParts<T> parts(plan.save ? static_cast<T*>(a.saved->data) : nullptr, p.H, chunks, p.K, p.V);
  pp.save_a = parts.a;
  pp.save_w = parts.w;
  ak::cuda::launch_row<T>(plan.prep_row, "linear.fwd.prep", pp, stream);

  StateArgs<T> sa;
  StateParams<T>& sp = sa.p;
  sp.q = rows_in<T>(a.q);
  sp.k = pp.k;
  sp.o = rows_out<T>(a.output);
  sp.w = w;
  sp.u = u;
  sp.gc = gc;
  sp.rk = rk;
  sp.initial_state = f32(a.initial_state);
  sp.final_state = f32(a.final_state);
  sp.chunk_states = f32(a.chunk_states);
  if (slots.pool != nullptr) {
    const ak_tensor& cache = *slots.pool->cache;
    sp.initial_state = sp.final_state = static_cast<float*>(cache.data);
    sp.slots = static_cast<const int32_t*>(slots.pool->indices->data);
    sp.has_initial = slots.pool->has_initial ? static_cast<const uint8_t*>(slots.pool->has_initial->data) : nullptr;
    sp.slot_stride = cache.strides[0];
    sp.pool_slots = as_int(cache.shape[0], "state_cache slots");
    sp.check = slots.check;
  }
  sp.map = map;
  sp.N = N;
  sp.H = H;
  sp.group = pp.group;
  sp.scale = static_cast<float>(p.scale);
  sp.l2norm = p.l2norm;
  SplitMaps split_maps;
  if (plan.tma_loads) {
    encode_split_maps<T>(a, w, u, chunks, split_maps);
    sa.maps = &split_maps;
  }
  SaveMaps save_maps;
  if (plan.save) {
    encode_save_maps<T>(a, parts, chunks, save_maps);
    sa.save = &save_maps;
    sp.save_chunks = chunks;
    sp.save_hs = parts.hs;
    sp.save_vs = parts.vs;
    *a.saved_written = 1;
  }
  if (plan.segments <= 1) return ak::cuda::launch_row<T>(plan.state_row, "linear.fwd.state", sa, stream);

  // A pass split into segments: summaries of every segment, entry states, outputs of segments 1 .. P - 1.
  const int pm = plan.segments - 1;
  const size_t summary = round_up(static_cast<size_t>(N) * H * pm * D * D * sizeof(float));
  ak::cuda::Scratch states(device, 3 * summary);
  unsigned char* sb = states.as<unsigned char>();
  sp.seg_count = plan.segments;
  sp.seg_chunks = plan.seg_chunks;
  sp.seg_fwd = reinterpret_cast<float*>(sb);
  sp.seg_tr = reinterpret_cast<float*>(sb + summary);
  float* entry = reinterpret_cast<float*>(sb + 2 * summary);
  sp.seg_entry = entry;
  sp.seg_pass = 1;
  ak::cuda::launch_row<T>(plan.pass1_row, "linear.fwd.state", sa, stream);
  launch_segment_combine(sp.seg_fwd, sp.seg_tr, entry, N, H, D, pm, stream);
  sp.seg_pass = 2;
  ak::cuda::launch_row<T>(plan.state_row, "linear.fwd.state", sa, stream);
}

}  // namespace

void delta_fwd(const DeltaFwd& a) {
  const DeltaProblem& p = a.p;
  ak::cuda::DeviceGuard guard(p.device_index);
  cudaStream_t stream = ak::cuda::stream(p.device_index);
  const planning::FwdShape shape = planning::fwd_shape(a, a.saved != nullptr);
  const planning::FwdChoice plan = planning::plan_fwd(shape, ak::cuda::caps(p.device_index), tuning::current());
  plan::set_last(plan.plan);
  if (plan.fast) {
    if (p.dtype == AK_BFLOAT16) return fast_fwd<__nv_bfloat16>(a, plan, shape.chunks64, stream);
    return fast_fwd<__half>(a, plan, shape.chunks64, stream);
  }
  switch (p.dtype) {
    case AK_FLOAT32: return general_fwd<float>(a, plan, stream);
    case AK_BFLOAT16: return general_fwd<__nv_bfloat16>(a, plan, stream);
    case AK_FLOAT16: return general_fwd<__half>(a, plan, stream);
    default: fail(AK_ERR_INTERNAL, "delta_rule_fwd: unexpected dtype");
  }
}

void delta_fwd_pool(const DeltaFwd& a, const StatePool& pool) {
  const DeltaProblem& p = a.p;
  const int device = p.device_index;
  ak::cuda::DeviceGuard guard(device);
  cudaStream_t stream = ak::cuda::stream(device);
  const ak_tensor& cache = *pool.cache;
  const PoolSlots slots{&pool, require_slots_on_device(device, pool.indices, p.N, cache.shape[0], pool.trusted,
                                                       "ak_delta_rule_fwd_pool")};
  const planning::FwdShape shape = planning::fwd_shape(a, false);
  planning::FwdChoice plan = planning::plan_fwd(shape, ak::cuda::caps(device), tuning::current());
  // The fast path's state kernels read and write float32 slots where they are; other calls (and
  // bfloat16 slots, rounded by the scatter) run between a gather and a scatter.
  const bool in_place = plan.fast && cache.dtype == AK_FLOAT32;
  if (in_place) {
    plan.plan.detail("states", "pool slots, read and written by the state kernels");
    plan::set_last(plan.plan);
    if (p.dtype == AK_BFLOAT16) return fast_fwd<__nv_bfloat16>(a, plan, shape.chunks64, stream, slots);
    return fast_fwd<__half>(a, plan, shape.chunks64, stream, slots);
  }
  const size_t bytes = round_up(static_cast<size_t>(p.N * p.H * p.K * p.V) * sizeof(float));
  ak::cuda::Scratch scratch(device, 2 * bytes);
  float* const initial = scratch.as<float>();
  // delta_fwd records its own plan.
  fwd_through_states(a, pool, initial, initial + bytes / sizeof(float), pool_copy, delta_fwd);
}

// delta_bwd: ../bwd/dispatch.cu

void delta_decode(const DeltaDecode& a) {
  const DeltaProblem& p = a.p;
  ak::cuda::DeviceGuard guard(p.device_index);
  cudaStream_t stream = ak::cuda::stream(p.device_index);
  planning::DecodeShape shape;
  shape.dtype = p.dtype;
  shape.K = p.K;
  shape.aligned = decode_rows_aligned(a.state->data, a.new_state->data, p.V, a.state->dtype == AK_FLOAT32 ? 4 : 2);
  const planning::DecodeChoice plan =
      planning::plan_decode(shape, ak::cuda::caps(p.device_index), tuning::current());
  plan::set_last(plan.plan);
  if (p.B == 0) return;  // planned first, so that a pin that cannot serve is refused on empty calls too
  auto run = [&](auto type) {
    using T = decltype(type);
    DecodeArgs<T> d;
    d.p.q = static_cast<const T*>(a.q->data);
    d.p.k = static_cast<const T*>(a.k->data);
    d.p.v = static_cast<const T*>(a.v->data);
    d.p.q_sb = a.q->strides[0], d.p.q_sh = a.q->strides[1];
    d.p.k_sb = a.k->strides[0], d.p.k_sh = a.k->strides[1];
    d.p.v_sb = a.v->strides[0], d.p.v_sh = a.v->strides[1];
    if (p.gated) {
      d.p.g = static_cast<const float*>(a.g->data);
      d.p.g_sb = a.g->strides[0], d.p.g_sh = a.g->strides[1];
    }
    d.p.beta = static_cast<const float*>(a.beta->data);
    d.p.beta_sb = a.beta->strides[0], d.p.beta_sh = a.beta->strides[1];
    d.p.state = static_cast<const float*>(a.state->data);
    d.p.new_state = static_cast<float*>(a.new_state->data);
    d.p.o = static_cast<T*>(a.output->data);
    d.p.o_sb = a.output->strides[0], d.p.o_sh = a.output->strides[1];
    d.p.B = as_int(p.B, "B");
    d.p.H = as_int(p.H, "H");
    d.p.group = as_int(p.group(), "group");
    d.p.K = as_int(p.K, "K");
    d.p.V = as_int(p.V, "V");
    d.p.scale = static_cast<float>(p.scale);
    d.p.l2norm = p.l2norm;
    d.state_f32 = a.state->dtype == AK_FLOAT32;
    ak::cuda::launch_row<T>(plan.row, "linear.decode", d, stream);
  };
  switch (p.dtype) {
    case AK_FLOAT32: return run(float{});
    case AK_BFLOAT16: return run(__nv_bfloat16{});
    case AK_FLOAT16: return run(__half{});
    default: fail(AK_ERR_INTERNAL, "delta_rule_decode: unexpected dtype");
  }
}

}  // namespace ak::linear::cuda
