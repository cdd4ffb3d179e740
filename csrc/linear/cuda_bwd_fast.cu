// The tensor-core path of the delta-rule backward: when it applies, its workspace, and the order of
// its stages (prep, states, dstates, grads, then the group reduction when q/k heads are shared or
// L2-normalised in the kernel).
#include <cstdint>

#include "../cuda/runtime.cuh"
#include "cuda_bwd_elem.cuh"
#include "cuda_bwd_fast.cuh"
#include "cuda_bwd_variants.h"

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
    v[e] = to_f(x[lane + 32 * e]);
    ss += v[e] * v[e];
  }
  const float rs = rsqrtf(warp_sum(ss) + kL2NormEps);
#pragma unroll
  for (int e = 0; e < E; ++e) dst[r * D + lane + 32 * e] = from_f<T>(v[e] * rs);
  if (rinv != nullptr && lane == 0) rinv[r] = rs;
}

bool aligned(const void* ptr, int64_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; }
// 16-byte rows for cp.async: pointer and every stride a multiple of 16 bytes (8 elements).
bool rows16(const RowView& v) {
  return aligned(v.p, 16) && v.sb % 8 == 0 && v.st % 8 == 0 && v.sh % 8 == 0;
}
// Pairs of elements for the outputs.
bool rows4(const OutView& v) { return aligned(v.p, 4) && v.sb % 2 == 0 && v.st % 2 == 0 && v.sh % 2 == 0; }

size_t round_up(size_t x) { return (x + 255) / 256 * 256; }

template <class T, int D>
void run_typed(const Problem& p0, cudaStream_t s, int device) {
  require(static_cast<int64_t>(p0.NCt) * p0.H < (int64_t{1} << 31),
          "delta_rule_bwd on CUDA: too many chunks x heads for one call");
  Problem p = p0;
  const int64_t P = p.padded();
  const int64_t H = p.H;
  const Variants var = read_variants();
  // Group 1 with the L2 norm: grads applies the norm's backward and writes dq, dk itself.
  const bool fused_l2 = p.group == 1 && p.l2norm && var.fused_l2;
  const bool direct = p.group == 1 && (!p.l2norm || fused_l2);
  const int64_t batch_rows = p.map.seq != nullptr ? 1 : p.N;
  const int64_t qk_rows = batch_rows * p.map.T * p.HK;
  const size_t e = sizeof(T);
  const size_t sizes[] = {
      round_up(H * P * sizeof(float)),                        // gc
      round_up(H * P * kFastC * e),                           // A
      round_up(H * P * kFastC * e),                           // P
      round_up(H * P * D * e),                                // W
      round_up(H * P * D * e),                                // U
      round_up(H * P * D * e),                                // dU
      round_up(H * p.NCt * D * D * e),                        // Hs
      round_up(H * p.NCt * D * D * e),                        // dHs
      round_up(direct ? 0 : H * P * D * sizeof(float)),       // dQh
      round_up(direct ? 0 : H * P * D * sizeof(float)),       // dKh
      round_up(p.l2norm ? qk_rows * D * e : 0),               // normalised q
      round_up(p.l2norm ? qk_rows * D * e : 0),               // normalised k
      round_up(fused_l2 ? qk_rows * sizeof(float) : 0),       // 1 / |q|
      round_up(fused_l2 ? qk_rows * sizeof(float) : 0),       // 1 / |k|
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
  w.A = static_cast<T*>(part[1]);
  w.P = static_cast<T*>(part[2]);
  w.W = static_cast<T*>(part[3]);
  w.U = static_cast<T*>(part[4]);
  w.dU = static_cast<T*>(part[5]);
  w.Hs = static_cast<T*>(part[6]);
  w.dHs = static_cast<T*>(part[7]);
  w.dQh = static_cast<float*>(part[8]);
  w.dKh = static_cast<float*>(part[9]);
  w.rq = static_cast<float*>(part[12]);
  w.rk = static_cast<float*>(part[13]);

  // With the L2 norm, prep (tensor-core version, 16-byte rows) normalises q and k as it loads them;
  // otherwise a separate kernel does before it.
  const bool l2_in_prep = p.l2norm && var.l2_in_prep && var.prep_tc && rows16(p.q) && rows16(p.k);
  Problem p_prep = p;
  if (p.l2norm && qk_rows > 0) {
    T* qn = static_cast<T*>(part[10]);
    T* kn = static_cast<T*>(part[11]);
    const int64_t st = static_cast<int64_t>(p.HK) * D;
    if (l2_in_prep) {
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
    if (!l2_in_prep) p_prep = p;
  }
  if (var.runs(Stage::Prep)) launch_fast_prep<T, D>(p_prep, w, var.prep_tc, s);
  if (var.runs(Stage::States)) launch_fast_states<T, D>(p, w, var.vs, s);
  if (var.runs(Stage::DStates)) {
    if (var.dstates_v2) {
      launch_fast_dstates8<T, D>(p, w, var.dvs, s);
    } else {
      launch_fast_dstates<T, D>(p, w, var.vs, s);
    }
  }
  if (var.runs(Stage::Grads)) launch_fast_grads<T, D>(p, w, var.grads_persistent, var.grads_pipe, s);
  // The original q and k: the L2-norm backward needs the raw rows.
  if (!direct && var.runs(Stage::All)) launch_reduce_dqk(p0, w.dQh, w.dKh, s);
}

}  // namespace

bool fast_supported(const Problem& p, int device) {
  if (p.dtype != AK_BFLOAT16 && p.dtype != AK_FLOAT16) return false;
  if (p.K != p.V || (p.K != 64 && p.K != 128) || p.C != kFastC) return false;
  const cudaDeviceProp& props = ak::cuda::props(device);
  if (props.major < 8) return false;
  const size_t need = p.K == 64 ? fast_grads_smem<64>() : fast_grads_smem<128>();
  if (props.sharedMemPerBlockOptin < need) return false;
  if (!p.l2norm && (!rows16(p.q) || !rows16(p.k))) return false;
  if (!rows16(p.v) || !rows16(p.dout)) return false;
  return rows4(p.dq) && rows4(p.dk) && rows4(p.dv);
}

void run_fast(const Problem& p, cudaStream_t stream, int device) {
  if (p.dtype == AK_BFLOAT16) {
    if (p.K == 64) {
      run_typed<__nv_bfloat16, 64>(p, stream, device);
    } else {
      run_typed<__nv_bfloat16, 128>(p, stream, device);
    }
  } else {
    if (p.K == 64) {
      run_typed<__half, 64>(p, stream, device);
    } else {
      run_typed<__half, 128>(p, stream, device);
    }
  }
}

}  // namespace ak::linear::cuda::bwd
