// CUDA backend of the delta-rule family: picks a kernel path for each call.
//
// Forward paths:
//   fast     the two-stage chunked forward on tensor cores (cuda_fwd_chunk_prep.cuh, then
//            cuda_fwd_chunk_state.cuh): bf16/f16, K = V in {64, 128, 256}, 16-byte aligned rows,
//            sm_80 or newer. Varlen, grouped heads, L2 norm, states, chunk_states, aw/au. It always
//            works in chunks of 64; a call with chunk size 32 or 128 (the same function, decomposed
//            differently) runs the same way unless it asks for chunk_states or aw/au.
//   general  everything else: the token-by-token recurrence in fp32 (cuda_fwd_recurrent.cuh), plus
//            the fp32 WY factors (cuda_fwd_wy_general.cuh) when aw/au are asked for. Chunked and
//            recurrent calls compute the same function; here the chunked one runs as the recurrence.
// ATTNKIT_LINEAR_PATH=general|fast|auto (default auto) forces a path; "fast" refuses calls it cannot
// serve instead of falling back, so a test run can tell the paths apart.
// ATTNKIT_LINEAR_FAST_STAGES=prep (timing only) stops the fast path after stage 1, leaving the
// outputs unwritten, so bench/linear_selfcheck.ts can time the two stages apart.
// Stage-2 variants (for measuring; bench/linear_variants.ts times them):
//   ATTNKIT_LINEAR_STATE_VARIANT=auto|mma|wgmma|split   auto: split at D = 128 and wgmma
//     (cuda_fwd_chunk_state_sm90.cuh) at D = 256 on compute capability 9.0, else mma.sync
//     (cuda_fwd_chunk_state.cuh); wgmma where it cannot run (D = 64, not sm_90) falls back to mma.
//     split: the wgmma kernel with the warpgroups split into the state chain and the output
//     (cuda_fwd_chunk_state_split.cuh), D = 128 (elsewhere as wgmma); the H200 run of 2026-11-30
//     measured it 10-20% faster than wgmma at D = 128 (bench/NOTES_linear.md, round 4).
//   ATTNKIT_LINEAR_STATE_BV=32|64|128   the V tile, when the chosen kernel has it for this D (mma:
//     D 64: 32/64, D 128: 32/64/128, D 256: 32/64; wgmma: D 128: 64/128, D 256: 64); else ignored.
//   ATTNKIT_LINEAR_SPLIT_OUTPUTS=1|2   split kernel at VT 64: output warpgroups (default 2, the
//     chunks of each parity on their own warpgroup; VT 128 always has one).
//   ATTNKIT_LINEAR_SPLIT_TMA=0   split kernel: load with cp.async also on fixed-length calls (default:
//     tensor maps / TMA there, cp.async on varlen calls).
//   ATTNKIT_LINEAR_SM90_E=regs   wgmma kernel, D = 128: the state update takes K^T from registers
//     (ldmatrix.trans) instead of reading it M-major from shared memory.
//   ATTNKIT_LINEAR_CP=off|auto|P   context-parallel stage 2 (wgmma kernel, no chunk_states): each
//     sequence cut into P segments, summarised in parallel, combined, then rerun for the output
//     (cuda_fwd_segments.cuh). Default auto: picks P (or none) from the block count; off disables it.
//   ATTNKIT_LINEAR_STEP_PROFILE=1   the wgmma kernel records clock64() per phase of a chunk step for
//     its first blocks; each stage-2 launch then synchronizes and prints mean cycles per phase and
//     step to stderr (timing runs should leave it off).
// delta_bwd lives in cuda_bwd.cu.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "../cuda/runtime.cuh"
#include "../cuda/tensor_map.h"
#include "cuda_fwd_kernels.h"
#include "cuda_fwd_layouts.h"
#include "delta_rule.h"
#include "saved_layout.h"

