// Decode on tiles: one step of the (gated) delta rule per sequence and head, bound by the state's bytes.
// A four-warp block owns a K x C slice of one (sequence, head) state S (K x V), C = 8192 / K value
// columns, and copies it into shared memory with cp.async, so the bytes in flight cost no registers and
// several blocks an SM keep its loads going while others compute (the paged decode's bulk tiles, the
// same reason). While the copy lands the block reads q, k, v and the norms. Then thread (column c, row
// group g) sums its rows g, g + G, ... (interleaved, so a warp's half-groups hit different banks):
//   a = S^T k, b = S^T q    (the G groups' partial sums meet in shared memory)
//   u = beta (v - e^g a),  o = scale (e^g b + (q . k) u),  S' = e^g S + k u^T
// and writes its rows of S' with streaming stores. A block reads its whole tile before writing, and
// tiles do not overlap, so new_state may be the state itself.
#pragma once

#include <type_traits>

#include "cuda/runtime.cuh"
#include "generated/linear_launchers.h"
#include "linear/common/l2norm.cuh"
#include "linear/delta/fwd/params.h"

namespace ak::linear::cuda::fwd {

using namespace ::ak::arch;

constexpr int kTileValues = 8192;  // state elements a block holds
constexpr int kTileThreads = 128;

template <class T, class S, int K>
__global__ void __launch_bounds__(kTileThreads) decode_tile_kernel(const DecodeParams<T, S> p, int slices) {
  constexpr int C = kTileValues / K;          // value columns a block: 128, 64, 32
  constexpr int G = kTileThreads / C;         // row groups
  constexpr int kChunk = 16 / sizeof(S);      // elements of one 16-byte copy
  constexpr int kChunksPerRow = C / kChunk;
  static_assert(C * G == kTileThreads && K % G == 0 && C % kChunk == 0, "tile shape");
  __shared__ __align__(16) S tile[K * C];
  __shared__ float qs[K], ks[K], vs[C], us[C];
  __shared__ float partial[2][G][C];
  __shared__ float norms[3];

  const int b = blockIdx.x / slices, slice = blockIdx.x - b * slices;
  const int h = blockIdx.y, hk = h / p.group;
  const int tid = threadIdx.x, col = tid % C, grp = tid / C;
  const int c0 = slice * C;  // the block's first value column
  const int64_t state_off = (static_cast<int64_t>(b) * p.H + h) * K * p.V;

  // 1. The tile, every copy in flight at once (chunks past V read nothing and fill zeros).
  for (int i = tid; i < K * kChunksPerRow; i += kTileThreads) {
    const int r = i / kChunksPerRow, cc = (i - r * kChunksPerRow) * kChunk;
    const bool in = c0 + cc < p.V;
    cp_async16(&tile[r * C + cc], p.state + state_off + static_cast<int64_t>(r) * p.V + (in ? c0 + cc : 0), in ? 16 : 0);
  }
  cp_async_commit();

  // 2. This token's q, k and v slice; the norms and q . k by warp 0 while the copy lands.
  const T* q = p.q + b * p.q_sb + hk * p.q_sh;
  const T* k = p.k + b * p.k_sb + hk * p.k_sh;
  for (int e = tid; e < K; e += kTileThreads) {
    qs[e] = to_float(q[e]);
    ks[e] = to_float(k[e]);
  }
  for (int e = tid; e < C; e += kTileThreads) {
    const int c = c0 + e;
    vs[e] = c < p.V ? to_float(p.v[b * p.v_sb + h * p.v_sh + c]) : 0.f;
  }
  __syncthreads();
  if (tid < 32) {
    float kk = 0.f, qq = 0.f, qk = 0.f;
#pragma unroll
    for (int d = tid; d < K; d += 32) {
      kk = fmaf(ks[d], ks[d], kk);
      qq = fmaf(qs[d], qs[d], qq);
      qk = fmaf(qs[d], ks[d], qk);
    }
    kk = warp_sum(kk), qq = warp_sum(qq), qk = warp_sum(qk);
    if (tid == 0) norms[0] = kk, norms[1] = qq, norms[2] = qk;
  }
  cp_async_wait_all();
  __syncthreads();

  // 3. This thread's partial sums of S^T k and S^T q over its rows.
  float a = 0.f, bq = 0.f;
#pragma unroll 16
  for (int r = grp; r < K; r += G) {
    const float s = to_float(tile[r * C + col]);
    a = fmaf(ks[r], s, a);
    bq = fmaf(qs[r], s, bq);
  }
  partial[0][grp][col] = a;
  partial[1][grp][col] = bq;
  __syncthreads();

  // 4. The groups' sums, u and the output, by the first group.
  const float rk = p.l2norm ? rsqrtf(norms[0] + kL2NormEps) : 1.f;
  const float rq = p.l2norm ? rsqrtf(norms[1] + kL2NormEps) : 1.f;
  const float decay = p.g ? expf(p.g[b * p.g_sb + h * p.g_sh]) : 1.f;
  if (grp == 0) {
    float ta = 0.f, tb = 0.f;
#pragma unroll
    for (int g = 0; g < G; ++g) ta += partial[0][g][col], tb += partial[1][g][col];
    const float beta = p.beta[b * p.beta_sb + h * p.beta_sh];
    const float u = beta * (vs[col] - decay * rk * ta);
    us[col] = u;
    if (c0 + col < p.V) {
      p.o[b * p.o_sb + h * p.o_sh + c0 + col] = from_float<T>(p.scale * (decay * rq * tb + norms[2] * rq * rk * u));
    }
  }
  __syncthreads();

  // 5. The update of this thread's rows, written where they were read.
  if (c0 + col >= p.V) return;
  const float u = us[col];
  S* dst = p.new_state + state_off + c0 + col;
#pragma unroll 16
  for (int r = grp; r < K; r += G) {
    const float s = fmaf(ks[r] * rk, u, decay * to_float(tile[r * C + col]));
    __stcs(dst + static_cast<int64_t>(r) * p.V, from_float<S>(s));
  }
}

template <class T, class S, int K>
void launch_decode_tile(const DecodeParams<T, S>& p, cudaStream_t stream) {
  if (p.B == 0 || p.H == 0) return;
  constexpr int C = kTileValues / K;
  if (p.K != K || reinterpret_cast<uintptr_t>(p.state) % 16 != 0 || (p.V * sizeof(S)) % 16 != 0) {
    fail(AK_ERR_INTERNAL, "decode_tile_kernel: the planner sent a call it does not serve");
  }
  const int slices = (p.V + C - 1) / C;
  const int64_t blocks = static_cast<int64_t>(p.B) * slices;
  if (blocks >= (int64_t{1} << 31)) fail(AK_ERR_UNSUPPORTED, "delta_rule_decode: too many state tiles for one launch");
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(p.H));
  decode_tile_kernel<T, S, K><<<grid, kTileThreads, 0, stream>>>(p, slices);
  ak::cuda::check_launch("decode_tile_kernel");
}

}  // namespace ak::linear::cuda::fwd

namespace ak::linear::cuda {

template <class T, int D, int Tile>
void DecodeTile<T, D, Tile>::launch(const Args& a, cudaStream_t stream) {
  if (a.state_f32 || std::is_same_v<T, float>) return fwd::launch_decode_tile<T, float, D>(a.p, stream);
  fwd::launch_decode_tile<T, T, D>(fwd::state_in_input_dtype(a.p), stream);
}

}  // namespace ak::linear::cuda
