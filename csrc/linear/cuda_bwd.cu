// The CUDA backward of the delta rule (ak::linear::cuda::delta_bwd): turns the validated call into
// the stages' Problem, builds the varlen chunk map on the device, and picks a path.
//
// Paths: "fast" (tensor cores; bf16/f16, K = V in {64, 128, 256}; any chunk size, computed as 64: the
// gradients do not depend on it) and "general" (fp32 SIMT, everything else, at the chunk size
// asked). ATTNKIT_LINEAR_BWD_PATH=general|fast forces one (fast refuses calls it cannot serve);
// unset or "auto" picks fast where it applies.
#include <cstdlib>
#include <cstring>
#include <string>

#include "../cuda/runtime.cuh"
#include "cuda_bwd.cuh"
#include "cuda_bwd_fast.cuh"
#include "delta_rule.h"

namespace ak::linear::cuda {
namespace {

using bwd::ChunkMap;
using bwd::OutView;
using bwd::Problem;
using bwd::RowView;

RowView row_view(const ak_tensor* t) {
  RowView v;
  if (t == nullptr) return v;
  v.p = t->data;
  v.sb = t->strides[0];
  v.st = t->strides[1];
  v.sh = t->strides[2];
  return v;
}

OutView out_view(const ak_tensor* t) {
  OutView v;
  if (t == nullptr) return v;
  v.p = t->data;
  v.sb = t->strides[0];
  v.st = t->strides[1];
  v.sh = t->strides[2];
  return v;
}

// Sequence table {row 0, begin, end, first chunk} and chunk table {row 0, t0, len, sequence} from
// the device copy of cu_seqlens (one block: the prefix over sequences is serial, N is small).
__global__ void build_varlen_map(const int32_t* cu, int N, int C, int4* seq, int4* chunk) {
  if (threadIdx.x == 0) {
    int first = 0;
    for (int n = 0; n < N; ++n) {
      const int b = cu[n], e = cu[n + 1];
      seq[n] = make_int4(0, b, e, first);
      first += (e - b + C - 1) / C;
    }
  }
  __syncthreads();
  for (int n = threadIdx.x; n < N; n += blockDim.x) {
    const int4 s = seq[n];
    const int len = s.z - s.y;
    for (int c = 0; c * C < len; ++c) chunk[s.w + c] = make_int4(0, s.y + c * C, min(C, len - c * C), n);
  }
}

enum class Path { Auto, General, Fast };

Path requested_path() {
  const char* env = std::getenv("ATTNKIT_LINEAR_BWD_PATH");
  if (env == nullptr || *env == '\0' || std::strcmp(env, "auto") == 0) return Path::Auto;
  if (std::strcmp(env, "general") == 0) return Path::General;
  if (std::strcmp(env, "fast") == 0) return Path::Fast;
  fail(AK_ERR_INVALID_ARGUMENT,
       std::string("ATTNKIT_LINEAR_BWD_PATH: expected general, fast or auto, got ") + env);
}

}  // namespace

void delta_bwd(const DeltaBwd& a) {
  const DeltaProblem& dp = a.p;
  const int device = dp.device_index;
  ak::cuda::DeviceGuard guard(device);
  cudaStream_t stream = ak::cuda::stream(device);

  Problem p;
  p.N = static_cast<int>(dp.N);
  p.H = static_cast<int>(dp.H);
  p.HK = static_cast<int>(dp.HK);
  p.group = static_cast<int>(dp.group());
  p.K = static_cast<int>(dp.K);
  p.V = static_cast<int>(dp.V);
  // The recurrent flag changes the forward's algorithm, not the gradients: use the default chunk.
  p.C = dp.recurrent ? 64 : dp.chunk_size;
  require(p.C == 32 || p.C == 64 || p.C == 128, "delta_rule_bwd: chunk_size must be 32, 64 or 128");
  p.scale = static_cast<float>(dp.scale);
  p.gated = dp.gated;
  p.l2norm = dp.l2norm;
  p.dtype = dp.dtype;
  p.q = row_view(a.q);
  p.k = row_view(a.k);
  p.v = row_view(a.v);
  p.dout = row_view(a.d_output);
  p.g = dp.gated ? row_view(a.g) : RowView{};
  p.beta = row_view(a.beta);
  p.initial_state = a.initial_state ? static_cast<const float*>(a.initial_state->data) : nullptr;
  p.d_final_state = a.d_final_state ? static_cast<const float*>(a.d_final_state->data) : nullptr;
  p.dq = out_view(a.dq);
  p.dk = out_view(a.dk);
  p.dv = out_view(a.dv);
  p.dbeta = out_view(a.dbeta);
  p.dg = dp.gated ? out_view(a.dg) : OutView{};
  p.d_initial_state = a.d_initial_state ? static_cast<float*>(a.d_initial_state->data) : nullptr;
  p.saved = a.saved ? a.saved->data : nullptr;
  p.map.T = static_cast<int>(dp.T);
  p.map.C = p.C;

  // The gradients do not depend on the chunk size, so the fast path serves every chunk size as 64.
  const Path path = requested_path();
  if (path != Path::General) {
    Problem as64 = p;
    as64.C = bwd::kFastC;
    if (bwd::fast_supported(as64, device)) p.C = p.map.C = bwd::kFastC;
  }

  // Chunks of the whole call, and the first token no sequence covers.
  int64_t chunks = 0;
  int64_t covered_end = dp.T;
  if (dp.varlen) {
    for (int64_t n = 0; n < dp.N; ++n) chunks += (dp.seq_start[n + 1] - dp.seq_start[n] + p.C - 1) / p.C;
    covered_end = dp.N > 0 ? dp.seq_start[dp.N] : 0;
  } else {
    p.map.nc_fixed = static_cast<int>((dp.T + p.C - 1) / p.C);
    chunks = dp.N * p.map.nc_fixed;
  }
  require(chunks * p.C < (int64_t{1} << 31), "delta_rule_bwd on CUDA: too many tokens for one call");
  p.NCt = static_cast<int>(chunks);

  ak::cuda::Scratch tables(device, dp.varlen ? (dp.N + chunks) * sizeof(int4) : 0);
  if (dp.varlen && dp.N > 0) {
    int4* seq = tables.as<int4>();
    int4* chunk = seq + dp.N;
    build_varlen_map<<<1, 256, 0, stream>>>(static_cast<const int32_t*>(dp.cu_seqlens->data), p.N, p.C, seq,
                                            chunk);
    ak::cuda::check_launch("delta_bwd: varlen map");
    p.map.seq = seq;
    p.map.chunk = chunk;
  }

  if (p.H > 0 && p.N > 0) {
    const bool fast = bwd::fast_supported(p, device);
    if (path == Path::Fast) {
      require(fast, "delta_rule_bwd: ATTNKIT_LINEAR_BWD_PATH=fast, but the fast path serves only bfloat16/float16 "
                    "with K = V in {64, 128, 256} on sm_80 or newer");
    }
    if (fast && path != Path::General) {
      bwd::run_fast(p, stream, device);
    } else {
      bwd::run_general(p, stream, device);
    }
  }
  if (p.H > 0 || p.HK > 0) bwd::launch_zero_uncovered(p, static_cast<int>(covered_end), stream);
}

}  // namespace ak::linear::cuda
