// CUDA backend of the softmax-attention family: picks a kernel path for each call.
//
// Forward paths:
//   sm90     Hopper (compute capability 9.0) with D in {64, 128, 256} and 16-byte aligned pointers
//            and strides: TMA + wgmma + warp specialisation (cuda_fwd_sm90.cuh).
//   general  everything else the contract allows (cuda_fwd_general.cuh), sm_80 and newer.
// ATTNKIT_ATTN_PATH=general forces the general path; =sm90 demands the Hopper path (and fails
// where it cannot serve the call), so tests and benchmarks can compare the two in one process.
// ATTNKIT_ATTN_PINGPONG=0 turns the ping-pong schedule of the Hopper kernels off (for measuring).
// ATTNKIT_ATTN_FWD_KERNEL picks the Hopper kernel: v1 (one block per 128-row tile, two consumer
// warpgroups: cuda_fwd_sm90.cuh), p2 / p3 (persistent, two / three consumer warpgroups:
// cuda_fwd_sm90_persistent.cuh), p4 (p3 with key ranges per consumer warpgroup, D = 64); unset or
// auto: p3 for D = 64, p2 for D = 128, v1 for D = 256.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "../cuda/runtime.cuh"
#include "attention.h"
#include "cuda_bwd.h"
#include "cuda_fwd_launch.h"
#include "cuda_fwd_sm90.cuh"
#include "cuda_fwd_sm90_persistent.cuh"