namespace ak::linear::cuda {
namespace {

using namespace fwd;

enum class Path { Auto, General, Fast };

Path requested_path() {
  const char* env = std::getenv("ATTNKIT_LINEAR_PATH");
  if (env == nullptr || *env == '\0' || std::strcmp(env, "auto") == 0) return Path::Auto;
  if (std::strcmp(env, "general") == 0) return Path::General;
  if (std::strcmp(env, "fast") == 0) return Path::Fast;
  fail(AK_ERR_INVALID_ARGUMENT, std::string("ATTNKIT_LINEAR_PATH: expected general, fast or auto, got ") + env);
}

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

// ---- general path ----

template <class T>
void general_fwd(const DeltaFwd& a, cudaStream_t stream) {
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
  r.map.cu = p.varlen ? static_cast<const int32_t*>(p.cu_seqlens->data) : nullptr;
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
  launch_recurrent_fwd<T>(r, stream);

  if (a.aw || a.au) {
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
    launch_wy_general<T>(w, stream);
  }
}

// ---- fast path ----

bool aligned_rows(const ak_tensor* t) {
  if (reinterpret_cast<uintptr_t>(t->data) % 16 != 0) return false;
  for (int d = 0; d < 3; ++d) {
    if (t->strides[d] % 8 != 0) return false;
  }
  return true;
}

// Chunks of the whole call (every sequence split into ceil(len / 64) chunks).
int64_t count_chunks(const DeltaProblem& p) {
  if (!p.varlen) return p.B * ((p.T + kFastChunk - 1) / kFastChunk);
  int64_t total = 0;
  for (int64_t n = 0; n < p.N; ++n) total += (p.seq_start[n + 1] - p.seq_start[n] + kFastChunk - 1) / kFastChunk;
  return total;
}

size_t round_up(size_t x) { return (x + 255) / 256 * 256; }

// Shared memory of stage 2 for head dim D and V tile VT, 0 for a pair that has no kernel.
int state_smem(int D, int VT) {
  if (D == 64 && VT == 32) return StateLayout<64, 32>::kBytes;
  if (D == 64 && VT == 64) return StateLayout<64, 64>::kBytes;
  if (D == 128 && VT == 32) return StateLayout<128, 32>::kBytes;
  if (D == 128 && VT == 64) return StateLayout<128, 64>::kBytes;
  if (D == 128 && VT == 128) return StateLayout<128, 128>::kBytes;
  if (D == 256 && VT == 32) return StateLayout<256, 32>::kBytes;
  if (D == 256 && VT == 64) return StateLayout<256, 64>::kBytes;
  return 0;
}
int prep_smem(int D) {
  if (D == 64) return PrepLayout<64>::kBytes;
  if (D == 128) return PrepLayout<128>::kBytes;
  return PrepLayout<256>::kBytes;
}

// The V tile of the mma.sync stage 2: more tiles fill more SMs but repeat the state-independent work
// (P) per tile and shrink each product. Picks, among the tiles whose shared memory fits the device,
// the one with the least estimated time: waves of blocks (blocks an SM from shared memory, and at
// most one, two for D = 64, from registers) times the busiest warp's tensor-core work per chunk
// (mma.sync count, plus a fixed cost for barriers, loads and epilogues). 0 when none fits.
int pick_vtile(int D, int64_t units, const cudaDeviceProp& prop) {
  const int options[3] = {128, 64, 32};
  int best = 0;
  double best_cost = 1e300;
  for (int vt : options) {
    const int smem = state_smem(D, vt);
    if (smem == 0 || smem > static_cast<int>(prop.sharedMemPerBlockOptin)) continue;
    double per_chunk = 64;
    if (D == 64) per_chunk += 16 + 1.25 * vt;
    if (D == 128) per_chunk += 32 + 2.0 * vt;
    if (D == 256) per_chunk += 64 + 3.5 * vt;
    const int by_smem = static_cast<int>(prop.sharedMemPerMultiprocessor / (smem + 1024));
    const int per_sm = std::max(1, std::min(D == 64 ? 2 : 1, by_smem));
    const int64_t slots = static_cast<int64_t>(prop.multiProcessorCount) * per_sm;
    const int64_t blocks = units * (D / vt);
    const double waves = static_cast<double>((blocks + slots - 1) / slots);
    const double cost = waves * per_chunk;
    if (cost < best_cost * 0.999) {
      best_cost = cost;
      best = vt;
    }
  }
  return best;
}

// Shared memory of the wgmma stage 2, 0 for a pair that has no kernel.
int state_sm90_smem(int D, int VT) {
  if (D == 128 && VT == 64) return Sm90StateLayout<128, 64>::kAlloc;
  if (D == 128 && VT == 128) return Sm90StateLayout<128, 128>::kAlloc;
  if (D == 256 && VT == 64) return Sm90StateLayout<256, 64>::kAlloc;
  return 0;
}

// The V tile of the wgmma stage 2 (one block an SM): waves of blocks times an estimate of a chunk's
// cycles, the tensor-core time of its products at the dense rate (4096 FLOP a cycle an SM) plus a
// fixed cost for barriers, the element-wise steps and the loads' issue. 0 when none fits.
int pick_vtile_sm90(int D, int64_t units, const cudaDeviceProp& prop) {
  int best = 0;
  double best_cost = 1e300;
  for (int vt : {128, 64}) {
    const int smem = state_sm90_smem(D, vt);
    if (smem == 0 || smem > static_cast<int>(prop.sharedMemPerBlockOptin)) continue;
    const double flops = 2.0 * 64 * D * vt * 2 + 2.0 * 64 * 64 * D + 2.0 * 64 * 64 * vt + 2.0 * D * 64 * vt;
    const double per_chunk = flops / 4096 + 400 + 3.0 * vt;
    const int64_t blocks = units * (D / vt);
    const double waves = static_cast<double>((blocks + prop.multiProcessorCount - 1) / prop.multiProcessorCount);
    const double cost = waves * per_chunk;
    if (cost < best_cost * 0.999) {
      best_cost = cost;
      best = vt;
    }
  }
  return best;
}

enum class StateKernel { Mma, Wgmma, Split };
struct StatePlan {
  StateKernel kernel = StateKernel::Mma;
  int vt = 0;  // 0: no kernel fits
};

int env_int(const char* name) {
  const char* env = std::getenv(name);
  return env != nullptr && *env != '\0' ? std::atoi(env) : 0;
}

// Which stage-2 kernel and V tile serve a call (the environment overrides, see the top).
StatePlan plan_state(int D, int64_t units, const cudaDeviceProp& prop) {
  const char* variant = std::getenv("ATTNKIT_LINEAR_STATE_VARIANT");
  const bool want_mma = variant != nullptr && std::strcmp(variant, "mma") == 0;
  const bool want_split = variant == nullptr || *variant == '\0' || std::strcmp(variant, "split") == 0 ||
                          std::strcmp(variant, "auto") == 0;
  // Unset, empty and "auto" count as split, so anything else here is named.
  if (!want_mma && !want_split && std::strcmp(variant, "wgmma") != 0) {
    fail(AK_ERR_INVALID_ARGUMENT,
         std::string("ATTNKIT_LINEAR_STATE_VARIANT: expected auto, mma, wgmma or split, got ") + variant);
  }
  const int bv = env_int("ATTNKIT_LINEAR_STATE_BV");
  StatePlan plan;
  if (!want_mma && prop.major == 9 && prop.minor == 0 && (D == 128 || D == 256) && chunk_state_sm90_built()) {
    plan.kernel = StateKernel::Wgmma;
    const int smem = state_sm90_smem(D, bv);
    plan.vt = smem != 0 && smem <= static_cast<int>(prop.sharedMemPerBlockOptin) ? bv
                                                                                   : pick_vtile_sm90(D, units, prop);
    if (want_split && D == 128) plan.kernel = StateKernel::Split;  // same shared-memory fit (226 KB at VT 128)
    if (plan.vt != 0) return plan;
  }
  plan.kernel = StateKernel::Mma;
  const int smem = state_smem(D, bv);
  plan.vt = smem != 0 && smem <= static_cast<int>(prop.sharedMemPerBlockOptin) ? bv : pick_vtile(D, units, prop);
  return plan;
}

// ---- context-parallel stage 2 ----

struct SegmentPlan {
  int P = 1;           // segments; 1: the plain recurrence
  int seg_chunks = 0;  // chunks per segment
  int vt1 = 0, vt2 = 0;  // V tiles of pass 1 (summaries) and pass 2 (outputs)
};

// Microseconds a chunk step takes (fixed latency plus a little per V column), the cost model of the
// choices below: the two-role wgmma kernel as measured in round 3 on the H200, the split kernel as
// measured in round 5 (1.6 / 2.6 us at VT 64 / 128 with the output, bench/NOTES_linear.md).
double step_us(StateKernel kernel, int vt) {
  return kernel == StateKernel::Split ? 0.6 + 0.0156 * vt : 3.4 + 0.023 * vt;
}

// The cheaper V tile for a pass of `jobs` block rows, and its cost in step-microseconds per chunk.
int segment_pass_vtile(StateKernel kernel, int D, int64_t jobs, int bv, const cudaDeviceProp& prop, double& cost) {
  int best = 0;
  cost = 1e300;
  for (int vt : {128, 64}) {
    const int smem = state_sm90_smem(D, vt);
    if (smem == 0 || smem > static_cast<int>(prop.sharedMemPerBlockOptin) || (bv != 0 && bv != vt)) continue;
    const int64_t blocks = jobs * (D / vt);
    const double waves = static_cast<double>((blocks + prop.multiProcessorCount - 1) / prop.multiProcessorCount);
    const double c = waves * step_us(kernel, vt);
    if (c < cost * 0.999) cost = c, best = vt;
  }
  return best;
}

// The segment plan of a call served by the wgmma kernel (ATTNKIT_LINEAR_CP, see the top).
SegmentPlan plan_segments(const DeltaFwd& a, const StatePlan& state, const cudaDeviceProp& prop) {
  SegmentPlan plan;
  const DeltaProblem& p = a.p;
  const char* env = std::getenv("ATTNKIT_LINEAR_CP");
  if (env != nullptr && (std::strcmp(env, "off") == 0 || std::strcmp(env, "0") == 0)) return plan;
  const bool automatic = env == nullptr || *env == '\0' || std::strcmp(env, "auto") == 0;
  const int forced = automatic ? 0 : std::atoi(env);
  if (!automatic && forced < 1) {
    fail(AK_ERR_INVALID_ARGUMENT, std::string("ATTNKIT_LINEAR_CP: expected off, auto or a segment count, got ") + env);
  }
  if (state.kernel == StateKernel::Mma || a.chunk_states != nullptr || forced == 1) return plan;
  int64_t longest = 0;  // chunks of the longest sequence
  if (!p.varlen) {
    longest = (p.T + kFastChunk - 1) / kFastChunk;
  } else {
    for (int64_t n = 0; n < p.N; ++n) {
      longest = std::max<int64_t>(longest, (p.seq_start[n + 1] - p.seq_start[n] + kFastChunk - 1) / kFastChunk);
    }
  }
  const int D = static_cast<int>(p.K);
  const int bv = env_int("ATTNKIT_LINEAR_STATE_BV");
  const int64_t units = p.N * p.H;
  double best = 1e300;
  if (automatic) {
    double c0;
    segment_pass_vtile(state.kernel, D, units, state.vt, prop, c0);
    // A split must win by 25%: round 5 measured the split kernel's plan about 20% slower than this
    // model (pass 1's wave waits for its slowest job, segment 0 with output; the combine; two launches).
    best = c0 * static_cast<double>(longest) * 0.75;
  }
  for (int P = automatic ? 2 : forced; P <= (automatic ? 16 : forced); ++P) {
    const int64_t seg = (longest + P - 1) / P;
    if (automatic && seg < 4) break;
    double c1, c2;
    const int vt1 = segment_pass_vtile(state.kernel, D, units * 2 * (P - 1), bv, prop, c1);
    const int vt2 = segment_pass_vtile(state.kernel, D, units * (P - 1), bv, prop, c2);
    if (vt1 == 0 || vt2 == 0) continue;
    const double cost = static_cast<double>(seg) * (c1 + c2) + 3.0 * (P - 1);  // + the combine's products
    if (!automatic || cost < best) {
      best = cost;
      plan.P = P;
      plan.seg_chunks = static_cast<int>(std::max<int64_t>(1, seg));
      plan.vt1 = vt1;
      plan.vt2 = vt2;
    }
  }
  return plan;
}

// ---- step profile (ATTNKIT_LINEAR_STEP_PROFILE=1) ----

class StepProfiler {
 public:
  explicit StepProfiler(int device) : device_(device) {
    const char* env = std::getenv("ATTNKIT_LINEAR_STEP_PROFILE");
    if (env == nullptr || std::strcmp(env, "1") != 0) return;
    AK_CUDA_CHECK(cudaMalloc(&slots_, kBytes));
  }
  ~StepProfiler() {
    if (slots_) cudaFree(slots_);
  }
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  // The buffer for the next launch (cleared), or nullptr when off.
  unsigned long long* arm(cudaStream_t stream) {
    if (slots_) AK_CUDA_CHECK(cudaMemsetAsync(slots_, 0, kBytes, stream));
    return slots_;
  }
  // Waits for the launch and prints mean cycles per phase and step, per warpgroup.
  void report(const char* label, bool split, cudaStream_t stream) {
    if (!slots_) return;
    unsigned long long host[kProfileBlocks * 2 * kProfileSlots];
    AK_CUDA_CHECK(cudaMemcpyAsync(host, slots_, kBytes, cudaMemcpyDeviceToHost, stream));
    AK_CUDA_CHECK(cudaStreamSynchronize(stream));
    int khz = 0;
    AK_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device_));
    // Phase names (the kernels' comments say where the stamps are): the two-role kernel, per warpgroup
    // (W rows | Q rows), and the split kernel's chain and output warpgroups.
    static const char* const kTwoRole[10] = {"wait-loads", "S1",   "issue-loads", "issue-WS|P+QS", "WS|P-done",
                                             "U,Ud|Pscale+QS", "S2", "e(+PU)",    "O-store",       "Sb-store"};
    static const char* const kChain[10] = {"loads+bar", "issue-WS", "EMPTY+issue-loads", "WS-wait", "U,Ud",
                                           "fence+bar", "e+issue-q,u", "Sb-store",          "-",       "-"};
    static const char* const kOutput[10] = {"FULL-wait", "issue-P+QS", "rq", "P-wait", "Pscale+QS",
                                            "UB-wait",   "PU",         "O-store", "-",  "-"};
    for (int wg = 0; wg < 2; ++wg) {
      const char* const* names = !split ? kTwoRole : wg == 0 ? kChain : kOutput;
      double sum[kProfileSlots] = {};
      for (int b = 0; b < kProfileBlocks; ++b) {
        for (int k = 0; k < kProfileSlots; ++k) sum[k] += static_cast<double>(host[(b * 2 + wg) * kProfileSlots + k]);
      }
      const double steps = sum[kProfileSlots - 1];
      if (steps == 0) continue;
      double total = 0;
      std::string line;
      for (int k = 0; k < 10; ++k) {
        total += sum[k] / steps;
        if (split && k >= 8) continue;
        line += std::string(" ") + names[k] + " " + std::to_string(static_cast<long long>(sum[k] / steps + 0.5));
      }
      std::fprintf(stderr, "step profile [%s] wg%d (%.0f steps over %d blocks), cycles/step:%s | total %.0f = %.2f us at %d MHz\n",
                   label, wg, steps, kProfileBlocks, line.c_str(), total, total / (khz * 1e-3), khz / 1000);
    }
  }

