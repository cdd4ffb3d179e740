// Host emulator for the delta-rule backward kernels: one std::thread per CUDA thread, barriers for
// __syncthreads and for warp collectives (shuffles, ldmatrix, mma.sync emulated from the PTX fragment
// layouts). Runs the real kernel code (headers copied by prep.sh).
#define AK_BWD_EMULATE 1
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

using std::max;
using std::min;
inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }

namespace emu {
struct Warp {
  std::barrier<> bar{32};
  uint64_t slot[32][8];
};
thread_local uint3 t_tid, t_bid;
dim3 g_bdim, g_gdim;
thread_local Warp* t_warp;
thread_local int t_lane;
thread_local std::barrier<>* t_bar;
inline void sync() { t_bar->arrive_and_wait(); }
template <class V>
V shfl_xor(V v, int o) {
  Warp& w = *t_warp;
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(V));
  w.slot[t_lane][0] = b;
  w.bar.arrive_and_wait();
  V r;
  std::memcpy(&r, &w.slot[t_lane ^ o][0], sizeof(V));
  w.bar.arrive_and_wait();
  return r;
}
template <class V>
V shfl_up(V v, int o) {
  Warp& w = *t_warp;
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(V));
  w.slot[t_lane][0] = b;
  w.bar.arrive_and_wait();
  V r = v;
  if (t_lane >= o) std::memcpy(&r, &w.slot[t_lane - o][0], sizeof(V));
  w.bar.arrive_and_wait();
  return r;
}
}  // namespace emu

unsigned char* emu_dyn_smem = nullptr;

#undef __global__
#define __global__
#undef __launch_bounds__
#define __launch_bounds__(...)
#undef __shared__
#define __shared__ static
#define threadIdx emu::t_tid
#define blockIdx emu::t_bid
#define blockDim emu::g_bdim
#define gridDim emu::g_gdim
#define __syncthreads() emu::sync()
#define __shfl_xor_sync(m, v, o) emu::shfl_xor(v, o)
#define __shfl_up_sync(m, v, o) emu::shfl_up(v, o)

namespace ak::linear::cuda::bwd {
inline void ldsm_x4(uint32_t (&r)[4], const void* p) {
  emu::Warp& w = *emu::t_warp;
  const int l = emu::t_lane;
  w.slot[l][0] = reinterpret_cast<uint64_t>(p);
  w.bar.arrive_and_wait();
  for (int i = 0; i < 4; ++i) {
    const char* row = reinterpret_cast<const char*>(w.slot[8 * i + l / 4][0]);
    std::memcpy(&r[i], row + 4 * (l % 4), 4);
  }
  w.bar.arrive_and_wait();
}
inline void ldsm_x4_t(uint32_t (&r)[4], const void* p) {
  emu::Warp& w = *emu::t_warp;
  const int l = emu::t_lane;
  w.slot[l][0] = reinterpret_cast<uint64_t>(p);
  w.bar.arrive_and_wait();
  for (int i = 0; i < 4; ++i) {
    const char* r0 = reinterpret_cast<const char*>(w.slot[8 * i + 2 * (l % 4)][0]);
    const char* r1 = reinterpret_cast<const char*>(w.slot[8 * i + 2 * (l % 4) + 1][0]);
    uint16_t lo, hi;
    std::memcpy(&lo, r0 + 2 * (l / 4), 2);
    std::memcpy(&hi, r1 + 2 * (l / 4), 2);
    r[i] = lo | (static_cast<uint32_t>(hi) << 16);
  }
  w.bar.arrive_and_wait();
}
template <class T>
float half_of(uint64_t reg, int h) {
  uint16_t bits = static_cast<uint16_t>((reg >> (16 * h)) & 0xffff);
  T x;
  std::memcpy(&x, &bits, 2);
  return static_cast<float>(x);
}
template <class T>
void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  emu::Warp& w = *emu::t_warp;
  const int l = emu::t_lane;
  for (int i = 0; i < 4; ++i) w.slot[l][i] = a[i];
  w.slot[l][4] = b0;
  w.slot[l][5] = b1;
  w.bar.arrive_and_wait();
  const int g = l / 4, q = l % 4;
  float out[4];
  for (int r = 0; r < 4; ++r) {
    const int row = g + (r >= 2 ? 8 : 0), col = 2 * q + (r & 1);
    float acc = c[r];
    for (int k = 0; k < 16; ++k) {
      const int la = (row % 8) * 4 + (k % 8) / 2, ra = (row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
      const int lb = col * 4 + (k % 8) / 2, rb = k >= 8 ? 5 : 4;
      acc += half_of<T>(w.slot[la][ra], k % 2) * half_of<T>(w.slot[lb][rb], k % 2);
    }
    out[r] = acc;
  }
  w.bar.arrive_and_wait();
  for (int r = 0; r < 4; ++r) c[r] = out[r];
}
inline void cp_async16(void* s, const void* g) { std::memcpy(s, g, 16); }
inline void cp_async_commit() {}
template <int N>
inline void cp_async_wait() {}
}  // namespace ak::linear::cuda::bwd

