// Decode on tiles: one step of the (gated) delta rule per sequence and head, bound by the state's bytes.
// A four-warp block owns a K x C slice of one (sequence, head) state S (K x V), C = 8192 / K value
// columns, and copies it into shared memory with cp.async, so the bytes in flight cost no registers and
// several blocks an SM keep its loads going while others compute (the paged decode's bulk tiles, the
// same reason). While the copy lands the block reads q, k, v and the norms. Then thread (column quad c,
// row group g) works on columns 4c .. 4c + 3 of rows g, g + RG, ... (a warp reads whole rows of the tile):
//   a = S^T k, b = S^T q    (summed over a warp's row groups by shuffles, then over the warps in shared
//                            memory)
//   u = beta (v - e^g a),  o = scale (e^g b + (q . k) u),  S' = e^g S + k u^T
// and writes its rows of S' four values a streaming store. A block reads its whole tile before writing,
// and tiles do not overlap, so new_state may be the state itself.
#pragma once

#include <type_traits>

#include "cuda/runtime.cuh"
#include "generated/linear_launchers.h"
#include "linear/common/l2norm.cuh"
#include "linear/delta/decode_shared.cuh"
#include "linear/delta/fwd/params.h"

namespace ak::linear::cuda::fwd {

using namespace ::ak::arch;

constexpr int kTileValues = 8192;  // state elements a block holds
constexpr int kTileThreads = 128;

template <class T, class S, int K>
__global__ void __launch_bounds__(kTileThreads) decode_tile_kernel(const DecodeParams<T, S> p, int slices) {
  constexpr int C = kTileValues / K;          // value columns a block: 128, 64, 32
  constexpr int CQ = C / 4;                   // column quads
  constexpr int RG = kTileThreads / CQ;       // row groups
  constexpr int kWarps = kTileThreads / 32;
  constexpr int kChunk = 16 / sizeof(S);      // elements of one 16-byte copy
  constexpr int kChunksPerRow = C / kChunk;
  static_assert(CQ * RG == kTileThreads && K % RG == 0 && C % kChunk == 0 && C <= kTileThreads && CQ <= 32,
                "tile shape");
  __shared__ __align__(16) S tile[K * C];
  __shared__ float qs[K], ks[K], vs[C];
  __shared__ __align__(16) float us[C];
  __shared__ __align__(16) float partial[2][kWarps][C];
  __shared__ float norms[3];

  const int b = blockIdx.x / slices, slice = blockIdx.x - b * slices;
  const int h = blockIdx.y, hk = h / p.group;
  const int tid = threadIdx.x, cq = tid % CQ, rg = tid / CQ;
  const int c0 = slice * C;  // the block's first value column
  const int64_t state_off = (static_cast<int64_t>(b) * p.H + h) * K * p.V;

  // 1. The tile, every copy in flight at once (chunks past V read nothing and fill zeros).
  for (int i = tid; i < K * kChunksPerRow; i += kTileThreads) {
    const int r = i / kChunksPerRow, cc = (i - r * kChunksPerRow) * kChunk;
    const bool in = c0 + cc < p.V;
    const S* src = p.state + state_off + static_cast<int64_t>(r) * p.V + (in ? c0 + cc : 0);
    cp_async16(&tile[r * C + cc], src, in ? 16 : 0);
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
    const QkSums sums = qk_sums(qs, ks, K, tid);
    if (tid == 0) norms[0] = sums.kk, norms[1] = sums.qq, norms[2] = sums.qk;
  }
  cp_async_wait_all();
  __syncthreads();

  // 3. This thread's partial sums of S^T k and S^T q over its rows, four columns at a time.
  float a[4] = {}, bq[4] = {};
#pragma unroll
  for (int r = rg; r < K; r += RG) {
    float s[4];
    smem_quad(&tile[r * C + 4 * cq], s);
    const float kr = ks[r], qr = qs[r];
#pragma unroll
    for (int j = 0; j < 4; ++j) a[j] = fmaf(kr, s[j], a[j]), bq[j] = fmaf(qr, s[j], bq[j]);
  }
  // A warp's row groups first (lanes CQ apart), then the warps through shared memory.
#pragma unroll
  for (int m = CQ; m < 32; m <<= 1) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      a[j] += __shfl_xor_sync(0xffffffffu, a[j], m);
      bq[j] += __shfl_xor_sync(0xffffffffu, bq[j], m);
    }
  }
  const int warp = tid >> 5;
  if ((tid & 31) < CQ) {
    *reinterpret_cast<float4*>(&partial[0][warp][4 * cq]) = make_float4(a[0], a[1], a[2], a[3]);
    *reinterpret_cast<float4*>(&partial[1][warp][4 * cq]) = make_float4(bq[0], bq[1], bq[2], bq[3]);
  }
  __syncthreads();

  // 4. The warps' sums, u and the output, a thread a column.
  const float rk = p.l2norm ? rsqrtf(norms[0] + kL2NormEps) : 1.f;
  const float rq = p.l2norm ? rsqrtf(norms[1] + kL2NormEps) : 1.f;
  const float decay = p.g ? expf(p.g[b * p.g_sb + h * p.g_sh]) : 1.f;
  if (tid < C) {
    float ta = 0.f, tb = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) ta += partial[0][w][tid], tb += partial[1][w][tid];
    const float beta = p.beta[b * p.beta_sb + h * p.beta_sh];
    const float u = beta * (vs[tid] - decay * rk * ta);
    us[tid] = u;
    if (c0 + tid < p.V) {
      p.o[b * p.o_sb + h * p.o_sh + c0 + tid] = from_float<T>(p.scale * (decay * rq * tb + norms[2] * rq * rk * u));
    }
  }
  __syncthreads();

  // 5. The update of this thread's rows, written where they were read (four columns a store).
  if (c0 + 4 * cq >= p.V) return;
  const float4 u4 = *reinterpret_cast<const float4*>(&us[4 * cq]);
  const float u[4] = {u4.x, u4.y, u4.z, u4.w};
  S* dst = p.new_state + state_off + c0 + 4 * cq;
#pragma unroll
  for (int r = rg; r < K; r += RG) {
    float s[4];
    smem_quad(&tile[r * C + 4 * cq], s);
    const float kh = ks[r] * rk;
#pragma unroll
    for (int j = 0; j < 4; ++j) s[j] = fmaf(kh, u[j], decay * s[j]);
    Quad<S>::store(dst + static_cast<int64_t>(r) * p.V, s);
  }
}

template <class T, class S, int K>
void launch_decode_tile(const DecodeParams<T, S>& p, cudaStream_t stream) {
  if (p.B == 0 || p.H == 0) return;
  constexpr int C = kTileValues / K;
  if (p.K != K || !decode_rows_aligned(p.state, p.new_state, p.V, sizeof(S))) {
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