 private:
  static constexpr size_t kBytes = sizeof(unsigned long long) * kProfileBlocks * 2 * kProfileSlots;
  int device_;
  unsigned long long* slots_ = nullptr;
};

// The split kernel loads with TMA on fixed-length calls (ATTNKIT_LINEAR_SPLIT_TMA=0: cp.async always).
// Varlen calls use cp.async: a chunk's rows past its sequence must load as zeros, and a tensor map
// only zero-fills past the end of the whole tensor.
template <class T>
bool encode_split_maps(const DeltaFwd& a, const T* w, const T* u, int64_t chunks, SplitMaps& maps) {
  const char* env = std::getenv("ATTNKIT_LINEAR_SPLIT_TMA");
  if (a.p.varlen || (env != nullptr && std::strcmp(env, "0") == 0)) return false;
  const int dtype = std::is_same_v<T, __half> ? AK_FLOAT16 : AK_BFLOAT16;
  const DeltaProblem& p = a.p;
  auto rows_map = [&](CUtensorMap& m, const ak_tensor* t, const char* what) {
    ak::cuda::encode_rows_map(m, dtype, t->data, p.K, p.T, p.HK, p.B, t->strides[1], t->strides[2], t->strides[0],
                              64, what);
  };
  rows_map(maps.q, a.q, "delta rule q");
  rows_map(maps.k, a.k, "delta rule k");
  const int64_t rows = chunks * p.H * 64;
  ak::cuda::encode_rows_map(maps.w, dtype, w, p.K, rows, 1, 1, p.K, 0, 0, 64, "delta rule w");
  ak::cuda::encode_rows_map(maps.u, dtype, u, p.K, rows, 1, 1, p.K, 0, 0, 64, "delta rule u");
  return true;
}

