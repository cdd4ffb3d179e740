// The gated linear family's CUDA backend: executes the planner's choice (gla/planner.h): the chunked
// kernels through the registry's launch table, or the general path (host_mirror.h).
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "core/plan.h"
#include "cuda/backend.h"
#include "cuda/registry_launch.h"
#include "cuda/runtime.cuh"
#include "cuda/tensor_map.h"
#include "linear/delta/fwd/params.h"
#include "linear/gla/problem.h"
#include "linear/gla/cuda/chunk_gates.cuh"
#include "linear/gla/cuda/dgates.cuh"
#include "linear/gla/cuda/normaliser.cuh"
#include "linear/gla/cuda/params.h"
#include "linear/common/host_mirror.h"
#include "linear/gla/cuda/host_views.h"
#include "linear/gla/planner.h"

namespace ak::linear::cuda {

namespace {

using namespace gla;

Decays decays_of(const ak_tensor* gk, const ak_tensor* g, const ak_tensor* gamma) {
  Decays d;
  d.gk = rows_in<float>(gk);
  if (g) d.g = {static_cast<const float*>(g->data), g->strides[0], g->strides[1], g->strides[2]};
  d.gamma = gamma ? static_cast<const float*>(gamma->data) : nullptr;
  return d;
}

// The planner's view of a call: dtype, sizes, decay policy, alignment of its token-major views.
gla_planning::GlaShape shape_of(const DeltaProblem& p, const GlaGates& gates, std::initializer_list<const ak_tensor*> rows,
                                const ak_tensor* gk) {
  gla_planning::GlaShape s;
  s.dtype = p.dtype;
  s.K = p.K;
  s.V = p.V;
  s.channel = gates.gk;
  s.recurrent = p.recurrent;
  for (const ak_tensor* t : rows) s.aligned = s.aligned && aligned_rows(t);
  s.aligned = s.aligned && aligned_rows(gk);
  s.huge = p.T > INT32_MAX / 2 || p.N > INT32_MAX / 2;
  s.N = p.N;
  s.H = p.H;
  return s;
}

gla_planning::GlaShape fwd_shape_of(const GlaFwd& a) {
  gla_planning::GlaShape s = shape_of(a.p, a.gates, {a.q, a.k, a.v, a.output}, a.gk);
  s.chunk_states = a.chunk_states != nullptr;
  s.normalize = a.normalize;
  return s;
}

// The split forward: the prep kernel's per-chunk operands (params.h, ChunkOperands), then the pass.
template <class T>
void chunked_fwd(const GlaFwd& a, const gla_planning::GlaChoice& plan, cudaStream_t stream) {
  const DeltaProblem& p = a.p;
  ChunkTables tables(p, kChunk, stream, "chunked gated linear attention");
  SplitParams<T> sp;
  sp.f = forward_params<T>(p, tables, a.q, a.k, a.v, a.output, a.initial_state, a.final_state);
  sp.f.d = decays_of(a.gk, a.g, a.g_gamma);
  sp.f.states = {f32(a.chunk_states), static_cast<int>(p.H), static_cast<int>(p.K), static_cast<int>(p.V)};
  sp.chunks = tables.chunks;
  ChunkOperands<T>& ops = sp.ops;
  ops.H = sp.f.H;
  ops.KD = plan.kd;
  const size_t slots = static_cast<size_t>(sp.chunks) * ops.H;
  const size_t rows_k = static_cast<size_t>(kChunk) * ops.KD;
  const size_t el_bytes = (slots * ops.KD * sizeof(float) + 255) / 256 * 256;
  const size_t per_slot = 2 * rows_k + static_cast<size_t>(kChunk) * kChunk;
  ak::cuda::Scratch scratch(p.device_index, el_bytes + std::max<size_t>(1, slots * per_slot) * sizeof(T));
  ops.el = scratch.as<float>();
  ops.kd = reinterpret_cast<T*>(reinterpret_cast<unsigned char*>(ops.el) + el_bytes);
  ops.qd = ops.kd + slots * rows_k;
  ops.p = ops.qd + slots * rows_k;
  ak::cuda::launch_row<T>(plan.prep_row, "linear.gla.prep", sp, stream);
  ak::cuda::launch_row<T>(plan.pass_row, "linear.gla.pass", sp, stream);
}

// The delta rule's split state kernel run for the scalar-decay family (pass_row): each chunk's cumulated
// gates, then the state pass reading q, k and v where they are (TMA boxes on fixed-length calls, cp.async
// on packed ones), writing the output (normalised in the kernel with AK_GLA_NORMALIZE, each row's
// 1 / normaliser into `inv_den` when it is not null) and the final states. Output null: the states alone
// (the backward's recompute), stored as 16-bit [H][chunks][K][V] into `save` when it is not null.
template <class T>
void run_state_split(const DeltaProblem& p, const ChunkTables& tables, int pass_row, const ak_tensor* gk,
                     const ak_tensor* g, const ak_tensor* gamma, const ak_tensor* q, const ak_tensor* k,
                     const ak_tensor* v, const ak_tensor* output, const float* initial_state, float* final_state,
                     double normalize_eps, T* save, cudaStream_t stream, float* inv_den = nullptr) {
  const int H = static_cast<int>(p.H);
  ak::cuda::Scratch scratch(p.device_index, std::max<size_t>(1, static_cast<size_t>(tables.chunks) * H * kChunk) * 4);
  float* gc = scratch.as<float>();
  if (tables.chunks > 0) {
    const dim3 grid(static_cast<unsigned>(tables.chunks), static_cast<unsigned>(H));
    gla_chunk_gates_kernel<<<grid, 32, 0, stream>>>(decays_of(gk, g, gamma), tables.map, gc, H);
    ak::cuda::check_launch("gla_chunk_gates_kernel");
  }
  fwd::StateArgs<T> sa;
  fwd::StateParams<T>& sp = sa.p;
  sp.q = rows_in<T>(q);
  sp.k = rows_in<T>(k);
  sp.v = rows_in<T>(v);
  if (output) sp.o = rows_out<T>(output);
  sp.gc = gc;
  sp.initial_state = initial_state;
  sp.final_state = final_state;
  sp.map = tables.map;
  sp.N = static_cast<int>(p.N);
  sp.H = H;
  sp.group = static_cast<int>(p.group());
  sp.scale = static_cast<float>(p.scale);
  sp.norm_eps = static_cast<float>(normalize_eps);
  sp.inv_den = inv_den;
  fwd::SplitMaps maps;
  if (!p.varlen) {
    ak::cuda::encode_token_rows_map(maps.q, *q, 64, "linear attention q");
    ak::cuda::encode_token_rows_map(maps.k, *k, 64, "linear attention k");
    ak::cuda::encode_token_rows_map(maps.u, *v, 64, "linear attention v");
    sa.maps = &maps;
  }
  fwd::SaveMaps save_maps{};
  if (save != nullptr && tables.chunks > 0) {
    const int dtype = std::is_same_v<T, __half> ? AK_FLOAT16 : AK_BFLOAT16;
    const int64_t D = p.K;
    ak::cuda::encode_rows_map(save_maps.hs, dtype, save, D, H * static_cast<int64_t>(tables.chunks) * D, 1, 1, D,
                              0, 0, static_cast<int>(D), "linear attention chunk states");
    sa.save = &save_maps;
    sp.save_chunks = tables.chunks;
  }
  ak::cuda::launch_row<T>(pass_row, "linear.gla.pass", sa, stream);
}

// The forward on it (planner: state_split).
template <class T>
void state_split_fwd(const GlaFwd& a, const gla_planning::GlaChoice& plan, cudaStream_t stream) {
  ChunkTables tables(a.p, kChunk, stream, "chunked gated linear attention");
  run_state_split<T>(a.p, tables, plan.pass_row, a.gk, a.g, a.g_gamma, a.q, a.k, a.v, a.output,
                     f32(a.initial_state), f32(a.final_state), a.normalize_eps, nullptr, stream);
}

// A contiguous tensor [B, T, heads, W] (or [B, T, heads] with W = 0) over `data`, on t's device.
ak_tensor contiguous_rows(void* data, int32_t dtype, const ak_tensor& like, int64_t B, int64_t T, int64_t heads,
                     int64_t W) {
  ak_tensor v = like;
  v.data = data;
  v.dtype = dtype;
  v.rank = W > 0 ? 4 : 3;
  const int64_t shape[4] = {B, T, heads, W};
  for (int i = 0; i < v.rank; ++i) v.shape[i] = shape[i];
  set_contiguous_strides(v);
  return v;
}

template <class T>
void chunked_bwd(const GlaBwd& a, const gla_planning::GlaChoice& plan, cudaStream_t stream) {
  const DeltaProblem& p = a.p;
  ChunkTables tables(p, kChunk, stream, "chunked gated linear attention");
  const int N = static_cast<int>(p.N), H = static_cast<int>(p.H), K = static_cast<int>(p.K);
  const int V = static_cast<int>(p.V), HK = static_cast<int>(p.HK), group = static_cast<int>(p.group());
  const int chunks = tables.chunks;
  const bool channel = a.gates.gk;
  const int W = channel ? K : 1;
  const size_t slots = (static_cast<size_t>(chunks) + N) * H * K * V;
  const size_t finals = static_cast<size_t>(N) * H * K * V;
  const bool normalised = a.normalize;  // planned only with the split state kernel's recompute
  const size_t ws = group > 1 ? static_cast<size_t>(p.B) * p.T * HK * K : 0;
  const bool recompute = a.chunk_states == nullptr;
  // Normalised: the scans' key and query sums per chunk, 1 / D and dD per token (fp32), the recomputed
  // output and dO / D (16-bit, [B, T, H, V]).
  const size_t norm_f32 =
      normalised ? static_cast<size_t>(chunks) * (HK + H) * K + 2 * static_cast<size_t>(p.B) * p.T * H : 0;
  const size_t rows_v = normalised ? static_cast<size_t>(p.B) * p.T * H * V : 0;
  // fp32: the final states (recomputed), grouped heads' dq and dk sums, per-chunk sums of the decays'
  // gradient; 16-bit: the states before and the state gradients after every chunk.
  const size_t f32_count = (recompute ? finals : 0) + 2 * ws + static_cast<size_t>(chunks) * H * W + norm_f32 + 64;
  const size_t f32_bytes = (f32_count * sizeof(float) + 255) / 256 * 256;
  ak::cuda::Scratch scratch(p.device_index, f32_bytes + (2 * slots + 2 * rows_v) * sizeof(T) + 256);
  float* f = scratch.as<float>();
  float* finals_buf = recompute ? f : nullptr;
  float* ws_dq = group > 1 ? f + (recompute ? finals : 0) : nullptr;
  float* ws_dk = group > 1 ? ws_dq + ws : nullptr;
  float* sums = f + (recompute ? finals : 0) + 2 * ws;
  float* norm_sums = sums + static_cast<size_t>(chunks) * H * W;
  float* norm_inv_den = normalised ? norm_sums + static_cast<size_t>(chunks) * (HK + H) * K : nullptr;
  T* states = reinterpret_cast<T*>(reinterpret_cast<unsigned char*>(f) + f32_bytes);
  T* dstates = states + slots;
  T* out_rows = dstates + slots;  // normalised: the recomputed output, then dO / D
  T* dnum_rows = out_rows + rows_v;
  const ak_tensor out_view = contiguous_rows(out_rows, p.dtype, *a.q, p.B, p.T, H, V);
  if (group > 1) AK_CUDA_CHECK(cudaMemsetAsync(ws_dq, 0, 2 * ws * sizeof(float), stream));

  const Decays d = decays_of(a.gk, a.g, a.g_gamma);
  FinalStates final_states;
  const bool split_states = recompute && plan.state_split;  // stored by head (Slots::by_head)
  if (split_states) {
    // The split state kernel, its output not stored: the states before every chunk as [H][chunks][K][V].
    // Normalised: the normalised output formed as well (the normaliser's gradient reads it).
    run_state_split<T>(p, tables, plan.pass_row, a.gk, a.g, a.g_gamma, a.q, a.k, a.v, normalised ? &out_view : nullptr,
                       f32(a.initial_state), finals_buf, a.normalize_eps, states, stream, norm_inv_den);
    final_states = {finals_buf, static_cast<int64_t>(H) * K * V};
  } else if (recompute) {
    FwdParams<T> fp;
    fp.q = rows_in<T>(a.q);
    fp.k = rows_in<T>(a.k);
    fp.v = rows_in<T>(a.v);
    fp.d = d;
    fp.map = tables.map;
    fp.initial_state = f32(a.initial_state);
    fp.final_state = finals_buf;
    fp.states16 = {states, H, K, V};
    fp.N = N, fp.H = H, fp.group = group, fp.K = K, fp.V = V;
    fp.scale = static_cast<float>(p.scale);
    ak::cuda::launch_row<T>(plan.states_row, "linear.gla.states", fp, stream);
    final_states = {finals_buf, static_cast<int64_t>(H) * K * V};
  } else {
    // The forward's chunk states (fixed length: [B, NT + 1, H, K, V]) as the 16-bit slots.
    const unsigned blocks = static_cast<unsigned>(std::min<size_t>((slots + 255) / 256, 65535));
    gla_cast_states_kernel<T><<<blocks, 256, 0, stream>>>(f32(a.chunk_states), states, static_cast<int64_t>(slots));
    ak::cuda::check_launch("gla_cast_states_kernel");
    const int64_t NT = (p.T + kChunk - 1) / kChunk;
    final_states = {f32(a.chunk_states) + NT * H * K * V, (NT + 1) * H * K * V};
  }
  BwdParams<T> bp;
  bp.q = rows_in<T>(a.q);
  bp.k = rows_in<T>(a.k);
  bp.v = rows_in<T>(a.v);
  bp.dout = rows_in<T>(a.d_output);
  if (normalised) {
    NormaliserParams<T> np;
    np.q = rows_in<T>(a.q);
    np.k = rows_in<T>(a.k);
    np.dout = bp.dout;
    np.o = rows_in<T>(&out_view);
    const ak_tensor dnum_view = contiguous_rows(dnum_rows, p.dtype, *a.q, p.B, p.T, H, V);
    np.dnum = rows_out<T>(&dnum_view);
    np.map = tables.map;
    np.key_sums = norm_sums;
    np.query_sums = norm_sums + static_cast<size_t>(chunks) * HK * K;
    np.inv_den = norm_inv_den;
    np.dd = norm_inv_den + static_cast<size_t>(p.B) * p.T * H;
    np.H = H, np.HK = HK, np.group = group, np.K = K, np.V = V;
    np.scale = static_cast<float>(p.scale);
    launch_normaliser<T>(np, chunks, N, stream);
    bp.dout = rows_in<T>(&dnum_view);
    bp.norm_dd = np.dd;
    bp.norm_z = np.key_sums;
    bp.norm_q = np.query_sums;
  }
  bp.dq = rows_out<T>(a.dq);
  bp.dk = rows_out<T>(a.dk);
  bp.dv = rows_out<T>(a.dv);
  bp.ws_dq = ws_dq;
  bp.ws_dk = ws_dk;
  bp.d = d;
  bp.map = tables.map;
  bp.states = {states, H, K, V, split_states ? chunks : 0};
  bp.dstates = {dstates, H, K, V};
  bp.final_states = final_states;
  bp.d_final_state = f32(a.d_final_state);
  bp.d_initial_state = f32(a.d_initial_state);
  const ak_tensor* dG = channel ? a.dgk : (a.g || a.g_gamma) ? a.dg : nullptr;
  if (dG) bp.dG = {f32(dG), dG->strides[0], dG->strides[1], dG->strides[2]};
  bp.chunk_sums = sums;
  bp.N = N, bp.H = H, bp.group = group, bp.K = K, bp.V = V, bp.chunks = chunks;
  bp.scale = static_cast<float>(p.scale);
  ak::cuda::launch_row<T>(plan.dstates_row, "linear.gla.dstates", bp, stream);
  ak::cuda::launch_row<T>(plan.grads_row, "linear.gla.grads", bp, stream);
  if (group > 1 && ws > 0) {
    const unsigned blocks = static_cast<unsigned>(std::min<size_t>((ws + 255) / 256, 65535));
    const int B = static_cast<int>(p.B), T_ = static_cast<int>(p.T);
    gla_convert_rows_kernel<T><<<blocks, 256, 0, stream>>>(ws_dq, bp.dq, B, T_, HK, K);
    gla_convert_rows_kernel<T><<<blocks, 256, 0, stream>>>(ws_dk, bp.dk, B, T_, HK, K);
    ak::cuda::check_launch("gla_convert_rows_kernel");
  }
  if (dG && chunks > 0) {
    const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(H));
    gla_chunk_sums_kernel<float><<<grid, 128, 0, stream>>>(bp.dG, tables.map, sums, H, W);
    gla_dgates_kernel<<<grid, 128, 0, stream>>>(bp.dG, tables.map, sums, final_states, bp.d_final_state, H, W, K, V);
    ak::cuda::check_launch("gla_dgates_kernel");
  }
  // Tokens past the last packed sequence get zero gradients.
  const UncoveredTail tail = uncovered_tail(p);
  if (tail.any) {
    const int T_ = static_cast<int>(p.T), t0 = tail.first;
    const int32_t* at = tail.first_at;
    gla_zero_rows_kernel<T><<<64, 256, 0, stream>>>(bp.dq, t0, at, T_, HK, K);
    gla_zero_rows_kernel<T><<<64, 256, 0, stream>>>(bp.dk, t0, at, T_, HK, K);
    gla_zero_rows_kernel<T><<<64, 256, 0, stream>>>(bp.dv, t0, at, T_, H, V);
    if (dG) gla_zero_rows_kernel<float><<<64, 256, 0, stream>>>(bp.dG, t0, at, T_, H, W);
    ak::cuda::check_launch("gla_zero_rows_kernel");
  }
}

// Columns [first, first + width) of the last dim of t (a view with t's strides); null stays null.
ak_tensor last_dim_view(const ak_tensor* t, int64_t first, int64_t width) {
  ak_tensor v = *t;
  v.data = static_cast<unsigned char*>(t->data) + first * t->strides[t->rank - 1] * dtype_size(t->dtype);
  v.shape[t->rank - 1] = width;
  return v;
}

// Key columns [first, first + width) of `rows` contiguous fp32 states [.., K, V], copied between the
// whole call's states and a piece's [.., width, V] (gather: whole -> piece; else piece -> whole).
void copy_state_columns(float* whole, float* piece, int64_t rows, int64_t K, int64_t V, int64_t first,
                        int64_t width, bool gather, cudaStream_t stream) {
  if (rows == 0) return;
  const size_t piece_row = static_cast<size_t>(width * V) * sizeof(float);
  const size_t whole_row = static_cast<size_t>(K * V) * sizeof(float);
  float* at = whole + first * V;
  AK_CUDA_CHECK(gather ? cudaMemcpy2DAsync(piece, piece_row, at, whole_row, piece_row, rows,
                                           cudaMemcpyDeviceToDevice, stream)
                       : cudaMemcpy2DAsync(at, whole_row, piece, piece_row, piece_row, rows,
                                           cudaMemcpyDeviceToDevice, stream));
}

// The backward at K above the chunk kernels' (planner: key_pieces): one chunked backward per piece of key
// columns, on views of q, k, gk and their gradients, with each piece's columns of the states gathered
// (and of the initial state's gradient scattered back); dv, and a per-token decay's gradient, are the
// sums over the pieces (fp32, rounded once).
template <class T>
void chunked_bwd_by_key_pieces(const GlaBwd& a, const gla_planning::GlaShape& shape, int pieces,
                               const registry::Caps& caps, cudaStream_t stream) {
  const DeltaProblem& p = a.p;
  const int64_t K = p.K, V = p.V, width = gla_planning::key_piece_width(K);
  std::vector<gla_planning::GlaChoice> plans;
  for (int i = 0; i < pieces; ++i) {
    gla_planning::GlaShape s = shape;
    s.K = std::min(width, K - i * width);
    plans.push_back(gla_planning::plan_gla_bwd(s, caps));
    require(plans.back().chunked, "gla backward: a key piece has no chunked plan");
  }
  const int64_t NT = (p.T + kChunk - 1) / kChunk;
  const int64_t state_rows = p.N * p.H, chunk_rows = a.chunk_states ? p.B * (NT + 1) * p.H : 0;
  const int64_t dv_count = p.B * p.T * p.H * V, dg_count = a.dg ? p.B * p.T * p.H : 0;
  const int64_t piece_state = state_rows * width * V;
  // fp32: dv's sum, a piece's dg, initial state, final state's gradient, initial state's gradient,
  // chunk states; then a piece's dv in T.
  const int64_t f32_count = dv_count + dg_count + 3 * piece_state + chunk_rows * width * V;
  const size_t f32_bytes = (static_cast<size_t>(f32_count) * sizeof(float) + 255) / 256 * 256;
  ak::cuda::Scratch scratch(p.device_index, f32_bytes + static_cast<size_t>(dv_count) * sizeof(T) + 256);
  float* dv_sum = scratch.as<float>();
  float* dg_piece = dv_sum + dv_count;
  float* h0 = dg_piece + dg_count;
  float* dht = h0 + piece_state;
  float* dh0 = dht + piece_state;
  float* chunk_states = dh0 + piece_state;
  T* dv_piece = reinterpret_cast<T*>(reinterpret_cast<unsigned char*>(dv_sum) + f32_bytes);
  const ak_tensor dv_rows = contiguous_rows(dv_piece, p.dtype, *a.q, p.B, p.T, p.H, V);
  const ak_tensor dg_rows = contiguous_rows(dg_piece, AK_FLOAT32, *a.q, p.B, p.T, p.H, 0);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((dv_count + 255) / 256, 65535));
  for (int i = 0; i < pieces; ++i) {
    const int64_t first = i * width, w = std::min(width, K - first);
    const ak_tensor q = last_dim_view(a.q, first, w), k = last_dim_view(a.k, first, w);
    const ak_tensor dq = last_dim_view(a.dq, first, w), dk = last_dim_view(a.dk, first, w);
    ak_tensor gk, dgk, h0_t, dht_t, dh0_t, chunks_t;
    GlaBwd b = a;
    b.p.K = w;
    b.q = &q, b.k = &k, b.dq = &dq, b.dk = &dk, b.dv = &dv_rows;
    if (a.gk) gk = last_dim_view(a.gk, first, w), dgk = last_dim_view(a.dgk, first, w), b.gk = &gk, b.dgk = &dgk;
    if (a.dg && i > 0) b.dg = &dg_rows;
    const auto piece_of = [&](const ak_tensor* whole, float* buf, ak_tensor& view, int64_t rows, bool gather) {
      if (whole == nullptr) return static_cast<const ak_tensor*>(nullptr);
      view = *whole;
      view.data = buf;
      view.shape[whole->rank - 2] = w;
      int64_t stride = 1;
      for (int d = whole->rank - 1; d >= 0; --d) view.strides[d] = stride, stride *= view.shape[d];
      if (gather) copy_state_columns(f32(whole), buf, rows, K, V, first, w, true, stream);
      return static_cast<const ak_tensor*>(&view);
    };
    b.initial_state = piece_of(a.initial_state, h0, h0_t, state_rows, true);
    b.d_final_state = piece_of(a.d_final_state, dht, dht_t, state_rows, true);
    b.d_initial_state = piece_of(a.d_initial_state, dh0, dh0_t, state_rows, false);
    b.chunk_states = piece_of(a.chunk_states, chunk_states, chunks_t, chunk_rows, true);
    chunked_bwd<T>(b, plans[i], stream);
    gla_accumulate_kernel<T><<<blocks, 256, 0, stream>>>(dv_sum, dv_piece, dv_count, i == 0);
    if (b.dg == &dg_rows) {
      const unsigned dg_blocks = static_cast<unsigned>(std::min<int64_t>((dg_count + 255) / 256, 65535));
      gla_add_scalars_kernel<float><<<dg_blocks, 256, 0, stream>>>(rows_out<float>(a.dg), dg_piece,
                                                                   static_cast<int>(p.B), static_cast<int>(p.T),
                                                                   static_cast<int>(p.H));
    }
    ak::cuda::check_launch("gla key pieces' sums");
    if (a.d_initial_state) copy_state_columns(f32(a.d_initial_state), dh0, state_rows, K, V, first, w, false, stream);
  }
  gla_convert_rows_kernel<T><<<blocks, 256, 0, stream>>>(dv_sum, rows_out<T>(a.dv), static_cast<int>(p.B),
                                                         static_cast<int>(p.T), static_cast<int>(p.H),
                                                         static_cast<int>(V));
  ak::cuda::check_launch("gla_convert_rows_kernel");
}

