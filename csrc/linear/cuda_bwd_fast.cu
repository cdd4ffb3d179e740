// The tensor-core path of the delta-rule backward: when it applies, its workspace, and the order of
// its stages (prep, states, dstates, grads, then the group reduction when q/k heads are shared or
// L2-normalised in the kernel). States and dstates optionally run as segments (context parallelism,
// ATTNKIT_LINEAR_BWD_CP; cuda_bwd_segments.cuh).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "../cuda/runtime.cuh"
#include "cuda_bwd_elem.cuh"
#include "cuda_bwd_fast.cuh"
#include "cuda_bwd_segments.cuh"
#include "cuda_bwd_variants.h"
#include "saved_layout.h"

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
// 16-byte pieces of rows for the outputs (the gradient stage's stores).
bool rows16(const OutView& v) { return aligned(v.p, 16) && v.sb % 8 == 0 && v.st % 8 == 0 && v.sh % 8 == 0; }

size_t round_up(size_t x) { return (x + 255) / 256 * 256; }

// ---- segments (context parallelism) of the sequential stages ----

// Modelled time (us) of one pass of a sequential stage: `chains` independent chains (sequence x head
// x job) of `steps` chunks each, on the best slice width: the waves of blocks (blocks resident per SM:
// states 2 at D = 128, 4 at D = 64; dstates v2 1 and 2, from their shared memory) times the step,
// or the bytes at the device bandwidth if slower. Bytes per chunk and chain: the tiles read (states:
// w, k, u; dstates: k, w, and q, P, dO unless the chain is a transition run) and, for the chains that
// write outputs, h / dh and v_new / dv_new.
double pass_us(bool dstates, int D, int64_t chains, double steps, double out_frac, double tr_frac, int sms) {
  const double tile = 64.0 * D * 2, state = static_cast<double>(D) * D * 2;
  const double full = dstates ? 4 * tile + 64.0 * 64 * 2 : 3 * tile;  // reads of a chain with inputs
  const double bare = 2 * tile;                                       // reads of a transition chain
  const double per_chain = (1 - tr_frac) * full + tr_frac * bare + out_frac * (state + tile);
  const double bytes_us = per_chain * static_cast<double>(chains) / 3.5e6;  // ~3.5 TB/s, per step
  const int64_t res = dstates ? (D == 128 ? 1 : 2) : (D == 128 ? 2 : 4);
  double best = 1e300;
  for (int vs = dstates ? D : 64; vs >= 32; vs /= 2) {
    best = std::min(best, seg_waves_us(dstates, D, chains, vs, res, sms));
  }
  return steps * std::max(best, bytes_us);
}

// Both sequential stages (states and dstates v2) with P segments (P = 1: the plain run), in us.
double sequential_us(int P, int D, int64_t units, double chunks, int sms) {
  double total = 0;
  for (bool dstates : {false, true}) {
    if (P == 1) {
      total += pass_us(dstates, D, units, chunks, 1, 0, sms);
      continue;
    }
    const double steps = std::ceil(chunks / P);
    const int jobs1 = seg_jobs(1, P), jobs2 = seg_jobs(2, P);
    total += pass_us(dstates, D, units * jobs1, steps, 1.0 / jobs1, (P - 2.0) / jobs1, sms);
    total += pass_us(dstates, D, units * jobs2, steps, 1, 0, sms);
    total += 5 + 8.0 * (P - 2) * D / 128 * D / 128;  // the combine: launch + one D x D product per step
  }
  return total;
}

// Segments of the sequential stages: ATTNKIT_LINEAR_BWD_CP off (1), forced, or automatic: the P of
// 3 .. 16 (at least 4 chunks per segment) the model above rates fastest, if it beats the plain run
// by 10%. Varlen calls are rated by their mean sequence length.
int plan_segments(const Problem& p, int asked, int D, int device) {
  if (asked >= 2) return asked;
  if (asked == 0 || p.N == 0 || p.H == 0) return 1;
  const int sms = ak::cuda::props(device).multiProcessorCount;
  const double chunks = p.map.seq != nullptr ? static_cast<double>(p.NCt) / p.N : p.map.nc_fixed;
  const int64_t units = static_cast<int64_t>(p.N) * p.H;
  int best_p = 1;
  double best = 0.9 * sequential_us(1, D, units, chunks, sms);
  for (int P = 3; P <= 16 && chunks / P >= 4; ++P) {
    const double t = sequential_us(P, D, units, chunks, sms);
    if (t < best) best = t, best_p = P;
  }
  return best_p;
}