// Output warpgroups of the split kernel at VT 64 (ATTNKIT_LINEAR_SPLIT_OUTPUTS=1|2, default 2).
int split_outputs() {
  const int n = env_int("ATTNKIT_LINEAR_SPLIT_OUTPUTS");
  if (n != 0 && n != 1 && n != 2) fail(AK_ERR_INVALID_ARGUMENT, "ATTNKIT_LINEAR_SPLIT_OUTPUTS: expected 1 or 2");
  return n == 0 ? 2 : n;
}

// What the forward saves for the backward (DeltaFwd::saved; saved_layout.h).
template <class T>
SavedParts<T> saved_parts(const DeltaFwd& f, int64_t chunks) {
  return SavedParts<T>(static_cast<T*>(f.saved->data), f.p.H, chunks, f.p.K, f.p.V);
}

template <class T>
void encode_save_maps(const DeltaFwd& a, int64_t chunks, SaveMaps& maps) {
  const int dtype = std::is_same_v<T, __half> ? AK_FLOAT16 : AK_BFLOAT16;
  const int64_t D = a.p.K, H = a.p.H;
  const SavedParts<T> parts = saved_parts<T>(a, chunks);
  T* const hs = parts.hs;
  T* const vs = parts.vs;
  ak::cuda::encode_rows_map(maps.hs, dtype, hs, D, H * chunks * D, 1, 1, D, 0, 0, static_cast<int>(D),
                            "delta rule saved states");
  ak::cuda::encode_rows_map(maps.vs, dtype, vs, D, H * chunks * 64, 1, 1, D, 0, 0, 64, "delta rule saved v_new");
}