// The general path: the CPU backend on host copies (inputs read, the written part of each output
// copied back).
void general_fwd(const GlaFwd& a) {
  HostMirror m;
  GlaFwd h = a;
  h.p.device_type = AK_CPU;
  h.q = m.input(a.q), h.k = m.input(a.k), h.v = m.input(a.v);
  h.gk = m.input(a.gk), h.g = m.input(a.g), h.g_gamma = m.input(a.g_gamma);
  h.initial_state = m.input(a.initial_state);
  // A packed call leaves the rows past its last offset as they are (and has no chunk_states).
  h.output = m.output(a.output, token_rows(a.p.varlen, a.p.seq_start)), h.final_state = m.output(a.final_state);
  h.chunk_states = m.output(a.chunk_states);
  h.p.cu_seqlens = m.input(a.p.cu_seqlens);
  ak::linear::cpu::gla_fwd(h);
  m.write_back();
}

void general_bwd(const GlaBwd& a) {
  HostMirror m;
  GlaBwd h = a;
  h.p.device_type = AK_CPU;
  h.q = m.input(a.q), h.k = m.input(a.k), h.v = m.input(a.v);
  h.gk = m.input(a.gk), h.g = m.input(a.g), h.g_gamma = m.input(a.g_gamma);
  h.initial_state = m.input(a.initial_state);
  h.chunk_states = m.input(a.chunk_states);
  h.d_output = m.input(a.d_output), h.d_final_state = m.input(a.d_final_state);
  // Every gradient element is written (tokens past a packed call's last offset get zeros).
  h.dq = m.output(a.dq), h.dk = m.output(a.dk), h.dv = m.output(a.dv);
  h.dgk = m.output(a.dgk), h.dg = m.output(a.dg);
  h.d_initial_state = m.output(a.d_initial_state);
  h.p.cu_seqlens = m.input(a.p.cu_seqlens);
  ak::linear::cpu::gla_bwd(h);
  m.write_back();
}

}  // namespace