template <class T, int D>
void run_typed(const Problem& p0, cudaStream_t s, int device) {
  require(static_cast<int64_t>(p0.NCt) * p0.H < (int64_t{1} << 31),
          "delta_rule_bwd on CUDA: too many chunks x heads for one call");
  Problem p = p0;
  const int64_t P = p.padded();
  const int64_t H = p.H;
  const Variants var = read_variants();
  // Group 1 with the L2 norm: grads applies the norm's backward and writes dq, dk itself (not the
  // two gradient kernels of D = 256).
  constexpr bool kD256 = D == 256;
  const bool fused_l2 = p.group == 1 && p.l2norm && var.fused_l2 && !kD256;
  const bool direct = p.group == 1 && (!p.l2norm || fused_l2);
  const int64_t batch_rows = p.map.seq != nullptr ? 1 : p.N;
  const int64_t qk_rows = batch_rows * p.map.T * p.HK;
  const size_t e = sizeof(T);
  // States, v_new, A and w saved by the forward (saved_layout.h): no states stage, and prep computes
  // only gc and P.
  const bool from_saved = p.saved != nullptr;
  const SavedParts<T> saved(static_cast<T*>(const_cast<void*>(p.saved)), H, p.NCt, D, D);
  // Segments of states and dstates (1: the plain runs): fp32 D x D summaries per sequence, head and
  // segment boundary.
  const int segs = var.runs(Stage::States) && !from_saved && !kD256 ? plan_segments(p, var.cp, D, device) : 1;
  const size_t seg_state = segs > 1 ? static_cast<size_t>(p.N) * H * (segs - 1) * D * D * sizeof(float) : 0;
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
      round_up(seg_state),                                    // segments: N_j
      round_up(seg_state),                                    // segments: M_j
      round_up(seg_state),                                    // segments: entry states E_j
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
  SegParams seg;
  seg.count = segs;
  seg.fwd = static_cast<float*>(part[14]);
  seg.tr = static_cast<float*>(part[15]);
  float* const entry = static_cast<float*>(part[16]);
  w.Xq = static_cast<float*>(part[17]);
  w.Xk = static_cast<float*>(part[18]);
  w.dA1 = static_cast<float*>(part[19]);
  w.tv = static_cast<float*>(part[20]);
  w.hd = static_cast<float*>(part[21]);
  w.dW = from_saved ? static_cast<T*>(part[22]) : w.W;
  seg.entry = entry;
  // Pass 1 (summaries; segment 0 writes its outputs), the combine, pass 2 (the other segments'
  // outputs); the summaries' scratch serves both stages, one after the other on the stream.
  auto segmented = [&](auto&& launch_pass) {
    seg.pass = 1;
    launch_pass(seg);
    fwd::launch_segment_combine(seg.fwd, seg.tr, entry, p.N, p.H, D, segs - 1, s);
    seg.pass = 2;
    launch_pass(seg);
  };

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
  if (var.runs(Stage::Prep)) launch_fast_prep<T, D>(p_prep, w, var.prep_tc, from_saved, s);
  // The forward's states replace the states stage: grads reads h and v_new from them.
  FastWork<T> wg = w;
  if (from_saved) {
    wg.Hs = saved.hs;
    wg.U = saved.vs;
  }
  if (!from_saved && var.runs(Stage::States)) {
    if constexpr (kD256) {
      launch_fast_states<T, D>(p, w, var.vs, s);
    } else if (segs > 1) {
      segmented([&](const SegParams& sg) { launch_fast_states_seg<T, D>(p, w, var.vs, sg, s); });
    } else {
      launch_fast_states<T, D>(p, w, var.vs, s);
    }
  }
  if (var.runs(Stage::DStates)) {
    if constexpr (kD256) {  // v2 only, no segments
      launch_fast_dstates8<T, D>(p, w, var.dvs, s);
    } else if (var.dstates_v2 && segs > 1) {
      segmented([&](const SegParams& sg) { launch_fast_dstates8_seg<T, D>(p, w, var.dvs, sg, s); });
    } else if (var.dstates_v2) {
      launch_fast_dstates8<T, D>(p, w, var.dvs, s);
    } else {
      launch_fast_dstates<T, D>(p, w, var.vs, s);
    }
  }
  if (var.runs(Stage::Grads)) {
    if constexpr (kD256) {
      launch_fast_grads256<T>(p, wg, s);
    } else {
      launch_fast_grads<T, D>(p, wg, var.grads_persistent, var.grads_pipe, s);
    }
  }
  // The original q and k: the L2-norm backward needs the raw rows.
  if (!direct && var.runs(Stage::All)) launch_reduce_dqk(p0, w.dQh, w.dKh, s);
}

}  // namespace

bool fast_supported(const Problem& p, int device) {
  if (p.dtype != AK_BFLOAT16 && p.dtype != AK_FLOAT16) return false;
  if (p.K != p.V || (p.K != 64 && p.K != 128 && p.K != 256) || p.C != kFastC) return false;
  const cudaDeviceProp& props = ak::cuda::props(device);
  if (props.major < 8) return false;
  const size_t need = p.K == 64    ? fast_grads_smem<64>()
                      : p.K == 128 ? fast_grads_smem<128>()
                                   : fast_grads256_smem_v();  // the largest stage at D = 256
  if (props.sharedMemPerBlockOptin < need) return false;
  if (!p.l2norm && (!rows16(p.q) || !rows16(p.k))) return false;
  if (!rows16(p.v) || !rows16(p.dout)) return false;
  return rows16(p.dq) && rows16(p.dk) && rows16(p.dv);
}

void run_fast(const Problem& p, cudaStream_t stream, int device) {
  if (p.dtype == AK_BFLOAT16) {
    if (p.K == 64) {
      run_typed<__nv_bfloat16, 64>(p, stream, device);
    } else if (p.K == 128) {
      run_typed<__nv_bfloat16, 128>(p, stream, device);
    } else {
      run_typed<__nv_bfloat16, 256>(p, stream, device);
    }
  } else {
    if (p.K == 64) {
      run_typed<__half, 64>(p, stream, device);
    } else if (p.K == 128) {
      run_typed<__half, 128>(p, stream, device);
    } else {
      run_typed<__half, 256>(p, stream, device);
    }
  }
}

}  // namespace ak::linear::cuda::bwd