template <class T, int D>
void launch_sm90_vt(const StateParams<T>& sp, StateKernel kernel, int vt, const SplitMaps* maps,
                    const SaveMaps* save, cudaStream_t stream) {
  if constexpr (D == 128) {
    if (kernel == StateKernel::Split) {
      if (vt == 128) return launch_chunk_state_split<T, D, 128, 1>(sp, maps, save, stream);
      if (split_outputs() == 1) return launch_chunk_state_split<T, D, 64, 1>(sp, maps, save, stream);
      return launch_chunk_state_split<T, D, 64, 2>(sp, maps, save, stream);
    }
    if (vt == 128) return launch_chunk_state_sm90<T, D, 128>(sp, save, stream);
    return launch_chunk_state_sm90<T, D, 64>(sp, save, stream);
  }
  if constexpr (D == 256) return launch_chunk_state_sm90<T, D, 64>(sp, save, stream);
}

// Why the fast path cannot serve this call, or nullptr when it can.
const char* fast_refusal(const DeltaFwd& a) {
  const DeltaProblem& p = a.p;
  if (p.recurrent) return "the recurrent algorithm was asked for";
  // Another chunk size only changes how the same function is decomposed, so 32 and 128 run as 64
  // unless the caller asks for the chunk-shaped outputs.
  if (p.chunk_size != kFastChunk && (a.aw || a.au || a.chunk_states)) {
    return "chunk_states, aw and au need chunk_size 64";
  }
  if (p.dtype != AK_BFLOAT16 && p.dtype != AK_FLOAT16) return "it needs bfloat16 or float16 inputs";
  if (p.K != p.V || (p.K != 64 && p.K != 128 && p.K != 256)) return "it needs K = V in {64, 128, 256}";
  const cudaDeviceProp& prop = ak::cuda::props(p.device_index);
  if (prop.major < 8) return "it needs compute capability 8.0 or newer";
  if (prep_smem(static_cast<int>(p.K)) > static_cast<int>(prop.sharedMemPerBlockOptin) ||
      plan_state(static_cast<int>(p.K), p.N * p.H, prop).vt == 0) {
    return "its shared memory does not fit this device";
  }
  if (!aligned_rows(a.q) || !aligned_rows(a.k) || !aligned_rows(a.v) || !aligned_rows(a.output)) {
    return "it needs 16-byte aligned rows (data and strides of q, k, v, output)";
  }
  return nullptr;
}