void gla_fwd(const GlaFwd& a) {
  const DeltaProblem& p = a.p;
  ak::cuda::DeviceGuard guard(p.device_index);
  cudaStream_t stream = ak::cuda::stream(p.device_index);
  const gla_planning::GlaChoice plan =
      gla_planning::plan_gla_fwd(fwd_shape_of(a), ak::cuda::caps(p.device_index));
  plan::set_last(plan.plan);
  if (!plan.chunked) return general_fwd(a);
  if (plan.state_split) {
    if (p.dtype == AK_BFLOAT16) return state_split_fwd<__nv_bfloat16>(a, plan, stream);
    return state_split_fwd<__half>(a, plan, stream);
  }
  if (p.dtype == AK_BFLOAT16) return chunked_fwd<__nv_bfloat16>(a, plan, stream);
  return chunked_fwd<__half>(a, plan, stream);
}

void gla_bwd(const GlaBwd& a) {
  const DeltaProblem& p = a.p;
  ak::cuda::DeviceGuard guard(p.device_index);
  cudaStream_t stream = ak::cuda::stream(p.device_index);
  gla_planning::GlaShape shape = shape_of(p, a.gates, {a.q, a.k, a.v, a.d_output, a.dq, a.dk, a.dv}, a.gk);
  shape.chunk_states = a.chunk_states != nullptr;
  shape.normalize = a.normalize;
  const gla_planning::GlaChoice plan = gla_planning::plan_gla_bwd(shape, ak::cuda::caps(p.device_index));
  plan::set_last(plan.plan);
  if (!plan.chunked) return general_bwd(a);
  if (plan.key_pieces > 1) {
    const registry::Caps caps = ak::cuda::caps(p.device_index);
    if (p.dtype == AK_BFLOAT16) return chunked_bwd_by_key_pieces<__nv_bfloat16>(a, shape, plan.key_pieces, caps, stream);
    return chunked_bwd_by_key_pieces<__half>(a, shape, plan.key_pieces, caps, stream);
  }
  if (p.dtype == AK_BFLOAT16) return chunked_bwd<__nv_bfloat16>(a, plan, stream);
  return chunked_bwd<__half>(a, plan, stream);
}