#include "linear/cuda_bwd_fast_grads.cuh"
#include "linear/cuda_bwd_fast_grads256.cuh"
#include "linear/cuda_bwd_fast_prep.cuh"
#include "linear/cuda_bwd_fast_prep_tc.cuh"
#include "linear/cuda_bwd_fast_dstates8.cuh"
#include "linear/cuda_bwd_fast_states.cuh"
#include "linear/cuda_bwd_general.cuh"
#include "linear/cuda_bwd_reduce.cuh"

using namespace ak::linear::cuda::bwd;

// The context-parallel combine on the host (the GPU runs the forward's launch_segment_combine):
// E_1 = N_0, E_(j+1) = M_j E_j + N_j in fp32, per sequence-head, arrays as SegParams.
void host_segment_combine(const float* fwd, const float* tr, float* entry, int64_t NH, int D, int Pm) {
  const int64_t DD = int64_t(D) * D;
  for (int64_t nh = 0; nh < NH; ++nh) {
    const int64_t base = nh * Pm * DD;
    std::copy(fwd + base, fwd + base + DD, entry + base);
    for (int j = 1; j < Pm; ++j) {
      const float* m = tr + base + (j - 1) * DD;
      const float* e = entry + base + (j - 1) * DD;
      float* out = entry + base + j * DD;
      for (int r = 0; r < D; ++r)
        for (int c = 0; c < D; ++c) {
          float acc = fwd[base + j * DD + r * D + c];
          for (int k = 0; k < D; ++k) acc = std::fma(m[r * D + k], e[k * D + c], acc);
          out[r * D + c] = acc;
        }
    }
  }
}

template <class F>
void launch(dim3 grid, int threads, size_t smem, F&& kernel) {
  emu::g_bdim = dim3(threads, 1, 1);
  emu::g_gdim = grid;
  std::vector<unsigned char> buf(smem + 64);
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        std::memset(buf.data(), 0xff, buf.size());  // NaN in every float type
        emu_dyn_smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(buf.data()) + 15) & ~uintptr_t{15});
        std::barrier<> bar(threads);
        std::vector<std::unique_ptr<emu::Warp>> warps;
        for (int i = 0; i < threads / 32; ++i) warps.push_back(std::make_unique<emu::Warp>());
        std::vector<std::thread> ts;
        for (int t = 0; t < threads; ++t) {
          ts.emplace_back([&, t] {
            emu::t_tid = make_uint3(t, 0, 0);
            emu::t_bid = make_uint3(x, y, z);
            emu::t_warp = warps[t / 32].get();
            emu::t_lane = t % 32;
            emu::t_bar = &bar;
            kernel();
            emu::t_warp->bar.arrive_and_drop();
            bar.arrive_and_drop();
          });
        }
        for (auto& th : ts) th.join();
      }
}

void fail(int, const std::string& m) {
  std::fprintf(stderr, "%s\n", m.c_str());
  std::exit(1);
}