template <class T, int D>
void fast_fwd_d(const DeltaFwd& a, cudaStream_t stream) {
  const DeltaProblem& p = a.p;
  const int device = p.device_index;
  const int64_t chunks64 = count_chunks(p);
  const int chunks = as_int(chunks64, "chunks");
  const int H = as_int(p.H, "H"), N = as_int(p.N, "N");

  // Scratch: w, u [chunks, H, 64, D] (16-bit), gc and rk [chunks, H, 64] (fp32), varlen tables.
  const size_t vec_elems = static_cast<size_t>(chunks64) * H * 64;
  const size_t bytes_wu = round_up(vec_elems * D * sizeof(T));
  const size_t bytes_vec = round_up(vec_elems * sizeof(float));
  const size_t bytes_tab = p.varlen ? round_up((static_cast<size_t>(N) + 1 + chunks64) * sizeof(int32_t)) : 0;
  ak::cuda::Scratch scratch(device, 2 * bytes_wu + (p.l2norm ? 2 : 1) * bytes_vec + bytes_tab);
  unsigned char* s = scratch.as<unsigned char>();
  T* w = reinterpret_cast<T*>(s);
  T* u = reinterpret_cast<T*>(s + bytes_wu);
  float* gc = reinterpret_cast<float*>(s + 2 * bytes_wu);
  float* rk = p.l2norm ? reinterpret_cast<float*>(s + 2 * bytes_wu + bytes_vec) : nullptr;
  int32_t* tables = p.varlen ? reinterpret_cast<int32_t*>(s + 2 * bytes_wu + (p.l2norm ? 2 : 1) * bytes_vec)
                             : nullptr;

  ChunkMap map;
  map.T = as_int(p.T, "T");
  map.C = kFastChunk;
  map.NC = as_int((p.T + kFastChunk - 1) / kFastChunk, "chunks");
  if (p.varlen) {
    map.cu = static_cast<const int32_t*>(p.cu_seqlens->data);
    map.chunk_first = tables;
    map.chunk_seq = tables + N + 1;
    launch_chunk_table(map.cu, N, kFastChunk, tables, tables + N + 1, stream);
  }

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
  const cudaDeviceProp& prop = ak::cuda::props(device);
  const StatePlan plan = plan_state(D, static_cast<int64_t>(N) * H, prop);
  // The Hopper stage-2 kernels store the states for the backward; stage 1 then stores A and w.
  const bool saving = (D == 128 || D == 256) && plan.kernel != StateKernel::Mma && a.saved != nullptr;
  if (saving) {
    const SavedParts<T> parts = saved_parts<T>(a, chunks);
    pp.save_a = parts.a;
    pp.save_w = parts.w;
  }
  launch_chunk_prep<T, D>(pp, stream);
  const char* stages = std::getenv("ATTNKIT_LINEAR_FAST_STAGES");
  if (stages != nullptr && std::strcmp(stages, "prep") == 0) return;

  StateParams<T> sp;
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
  sp.map = map;
  sp.N = N;
  sp.H = H;
  sp.group = pp.group;
  sp.scale = static_cast<float>(p.scale);
  sp.l2norm = p.l2norm;
  const char* e_mode = std::getenv("ATTNKIT_LINEAR_SM90_E");
  sp.e_from_registers = e_mode != nullptr && std::strcmp(e_mode, "regs") == 0;
  if constexpr (D == 128 || D == 256) {
    if (plan.kernel != StateKernel::Mma) {
      StepProfiler profiler(device);
      const bool split = plan.kernel == StateKernel::Split;
      const char* kname = split ? "split" : "wgmma";
      const SegmentPlan seg = plan_segments(a, plan, prop);
      SplitMaps maps_storage;
      const SplitMaps* maps = split && encode_split_maps<T>(a, w, u, chunks, maps_storage) ? &maps_storage : nullptr;
      // Both Hopper kernels save for the backward (the fast backward's layouts; the general one
      // widens them to fp32).
      SaveMaps save_storage;
      const SaveMaps* save = nullptr;
      if (saving) {
        encode_save_maps<T>(a, chunks, save_storage);
        save = &save_storage;
        sp.save_chunks = chunks;
        *a.saved_written = 1;
      }
      char label[96];
      if (seg.P <= 1) {
        sp.profile = profiler.arm(stream);
        launch_sm90_vt<T, D>(sp, plan.kernel, plan.vt, maps, save, stream);
        std::snprintf(label, sizeof label, "%s D%d VT%d", kname, D, plan.vt);
        profiler.report(label, split, stream);
        return;
      }
      // Context-parallel: summaries of every segment, entry states, outputs of segments 1 .. P - 1.
      const int pm = seg.P - 1;
      const size_t summary = round_up(static_cast<size_t>(N) * H * pm * D * D * sizeof(float));
      ak::cuda::Scratch states(device, 3 * summary);
      unsigned char* sb = states.as<unsigned char>();
      sp.seg_count = seg.P;
      sp.seg_chunks = seg.seg_chunks;
      sp.seg_fwd = reinterpret_cast<float*>(sb);
      sp.seg_tr = reinterpret_cast<float*>(sb + summary);
      float* entry = reinterpret_cast<float*>(sb + 2 * summary);
      sp.seg_entry = entry;
      sp.seg_pass = 1;
      sp.profile = profiler.arm(stream);
      launch_sm90_vt<T, D>(sp, plan.kernel, seg.vt1, maps, save, stream);
      std::snprintf(label, sizeof label, "%s cp pass 1 P%d x%d chunks D%d VT%d", kname, seg.P, seg.seg_chunks, D,
                    seg.vt1);
      profiler.report(label, split, stream);
      launch_segment_combine(sp.seg_fwd, sp.seg_tr, entry, N, H, D, pm, stream);
      sp.seg_pass = 2;
      sp.profile = profiler.arm(stream);
      launch_sm90_vt<T, D>(sp, plan.kernel, seg.vt2, maps, save, stream);
      std::snprintf(label, sizeof label, "%s cp pass 2 P%d x%d chunks D%d VT%d", kname, seg.P, seg.seg_chunks, D,
                    seg.vt2);
      profiler.report(label, split, stream);
      return;
    }
  }
  if constexpr (D == 128) {
    if (plan.vt == 128) return launch_chunk_state<T, D, 128>(sp, stream);
  }
  if (plan.vt == 64) return launch_chunk_state<T, D, 64>(sp, stream);
  launch_chunk_state<T, D, 32>(sp, stream);
}