void gla_decode(const GlaDecode& a) {
  const DeltaProblem& p = a.p;
  ak::cuda::DeviceGuard guard(p.device_index);
  cudaStream_t stream = ak::cuda::stream(p.device_index);
  int row = -1;
  plan::set_last(gla_planning::plan_gla_decode(p.dtype, ak::cuda::caps(p.device_index), row));
  auto run = [&](auto zero) {
    using T = decltype(zero);
    DecodeParams<T> d;
    d.q = static_cast<const T*>(a.q->data), d.qb = a.q->strides[0], d.qh = a.q->strides[1];
    d.k = static_cast<const T*>(a.k->data), d.kb = a.k->strides[0], d.kh = a.k->strides[1];
    d.v = static_cast<const T*>(a.v->data), d.vb = a.v->strides[0], d.vh = a.v->strides[1];
    if (a.gk) d.gk = f32(a.gk), d.gkb = a.gk->strides[0], d.gkh = a.gk->strides[1];
    if (a.g) d.g = f32(a.g), d.gb = a.g->strides[0], d.gh = a.g->strides[1];
    d.gamma = f32(a.g_gamma);
    d.state = f32(a.state);
    d.new_state = f32(a.new_state);
    d.o = static_cast<T*>(a.output->data), d.ob = a.output->strides[0], d.oh = a.output->strides[1];
    d.B = static_cast<int>(p.B), d.H = static_cast<int>(p.H), d.group = static_cast<int>(p.group());
    d.K = static_cast<int>(p.K), d.V = static_cast<int>(p.V);
    d.scale = static_cast<float>(p.scale);
    ak::cuda::launch_row<T>(row, "linear.gla.decode", d, stream);
  };
  if (p.dtype == AK_BFLOAT16) return run(__nv_bfloat16{});
  if (p.dtype == AK_FLOAT16) return run(__half{});
  run(0.f);
}

}  // namespace ak::linear::cuda
