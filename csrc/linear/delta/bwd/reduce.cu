// The last stage of the delta-rule backward, shared by both paths: dq and dk summed over each group
// of value heads (a fixed order, so the result is deterministic), the L2-norm backward
// dx = r (dy - y (y . dy)) with y = x r, r = (|x|^2 + eps)^-1/2, and the dtype conversion. Also the
// zeros for rows no sequence covers.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "cuda/runtime.cuh"
#include "linear/delta/bwd/problem.cuh"
#include "linear/delta/bwd/reduce.cuh"

namespace ak::linear::cuda::bwd {
using namespace reduce_detail;
namespace {

template <class F>
void by_dtype(int dtype, F&& f) {
  switch (dtype) {
    case AK_FLOAT32:
      f(float{});
      break;
    case AK_FLOAT16:
      f(__half{});
      break;
    case AK_BFLOAT16:
      f(__nv_bfloat16{});
      break;
    default:
      fail(AK_ERR_INVALID_ARGUMENT, "delta_rule_bwd: q must be float32, float16 or bfloat16");
  }
}

}  // namespace

void launch_reduce_dqk(const Problem& p, const float* dq_heads, const float* dk_heads, cudaStream_t stream) {
  const int64_t P = p.padded();
  if (P == 0 || p.HK == 0) return;
  if (p.K % 4 == 0) {
    // Bandwidth-shaped: eight resident blocks per multiprocessor striding over the rows.
    int dev = 0;
    AK_CUDA_CHECK(cudaGetDevice(&dev));
    const int64_t rows = P * p.HK;
    const int64_t blocks = std::min<int64_t>(ak::cuda::ceil_div(rows, kWarps),
                                             8 * static_cast<int64_t>(ak::cuda::props(dev).multiProcessorCount));
    by_dtype(p.dtype, [&](auto tag) {
      using T = decltype(tag);
      reduce_dqk_vec<T><<<static_cast<unsigned>(blocks), kWarps * 32, 0, stream>>>(p, dq_heads, dk_heads);
    });
  } else {
    by_dtype(p.dtype, [&](auto tag) {
      using T = decltype(tag);
      reduce_dqk<T><<<dim3(ak::cuda::ceil_div(P, kWarps), p.HK), kWarps * 32, 0, stream>>>(p, dq_heads, dk_heads);
    });
  }
  ak::cuda::check_launch("delta_bwd: reduce dq, dk");
}

void launch_zero_uncovered(const Problem& p, int first_token, const int32_t* first_at, cudaStream_t stream) {
  const int rows = p.map.T - (first_at != nullptr ? 0 : first_token);
  if (rows <= 0) return;
  by_dtype(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    zero_rows<T><<<rows, 256, 0, stream>>>(p, first_token, first_at);
  });
  ak::cuda::check_launch("delta_bwd: zero uncovered rows");
}

}  // namespace ak::linear::cuda::bwd