namespace ak::attention::cuda {
namespace {

// Strides of one BSHD (or packed THD) tensor, in elements: batch (0 for varlen), row, head.
struct Strides3 {
  int64_t batch, row, head;
};

Strides3 bshd_strides(const ak_tensor& t, bool varlen) {
  if (varlen) return {0, t.strides[0], t.strides[1]};
  return {t.strides[0], t.strides[1], t.strides[2]};
}

// 16-byte copies (and TMA) need the base and every stride that steps (extent > 1) to be a nonzero
// multiple of 16 bytes (8 elements).
bool aligned_16(const ak_tensor& t) {
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0) return false;
  for (int i = 0; i < t.rank - 1; ++i) {
    if (t.shape[i] > 1 && (t.strides[i] % 8 != 0 || t.strides[i] == 0)) return false;
  }
  return true;
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

int general_width(int64_t d) {
  if (d <= 64) return 64;
  if (d <= 128) return 128;
  if (d <= 192) return 192;
  return 256;
}

void launch_general(const FwdParams& p, int dtype, bool aligned, cudaStream_t s) {
  const bool bf16 = dtype == AK_BFLOAT16;
  switch (general_width(p.d)) {
    case 64:
      return bf16 ? launch_fwd_general<64, AK_BFLOAT16>(p, aligned, s) : launch_fwd_general<64, AK_FLOAT16>(p, aligned, s);
    case 128:
      return bf16 ? launch_fwd_general<128, AK_BFLOAT16>(p, aligned, s)
                  : launch_fwd_general<128, AK_FLOAT16>(p, aligned, s);
    case 192:
      return bf16 ? launch_fwd_general<192, AK_BFLOAT16>(p, aligned, s)
                  : launch_fwd_general<192, AK_FLOAT16>(p, aligned, s);
    default:
      return bf16 ? launch_fwd_general<256, AK_BFLOAT16>(p, aligned, s)
                  : launch_fwd_general<256, AK_FLOAT16>(p, aligned, s);
  }
}

void launch_sm90(const FwdParams& p, int dtype, int flags, cudaStream_t s) {
  const bool bf16 = dtype == AK_BFLOAT16;
  switch (p.d) {
    case 64:
      return bf16 ? launch_fwd_sm90<64, AK_BFLOAT16>(p, flags, s) : launch_fwd_sm90<64, AK_FLOAT16>(p, flags, s);
    case 128:
      return bf16 ? launch_fwd_sm90<128, AK_BFLOAT16>(p, flags, s) : launch_fwd_sm90<128, AK_FLOAT16>(p, flags, s);
    default:
      return bf16 ? launch_fwd_sm90<256, AK_BFLOAT16>(p, flags, s) : launch_fwd_sm90<256, AK_FLOAT16>(p, flags, s);
  }
}

// The Hopper kernel variants (see the top of this file).
enum class Sm90Kernel { kV1, kP2, kP3, kP4 };

Sm90Kernel choose_sm90_kernel(const FwdParams& p, int dtype) {
  const std::string want = env("ATTNKIT_ATTN_FWD_KERNEL");
  if (want.empty() || want == "auto") return p.d == 64 ? Sm90Kernel::kP3 : p.d == 128 ? Sm90Kernel::kP2 : Sm90Kernel::kV1;
  if (want == "v1") return Sm90Kernel::kV1;
  if (want == "p3" && p.d == 64) return Sm90Kernel::kP3;
  if (want == "p4" && p.d == 64) return Sm90Kernel::kP4;
  if (want == "p2" && (p.d == 128 || (p.d == 64 && dtype == AK_BFLOAT16))) return Sm90Kernel::kP2;
  require(want == "p2" || want == "p3" || want == "p4",
          "ATTNKIT_ATTN_FWD_KERNEL: expected v1, p2, p3, p4 or auto, got '" + want + "'");
  fail(AK_ERR_UNSUPPORTED, "attention_fwd: ATTNKIT_ATTN_FWD_KERNEL=" + want + " is not built for D = " +
                               std::to_string(p.d) + " in this dtype (p3, p4: D 64; p2: D 128, and D 64 in bf16)");
}

void launch_sm90_persistent(const FwdParams& p, int dtype, Sm90Kernel kernel, int flags, cudaStream_t s) {
  const bool bf16 = dtype == AK_BFLOAT16;
  if (kernel == Sm90Kernel::kP4) {
    return bf16 ? launch_fwd_sm90_persistent_p4<64, AK_BFLOAT16>(p, flags, s)
                : launch_fwd_sm90_persistent_p4<64, AK_FLOAT16>(p, flags, s);
  }
  if (kernel == Sm90Kernel::kP3) {
    return bf16 ? launch_fwd_sm90_persistent<64, AK_BFLOAT16, 3>(p, flags, s)
                : launch_fwd_sm90_persistent<64, AK_FLOAT16, 3>(p, flags, s);
  }
  if (p.d == 64) return launch_fwd_sm90_persistent<64, AK_BFLOAT16, 2>(p, flags, s);
  return bf16 ? launch_fwd_sm90_persistent<128, AK_BFLOAT16, 2>(p, flags, s)
              : launch_fwd_sm90_persistent<128, AK_FLOAT16, 2>(p, flags, s);
}

// (Sequence, head) pairs per L2 section: as many as keep their K and V within half of the L2.
int heads_per_section(const FwdParams& p, int device) {
  const int64_t l2 = std::max<int64_t>(int64_t(::ak::cuda::props(device).l2CacheSize), 1 << 20);
  const int64_t kv_bytes_per_q_head = std::max<int64_t>(int64_t(p.skv) * p.d * 2 * 2 / p.group, 1);
  const int64_t total = int64_t(p.hq) * p.n_seq;
  const int64_t hs = std::max<int64_t>(1, (l2 / 2) / kv_bytes_per_q_head);
  return static_cast<int>(std::min(hs, total));
}

}  // namespace

void attention_fwd(const AttnFwd& a) {
  const AttnProblem& pr = a.p;
  const ak_tensor& q = *a.q;
  const ak_tensor& k = *a.k;
  const ak_tensor& v = *a.v;
  const ak_tensor& o = *a.output;
  ::ak::cuda::DeviceGuard guard(pr.device_index);
  cudaStream_t stream = ::ak::cuda::stream(pr.device_index);

  FwdParams p;
  p.q = q.data;
  p.k = k.data;
  p.v = v.data;
  p.o = o.data;
  p.lse = a.lse != nullptr ? static_cast<float*>(a.lse->data) : nullptr;
  const Strides3 qs = bshd_strides(q, pr.varlen), ks = bshd_strides(k, pr.varlen), vs = bshd_strides(v, pr.varlen),
                 os = bshd_strides(o, pr.varlen);
  p.q_batch = qs.batch, p.q_row = qs.row, p.q_head = qs.head;
  p.k_batch = ks.batch, p.k_row = ks.row, p.k_head = ks.head;
  p.v_batch = vs.batch, p.v_row = vs.row, p.v_head = vs.head;
  p.o_batch = os.batch, p.o_row = os.row, p.o_head = os.head;
  if (a.lse != nullptr) {
    const ak_tensor& l = *a.lse;
    if (pr.varlen) {
      p.lse_batch = 0, p.lse_head = l.strides[0], p.lse_row = l.strides[1];
    } else {
      p.lse_batch = l.strides[0], p.lse_head = l.strides[1], p.lse_row = l.strides[2];
    }
  }
  p.n_seq = static_cast<int>(pr.N);
  p.hq = static_cast<int>(pr.Hq);
  p.hkv = static_cast<int>(pr.Hkv);
  p.group = static_cast<int>(pr.group());
  p.d = static_cast<int>(pr.D);
  p.sq = static_cast<int>(pr.Sq);
  p.skv = static_cast<int>(pr.Skv);
  if (pr.varlen) {
    p.cu_q = static_cast<const int32_t*>(pr.cu_seqlens_q->data);
    p.cu_kv = static_cast<const int32_t*>(pr.cu_seqlens_kv->data);
    p.total_q = pr.q_start.back();
    p.total_kv = pr.kv_start.back();
  } else {
    p.total_q = pr.B * pr.Sq;
    p.total_kv = pr.B * pr.Skv;
  }
  p.sm_scale = pr.sm_scale;
  p.softcap = pr.softcap;
  constexpr float kLog2e = 1.4426950408889634f;
  if (pr.softcap > 0.0f) {
    p.softcap_mul = pr.sm_scale / pr.softcap;
    p.exp_scale = kLog2e;  // soft-capped scores are already scaled
  } else {
    p.exp_scale = pr.sm_scale * kLog2e;
  }
  auto window = [](int64_t w) { return w < 0 || w > kWindowUnlimited ? kWindowUnlimited : static_cast<int>(w); };
  p.window_left = window(pr.window_left);
  p.window_right = window(pr.window_right);
  if (p.sq == 0 || p.hq == 0 || p.n_seq == 0) return;

  const std::string path = env("ATTNKIT_ATTN_PATH");
  const cudaDeviceProp& dev = ::ak::cuda::props(pr.device_index);
  const bool hopper = dev.major == 9 && dev.minor == 0;
  const bool sm90_ok = hopper && (p.d == 64 || p.d == 128 || p.d == 256) && p.total_kv > 0 &&
                       aligned_16(q) && aligned_16(k) && aligned_16(v) && aligned_16(o);
  if (path == "sm90" && !sm90_ok) {
    fail(AK_ERR_UNSUPPORTED,
         "attention_fwd: ATTNKIT_ATTN_PATH=sm90, but this call cannot take the Hopper path (it needs compute "
         "capability 9.0, D of 64, 128 or 256, keys, and 16-byte aligned pointers and strides)");
  }
  if (sm90_ok && path != "general") {
    const Sm90Kernel kernel = choose_sm90_kernel(p, pr.dtype);
    const int block_m = kernel == Sm90Kernel::kP3 || kernel == Sm90Kernel::kP4 ? 192 : 128;
    p.num_m_blocks = static_cast<int>((p.sq + block_m - 1) / block_m);
    p.heads_per_section = heads_per_section(p, pr.device_index);
    const int flags = env("ATTNKIT_ATTN_PINGPONG") == "0" ? 0 : sm90::kPingPong;
    if (kernel == Sm90Kernel::kV1) {
      launch_sm90(p, pr.dtype, flags, stream);
    } else {
      launch_sm90_persistent(p, pr.dtype, kernel, flags, stream);
    }
    return;
  }
  p.num_m_blocks = static_cast<int>((p.sq + 63) / 64);
  p.heads_per_section = heads_per_section(p, pr.device_index);
  const bool aligned = aligned_16(q) && aligned_16(k) && aligned_16(v);
  launch_general(p, pr.dtype, aligned, stream);
}

// Backward: cuda_bwd.cu (prep, then the Hopper or general main kernel, then the dq conversion).
void attention_bwd(const AttnBwd& a) { attention_bwd_run(a); }

}  // namespace ak::attention::cuda
