// The tensor-core path of the delta-rule backward as the planner chose it: its workspace, and the
// order of its stages (prep, states unless the forward saved them, dstates, grads, then the group
// reduction when q/k heads are shared or L2-normalised in the kernel).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cuda/registry_launch.h"
#include "cuda/runtime.cuh"
#include "linear/delta/bwd/fast.cuh"
#include "generated/linear_launchers.h"
#include "linear/planner.h"
#include "linear/saved_layout.h"

namespace ak::linear::cuda::bwd {
namespace {

// q and k normalised once into contiguous [B, T, HK, D] copies that the stages read like inputs;
// 1 / |x| per row too when the gradient stage applies the norm's backward itself (rinv not null).
template <class T, int D>
__global__ void __launch_bounds__(256) l2norm_rows(RowView src, int T_, int HK, int64_t rows, T* dst, float* rinv) {
  constexpr int E = D / 32;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * 8 + warp;
  if (r >= rows) return;
  const int hk = static_cast<int>(r % HK);
  const int64_t bt = r / HK;
  const int t = static_cast<int>(bt % T_);
  const int64_t b = bt / T_;
  const T* x = static_cast<const T*>(src.p) + src.offset(b, t, hk);
  float v[E];
  float ss = 0.f;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    v[e] = to_float(x[lane + 32 * e]);
    ss += v[e] * v[e];
  }
  const float rs = rsqrtf(warp_sum(ss) + kL2NormEps);
#pragma unroll
  for (int e = 0; e < E; ++e) dst[r * D + lane + 32 * e] = from_float<T>(v[e] * rs);
  if (rinv != nullptr && lane == 0) rinv[r] = rs;
}

size_t round_up(size_t x) { return (x + 255) / 256 * 256; }

template <class T, int D>
void run_typed(const Problem& p0, const planning::BwdChoice& plan, cudaStream_t s, int device) {
  require(static_cast<int64_t>(p0.NCt) * p0.H < (int64_t{1} << 31),
          "delta_rule_bwd on CUDA: too many chunks x heads for one call");
  Problem p = p0;
  const int64_t P = p.padded();
  const int64_t H = p.H;
  constexpr bool kD256 = D == 256;
  const bool fused_l2 = plan.fused_l2;
  const bool direct = p.group == 1 && (!p.l2norm || fused_l2);
  const int64_t batch_rows = p.map.seq != nullptr ? 1 : p.N;
  const int64_t qk_rows = batch_rows * p.map.T * p.HK;
  const size_t e = sizeof(T);
  // States, v_new, A and w saved by the forward (saved_layout.h): no states stage, and prep computes
  // only gc and P.
  const bool from_saved = p.saved != nullptr;
  const SavedParts<T> saved(static_cast<T*>(const_cast<void*>(p.saved)), H, p.NCt, D, D);
  const size_t sizes[] = {
      round_up(H * P * sizeof(float)),                        // gc
      round_up(from_saved ? 0 : H * P * kFastC * e),          // A
      round_up(H * P * kFastC * e),                           // P
      round_up(from_saved ? 0 : H * P * D * e),               // W
      round_up(from_saved ? 0 : H * P * D * e),               // U
      round_up(H * P * D * e),                                // dU
      round_up(from_saved ? 0 : H * p.NCt * D * D * e),       // Hs
      round_up(H * p.NCt * D * D * e),                        // dHs
      round_up(direct ? 0 : H * P * D * sizeof(float)),       // dQh
      round_up(direct ? 0 : H * P * D * sizeof(float)),       // dKh
      round_up(p.l2norm ? qk_rows * D * e : 0),               // normalised q
      round_up(p.l2norm ? qk_rows * D * e : 0),               // normalised k
      round_up(fused_l2 ? qk_rows * sizeof(float) : 0),       // 1 / |q|
      round_up(fused_l2 ? qk_rows * sizeof(float) : 0),       // 1 / |k|
      round_up(kD256 ? H * P * D * sizeof(float) : 0),        // D 256: Xq
      round_up(kD256 ? H * P * D * sizeof(float) : 0),        // D 256: Xk
      round_up(kD256 ? H * P * kFastC * sizeof(float) : 0),   // D 256: dA1
      round_up(kD256 ? H * P * sizeof(float) : 0),            // D 256: tv
      round_up(kD256 ? H * p.NCt * sizeof(float) : 0),        // D 256: hd
      round_up(kD256 && from_saved ? H * P * D * e : 0),      // D 256: dw (else over W)
  };
  size_t total = 0;
  for (size_t b : sizes) total += b;
  ak::cuda::Scratch scratch(device, total);
  char* base = scratch.as<char>();
  constexpr int kParts = sizeof(sizes) / sizeof(sizes[0]);
  void* part[kParts];
  for (int i = 0; i < kParts; ++i) {
    part[i] = sizes[i] ? base : nullptr;
    base += sizes[i];
  }
  FastWork<T> w;
  w.gc = static_cast<float*>(part[0]);
  w.A = from_saved ? saved.a : static_cast<T*>(part[1]);
  w.P = static_cast<T*>(part[2]);
  w.W = from_saved ? saved.w : static_cast<T*>(part[3]);
  w.U = static_cast<T*>(part[4]);
  w.dU = static_cast<T*>(part[5]);
  w.Hs = static_cast<T*>(part[6]);
  w.dHs = static_cast<T*>(part[7]);
  w.dQh = static_cast<float*>(part[8]);
  w.dKh = static_cast<float*>(part[9]);
  w.rq = static_cast<float*>(part[12]);
  w.rk = static_cast<float*>(part[13]);
  w.Xq = static_cast<float*>(part[14]);
  w.Xk = static_cast<float*>(part[15]);
  w.dA1 = static_cast<float*>(part[16]);
  w.tv = static_cast<float*>(part[17]);
  w.hd = static_cast<float*>(part[18]);
  w.dW = from_saved ? static_cast<T*>(part[19]) : w.W;

  // With the L2 norm, prep normalises q and k as it loads them (16-byte rows); otherwise a separate
  // kernel does before it.
  Problem p_prep = p;
  if (p.l2norm && qk_rows > 0) {
    T* qn = static_cast<T*>(part[10]);
    T* kn = static_cast<T*>(part[11]);
    const int64_t st = static_cast<int64_t>(p.HK) * D;
    if (plan.l2_in_prep) {
      w.qn_out = OutView{qn, st * p.map.T, st, D};
      w.kn_out = OutView{kn, st * p.map.T, st, D};
      w.rq_out = static_cast<float*>(part[12]);
      w.rk_out = static_cast<float*>(part[13]);
    } else {
      const unsigned blocks = ak::cuda::ceil_div(qk_rows, 8);
      l2norm_rows<T, D><<<blocks, 256, 0, s>>>(p.q, p.map.T, p.HK, qk_rows, qn, static_cast<float*>(part[12]));
      l2norm_rows<T, D><<<blocks, 256, 0, s>>>(p.k, p.map.T, p.HK, qk_rows, kn, static_cast<float*>(part[13]));
      ak::cuda::check_launch("delta_bwd fast: l2norm");
    }
    p.q = RowView{qn, st * p.map.T, st, D};
    p.k = RowView{kn, st * p.map.T, st, D};
    if (!plan.l2_in_prep) p_prep = p;
  }
  ak::cuda::launch_row<T>(plan.prep_row, "linear.bwd.prep", StageArgs<T>{p_prep, w, from_saved}, s);
  // The forward's states replace the states stage: grads reads h and v_new from them.
  FastWork<T> wg = w;
  if (from_saved) {
    wg.Hs = saved.hs;
    wg.U = saved.vs;
  } else {
    ak::cuda::launch_row<T>(plan.states_row, "linear.bwd.states", StageArgs<T>{p, w, false}, s);
  }
  ak::cuda::launch_row<T>(plan.dstates_row, "linear.bwd.dstates", StageArgs<T>{p, w, false}, s);
  ak::cuda::launch_row<T>(plan.grads_row, "linear.bwd.grads", StageArgs<T>{p, wg, false}, s);
  // The original q and k: the L2-norm backward needs the raw rows.
  if (!direct) launch_reduce_dqk(p0, w.dQh, w.dKh, s);
}

}  // namespace

void run_fast(const Problem& p, const planning::BwdChoice& plan, cudaStream_t stream, int device) {
  auto by_dim = [&](auto type) {
    using T = decltype(type);
    if (p.K == 64) return run_typed<T, 64>(p, plan, stream, device);
    if (p.K == 128) return run_typed<T, 128>(p, plan, stream, device);
    run_typed<T, 256>(p, plan, stream, device);
  };
  if (p.dtype == AK_BFLOAT16) return by_dim(__nv_bfloat16{});
  by_dim(__half{});
}

}  // namespace ak::linear::cuda::bwd