template <class T>
void fast_fwd(const DeltaFwd& a, cudaStream_t stream) {
  switch (a.p.K) {
    case 64: return fast_fwd_d<T, 64>(a, stream);
    case 128: return fast_fwd_d<T, 128>(a, stream);
    case 256: return fast_fwd_d<T, 256>(a, stream);
    default: fail(AK_ERR_INTERNAL, "delta_rule_fwd: fast path with an unexpected head dimension");
  }
}

// ---- decode ----

template <class T, class S>
void decode(const DeltaDecode& a, cudaStream_t stream) {
  const DeltaProblem& p = a.p;
  DecodeParams<T, S> d;
  d.q = static_cast<const T*>(a.q->data);
  d.k = static_cast<const T*>(a.k->data);
  d.v = static_cast<const T*>(a.v->data);
  d.q_sb = a.q->strides[0], d.q_sh = a.q->strides[1];
  d.k_sb = a.k->strides[0], d.k_sh = a.k->strides[1];
  d.v_sb = a.v->strides[0], d.v_sh = a.v->strides[1];
  if (p.gated) {
    d.g = static_cast<const float*>(a.g->data);
    d.g_sb = a.g->strides[0], d.g_sh = a.g->strides[1];
  }
  d.beta = static_cast<const float*>(a.beta->data);
  d.beta_sb = a.beta->strides[0], d.beta_sh = a.beta->strides[1];
  d.state = static_cast<const S*>(a.state->data);
  d.new_state = static_cast<S*>(a.new_state->data);
  d.o = static_cast<T*>(a.output->data);
  d.o_sb = a.output->strides[0], d.o_sh = a.output->strides[1];
  d.B = as_int(p.B, "B");
  d.H = as_int(p.H, "H");
  d.group = as_int(p.group(), "group");
  d.K = as_int(p.K, "K");
  d.V = as_int(p.V, "V");
  d.scale = static_cast<float>(p.scale);
  d.l2norm = p.l2norm;
  launch_decode<T, S>(d, stream);
}

}  // namespace