std::vector<float> read_f32(const std::string& path, size_t n) {
  std::vector<float> v(n);
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail(0, "cannot open " + path);
  if (std::fread(v.data(), 4, n, f) != n) fail(0, "short read " + path);
  std::fclose(f);
  return v;
}
void write_f32(const std::string& path, const std::vector<float>& v) {
  FILE* f = std::fopen(path.c_str(), "wb");
  std::fwrite(v.data(), 4, v.size(), f);
  std::fclose(f);
}

template <class T>
std::vector<T> to_t(const std::vector<float>& v) {
  std::vector<T> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = static_cast<T>(v[i]);
  return o;
}
template <class T>
std::vector<float> from_t(const std::vector<T>& v) {
  std::vector<float> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = static_cast<float>(v[i]);
  return o;
}

// argv: dir B T H HK K V C gated l2norm path(fast|general) dtype(bf16|f16|f32) N cu...
template <class T>
int run(int argc, char** argv) {
  const std::string dir = argv[1];
  const int B = std::atoi(argv[2]), T_ = std::atoi(argv[3]), H = std::atoi(argv[4]), HK = std::atoi(argv[5]);
  const int K = std::atoi(argv[6]), V = std::atoi(argv[7]), C = std::atoi(argv[8]);
  const bool gated = std::atoi(argv[9]), l2 = std::atoi(argv[10]);
  const std::string path = argv[11];
  const int N = std::atoi(argv[13]);
  std::vector<int> cu;
  for (int i = 0; i <= N && 14 + i < argc; ++i) cu.push_back(std::atoi(argv[14 + i]));
  const bool varlen = !cu.empty();

  auto q = to_t<T>(read_f32(dir + "/q.bin", size_t(B) * T_ * HK * K));
  auto k = to_t<T>(read_f32(dir + "/k.bin", size_t(B) * T_ * HK * K));
  auto v = to_t<T>(read_f32(dir + "/v.bin", size_t(B) * T_ * H * V));
  auto dO = to_t<T>(read_f32(dir + "/do.bin", size_t(B) * T_ * H * V));
  auto g = read_f32(dir + "/g.bin", size_t(B) * T_ * H);
  auto beta = read_f32(dir + "/beta.bin", size_t(B) * T_ * H);
  auto S0 = read_f32(dir + "/s0.bin", size_t(N) * H * K * V);
  auto dSf = read_f32(dir + "/dsf.bin", size_t(N) * H * K * V);
  std::vector<T> dq(q.size(), static_cast<T>(NAN)), dk(k.size(), static_cast<T>(NAN)),
      dv(v.size(), static_cast<T>(NAN));
  std::vector<float> dbeta(beta.size(), NAN), dg(g.size(), NAN), dS0(S0.size(), NAN);

  Problem p;
  p.N = N;
  p.H = H;
  p.HK = HK;
  p.group = H / HK;
  p.K = K;
  p.V = V;
  p.C = C;
  p.scale = 1.f / std::sqrt(float(K));
  p.gated = gated;
  p.l2norm = l2;
  p.dtype = sizeof(T) == 4 ? 0 : (std::is_same<T, __half>::value ? 2 : 3);
  auto rv = [&](const void* ptr, int heads, int D) {
    return RowView{ptr, int64_t(T_) * heads * D, int64_t(heads) * D, D};
  };
  auto ov = [&](void* ptr, int heads, int D) { return OutView{ptr, int64_t(T_) * heads * D, int64_t(heads) * D, D}; };
  p.q = rv(q.data(), HK, K);
  p.k = rv(k.data(), HK, K);
  p.v = rv(v.data(), H, V);
  p.dout = rv(dO.data(), H, V);
  p.g = gated ? rv(g.data(), H, 1) : RowView{};
  p.beta = rv(beta.data(), H, 1);
  p.initial_state = S0.data();
  p.d_final_state = dSf.data();
  p.dq = ov(dq.data(), HK, K);
  p.dk = ov(dk.data(), HK, K);
  p.dv = ov(dv.data(), H, V);
  p.dbeta = ov(dbeta.data(), H, 1);
  p.dg = gated ? ov(dg.data(), H, 1) : OutView{};
  p.d_initial_state = dS0.data();
  p.map.T = T_;
  p.map.C = C;
  std::vector<int4> seq, chunk;
  int covered = T_;
  if (varlen) {
    int first = 0;
    for (int n = 0; n < N; ++n) {
      seq.push_back(make_int4(0, cu[n], cu[n + 1], first));
      const int len = cu[n + 1] - cu[n];
      for (int c = 0; c * C < len; ++c) chunk.push_back(make_int4(0, cu[n] + c * C, min(C, len - c * C), n));
      first += (len + C - 1) / C;
    }
    p.NCt = first;
    p.map.seq = seq.data();
    p.map.chunk = chunk.data();
    covered = cu[N];
  } else {
    p.map.nc_fixed = (T_ + C - 1) / C;
    p.NCt = N * p.map.nc_fixed;
  }
  const int64_t P = p.padded();
  if (path == "general") {
    using namespace general_detail;
    const int64_t nk = int64_t(HK) * P * K, nv = int64_t(H) * P * V, nhk = int64_t(H) * P * K,
                  ns = int64_t(H) * p.NCt * K * V, nc = int64_t(H) * P * C, n1 = int64_t(H) * P;
    std::vector<float> ws(2 * nk + 4 * nv + 3 * nhk + 2 * ns + 2 * nc + 2 * n1, NAN);
    float* base = ws.data();
    auto take = [&](int64_t n) {
      float* r = base;
      base += n;
      return r;
    };
    GenWork w;
    w.Qp = take(nk);
    w.Kp = take(nk);
    w.Vp = take(nv);
    w.dOp = take(nv);
    w.U = take(nv);
    w.dU = take(nv);
    w.W = take(nhk);
    w.dQh = take(nhk);
    w.dKh = take(nhk);
    w.Hs = take(ns);
    w.dHs = take(ns);
    w.Ab = take(nc);
    w.Pb = take(nc);
    w.Gc = take(n1);
    w.Bp = take(n1);
    const unsigned rows = (P + kWarps - 1) / kWarps;
    launch(dim3(rows, HK), kThreads, 0, [&] { pack_rows<T>(p.q, K, p.map, P, w.Qp, p.l2norm); });
    launch(dim3(rows, HK), kThreads, 0, [&] { pack_rows<T>(p.k, K, p.map, P, w.Kp, p.l2norm); });
    launch(dim3(rows, H), kThreads, 0, [&] { pack_rows<T>(p.v, V, p.map, P, w.Vp, false); });
    launch(dim3(rows, H), kThreads, 0, [&] { pack_rows<T>(p.dout, V, p.map, P, w.dOp, false); });
    const dim3 sc((P + kThreads - 1) / kThreads, H);
    launch(sc, kThreads, 0, [&] { pack_scalars(p.gated ? p.g : RowView{}, p.map, P, w.Gc); });
    launch(sc, kThreads, 0, [&] { pack_scalars(p.beta, p.map, P, w.Bp); });
    launch(dim3(p.NCt, H), kThreads, (2 * C * C + 3 * C) * 4, [&] { prep(p, w); });
    const dim3 sq((V + kSlice - 1) / kSlice * N, H);
    launch(sq, kThreads, 0, [&] { states_fwd(p, w); });
    launch(sq, kThreads, 0, [&] { states_bwd(p, w); });
    launch(dim3(p.NCt, H), kThreads, (2 * C * C + 7 * C + kWarps) * 4, [&] { grads<T>(p, w); });
    if (K % 4 == 0)  // as the launcher: the vectorised kernel, warps striding over rows (few blocks here)
      launch(dim3(std::min<int64_t>((P * HK + 7) / 8, 3)), 256, 0, [&] { reduce_detail::reduce_dqk_vec<T>(p, w.dQh, w.dKh); });
    else
      launch(dim3(rows, HK), 256, 0, [&] { reduce_detail::reduce_dqk<T>(p, w.dQh, w.dKh); });
  } else if constexpr (!std::is_same<T, float>::value) {
    const int D = K;
    // EMU_REDUCE=separate: the reduce kernel after grads even for group 1 with the L2 norm.
    const bool fused_l2 = p.group == 1 && p.l2norm && K != 256 && !(getenv("EMU_REDUCE") && std::string(getenv("EMU_REDUCE")) == "separate");
    const bool direct = p.group == 1 && (!p.l2norm || fused_l2);
    std::vector<float> gc(H * P, NAN), dQh(direct ? 0 : H * P * D, NAN), dKh(direct ? 0 : H * P * D, NAN);
    std::vector<T> A(H * P * 64), Pm(H * P * 64), W(H * P * D), U(H * P * D), dU(H * P * D),
        Hs(int64_t(H) * p.NCt * D * D), dHs(int64_t(H) * p.NCt * D * D);
    FastWork<T> w;
    w.gc = gc.data();
    w.A = A.data();
    w.P = Pm.data();
    w.W = W.data();
    w.U = U.data();
    w.dU = dU.data();
    w.Hs = Hs.data();
    w.dHs = dHs.data();
    w.dQh = direct ? nullptr : dQh.data();
    w.dKh = direct ? nullptr : dKh.data();
    Problem pf = p;
    std::vector<T> qn, kn;
    std::vector<float> rq, rk;
    if (l2) {  // the fast path's normalised copies (same formula as its l2norm kernel)
      qn = q;
      kn = k;
      rq.resize(qn.size() / D);
      rk.resize(kn.size() / D);
      for (auto* x : {&qn, &kn})
        for (size_t r = 0; r < x->size() / D; ++r) {
          float ss = 0;
          for (int d = 0; d < D; ++d) ss += float((*x)[r * D + d]) * float((*x)[r * D + d]);
          const float rs = rsqrtf(ss + kL2NormEps);
          (x == &qn ? rq : rk)[r] = rs;
          for (int d = 0; d < D; ++d) (*x)[r * D + d] = static_cast<T>(float((*x)[r * D + d]) * rs);
        }
      if (fused_l2) {
        w.rq = rq.data();
        w.rk = rk.data();
      }
      pf.q = rv(qn.data(), HK, K);
      pf.k = rv(kn.data(), HK, K);
    }
    auto run_d = [&](auto dtag) {
      constexpr int DD = decltype(dtag)::value;
      // EMU_PREP=simt: the SIMT inverse; default the tensor-core one.
      const bool simt = getenv("EMU_PREP") && std::string(getenv("EMU_PREP")) == "simt";
      if (p.NCt > 0 && simt)
        launch(dim3(p.NCt, H), 128, prep_detail::prep_smem<DD>(), [&] { prep_detail::fast_prep<T, DD>(pf, w); });
      // With the L2 norm the tensor-core prep normalises q and k itself (EMU_L2=kernel: the copies made
      // above, as the separate normalising kernel): it reads the raw rows and overwrites the copies and
      // 1 / |x|, poisoned first so that a row it misses shows.
      const bool l2_prep = l2 && !(getenv("EMU_L2") && std::string(getenv("EMU_L2")) == "kernel");
      Problem pp = pf;
      if (l2_prep && !simt) {
        pp.q = rv(q.data(), HK, K);
        pp.k = rv(k.data(), HK, K);
        for (auto* x : {&qn, &kn}) std::fill(x->begin(), x->end(), static_cast<T>(NAN));
        for (auto* x : {&rq, &rk}) std::fill(x->begin(), x->end(), NAN);
        const int64_t st = int64_t(HK) * K;
        w.qn_out = OutView{qn.data(), st * p.map.T, st, K};
        w.kn_out = OutView{kn.data(), st * p.map.T, st, K};
        w.rq_out = fused_l2 ? rq.data() : nullptr;
        w.rk_out = fused_l2 ? rk.data() : nullptr;
      }
      if (p.NCt > 0 && !simt)
        launch(dim3(p.NCt, H), 256, prep_tc_detail::PrepTcLayout<DD>::kBytes,
               [&] { prep_tc_detail::fast_prep_tc<T, DD>(pp, w); });
      // EMU_SAVED=1: as with the forward's saved A and w: prep again computing only P and gc, over
      // poisoned copies of both.
      if (p.NCt > 0 && getenv("EMU_SAVED")) {
        std::fill(Pm.begin(), Pm.end(), static_cast<T>(NAN));
        std::fill(gc.begin(), gc.end(), NAN);
        launch(dim3(p.NCt, H), 256, prep_tc_detail::PrepTcLayout<DD>::kBytes,
               [&] { prep_tc_detail::fast_prep_tc<T, DD, true>(pp, w); });
      }
      // EMU_CP=P: states and dstates v2 as P segments (pass 1, combine, pass 2), with the per-chunk
      // states and v_new / dv_new poisoned first so that a chunk no pass writes shows as NaN.
      const int cp = getenv("EMU_CP") ? std::atoi(getenv("EMU_CP")) : 0;
      std::vector<float> seg_fwd, seg_tr, seg_entry;
      SegParams sg;
      if (cp >= 2) {
        const size_t n = size_t(N) * H * (cp - 1) * DD * DD;
        seg_fwd.assign(n, NAN);
        seg_tr.assign(n, NAN);
        seg_entry.assign(n, NAN);
        sg.count = cp;
        sg.fwd = seg_fwd.data();
        sg.tr = seg_tr.data();
        sg.entry = seg_entry.data();
        for (auto* x : {&Hs, &dHs, &dU}) std::fill(x->begin(), x->end(), static_cast<T>(NAN));
        std::fill(dS0.begin(), dS0.end(), NAN);
      }
      // Pass 1, the combine, pass 2 of one stage; `grid_x(jobs)` the blocks per head of a pass.
      auto segmented = [&](auto&& run_pass) {
        sg.pass = 1;
        run_pass(seg_jobs(1, cp));
        host_segment_combine(sg.fwd, sg.tr, seg_entry.data(), int64_t(N) * H, DD, cp - 1);
        sg.pass = 2;
        run_pass(seg_jobs(2, cp));
      };
      auto seq = [&](auto vtag) {
        constexpr int VS = decltype(vtag)::value;
        constexpr size_t smem = 2 * sizeof(states_detail::StatesBuf<T, DD, VS>) + sizeof(T) * DD * (VS + 8);
        if (p.NCt > 0 && cp >= 2)
          segmented([&](int jobs) {
            launch(dim3(DD / VS * N * jobs, H), 128, smem, [&] { states_detail::fast_states<T, DD, VS, true>(pf, w, sg); });
          });
        else if (p.NCt > 0)
          launch(dim3(DD / VS * N, H), 128, smem, [&] { states_detail::fast_states<T, DD, VS>(pf, w, SegParams{}); });
        constexpr int ST = VS == 32 ? 2 : 1;  // as the launcher
        // EMU_DSTATES=v1: the 4-warp version; default v2 with EMU_DVS columns (default D).
        if (getenv("EMU_DSTATES") && std::string(getenv("EMU_DSTATES")) == "v1")
          launch(dim3(DD / VS * N, H), 128, sizeof(states_detail::DStatesSmem<T, DD, VS, ST>),
                 [&] { states_detail::fast_dstates<T, DD, VS, ST>(pf, w); });
      };
      auto seq2 = [&](auto vtag) {
        constexpr int VS = decltype(vtag)::value;
        constexpr size_t smem = sizeof(dstates8_detail::Smem<T, DD, VS>);
        if (cp >= 2)
          segmented([&](int jobs) {
            launch(dim3(DD / VS * N * jobs, H), 256, smem, [&] { dstates8_detail::fast_dstates8<T, DD, VS, true>(pf, w, sg); });
          });
        else
          launch(dim3(DD / VS * N, H), 256, smem, [&] { dstates8_detail::fast_dstates8<T, DD, VS>(pf, w, SegParams{}); });
      };
      if (getenv("EMU_VS") && std::atoi(getenv("EMU_VS")) == 32) seq(std::integral_constant<int, 32>{});
      else seq(std::integral_constant<int, 64>{});
      if (!(getenv("EMU_DSTATES") && std::string(getenv("EMU_DSTATES")) == "v1")) {
        const int dvs = getenv("EMU_DVS") ? std::atoi(getenv("EMU_DVS")) : DD;
        if (dvs == 32) seq2(std::integral_constant<int, 32>{});
        else if (dvs == 64 || DD == 64) seq2(std::integral_constant<int, 64>{});
        else if constexpr (DD >= 128) seq2(std::integral_constant<int, 128>{});
      }
      if constexpr (DD == 256) {  // the two gradient kernels of D = 256, one block per item
        const unsigned items = p.NCt * H;
        std::vector<float> Xq(size_t(H) * P * DD, NAN), Xk(size_t(H) * P * DD, NAN), dA1(size_t(H) * P * 64, NAN),
            tv(size_t(H) * P, NAN), hd(size_t(H) * p.NCt, NAN);
        std::vector<T> dW(size_t(H) * P * DD, static_cast<T>(NAN));
        w.dW = dW.data();
        w.Xq = Xq.data();
        w.Xk = Xk.data();
        w.dA1 = dA1.data();
        w.tv = tv.data();
        w.hd = hd.data();
        if (p.NCt > 0) {
          launch(dim3(items), 256, fast_grads256_smem_v(), [&] { grads256_detail::grads256_v<T>(pf, w); });
          launch(dim3(items), 256, fast_grads256_smem_k(), [&] { grads256_detail::grads256_k<T>(pf, w); });
        }
      } else {
      // Persistent blocks, fewer than items so that each loops (EMU_BLOCKS, default 3); EMU_GRADS=persistent:
      // the round-2 kernel, default the pipelined one.
      const unsigned gblocks = min(p.NCt * H, getenv("EMU_BLOCKS") ? std::atoi(getenv("EMU_BLOCKS")) : 3);
      const bool old_grads = getenv("EMU_GRADS") && std::string(getenv("EMU_GRADS")) == "persistent";
      if (p.NCt > 0 && old_grads)
        launch(dim3(gblocks), 128 * grads_wc<DD>(), fast_grads_smem<DD, false>(), [&] { grads_detail::fast_grads<T, DD, false>(pf, w); });
      if (p.NCt > 0 && !old_grads)
        launch(dim3(gblocks), 128 * grads_wc<DD>(), fast_grads_smem<DD, true>(), [&] { grads_detail::fast_grads<T, DD, true>(pf, w); });
      }
    };
    if (D == 64) run_d(std::integral_constant<int, 64>{});
    else if (D == 128) run_d(std::integral_constant<int, 128>{});
    else run_d(std::integral_constant<int, 256>{});
    if (!direct) {
      launch(dim3(std::min<int64_t>((P * HK + 7) / 8, 3)), 256, 0, [&] { reduce_detail::reduce_dqk_vec<T>(p, w.dQh, w.dKh); });
    }
  }
  if (covered < T_) launch(dim3(T_ - covered), 256, 0, [&] { reduce_detail::zero_rows<T>(p, covered); });
  write_f32(dir + "/out_dq.bin", from_t(dq));
  write_f32(dir + "/out_dk.bin", from_t(dk));
  write_f32(dir + "/out_dv.bin", from_t(dv));
  write_f32(dir + "/out_dbeta.bin", dbeta);
  write_f32(dir + "/out_dg.bin", dg);
  write_f32(dir + "/out_ds0.bin", dS0);
  return 0;
}

int main(int argc, char** argv) {
  const std::string dt = argv[12];
  if (dt == "bf16") return run<__nv_bfloat16>(argc, argv);
  if (dt == "f16") return run<__half>(argc, argv);
  return run<float>(argc, argv);
}