void delta_fwd(const DeltaFwd& a) {
  const DeltaProblem& p = a.p;
  ak::cuda::DeviceGuard guard(p.device_index);
  cudaStream_t stream = ak::cuda::stream(p.device_index);
  const Path path = requested_path();
  const char* refusal = path == Path::General ? "ATTNKIT_LINEAR_PATH=general" : fast_refusal(a);
  if (path == Path::Fast && refusal != nullptr) {
    fail(AK_ERR_UNSUPPORTED, std::string("delta_rule_fwd: ATTNKIT_LINEAR_PATH=fast, but the fast path cannot "
                                         "serve this call: ") +
                                 refusal);
  }
  if (refusal == nullptr) {
    if (p.dtype == AK_BFLOAT16) return fast_fwd<__nv_bfloat16>(a, stream);
    return fast_fwd<__half>(a, stream);
  }
  switch (p.dtype) {
    case AK_FLOAT32: return general_fwd<float>(a, stream);
    case AK_BFLOAT16: return general_fwd<__nv_bfloat16>(a, stream);
    case AK_FLOAT16: return general_fwd<__half>(a, stream);
    default: fail(AK_ERR_INTERNAL, "delta_rule_fwd: unexpected dtype");
  }
}

// delta_bwd: csrc/linear/cuda_bwd.cu

void delta_decode(const DeltaDecode& a) {
  const DeltaProblem& p = a.p;
  ak::cuda::DeviceGuard guard(p.device_index);
  cudaStream_t stream = ak::cuda::stream(p.device_index);
  const bool fp32_state = a.state->dtype == AK_FLOAT32;
  switch (p.dtype) {
    case AK_FLOAT32: return decode<float, float>(a, stream);
    case AK_BFLOAT16:
      return fp32_state ? decode<__nv_bfloat16, float>(a, stream) : decode<__nv_bfloat16, __nv_bfloat16>(a, stream);
    case AK_FLOAT16: return fp32_state ? decode<__half, float>(a, stream) : decode<__half, __half>(a, stream);
    default: fail(AK_ERR_INTERNAL, "delta_rule_decode: unexpected dtype");
  }
}

}  // namespace ak::linear::cuda
