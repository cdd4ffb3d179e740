// The CUDA forward of float8_e4m3 inputs (dense): the planner's 8-bit Hopper kernel (the persistent
// forward at kInBytes = 1) after V is transposed for it, or the inputs dequantised to the output dtype
// and the 16-bit forward.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "attention/call_fields.h"
#include "attention/fwd/dispatch.h"
#include "attention/planner.h"
#include "core/numeric.h"
#include "cuda/backend.h"
#include "cuda/registry_launch.h"
#include "cuda/runtime.cuh"

namespace ak::attention::cuda {
namespace {

// V [B, Skv, Hkv, 128] (strided, 16-byte aligned rows) -> vt [B, Hkv, 128, keys] (keys = Skv rounded up to
// 16, the tail zeros). Inside each 16 keys, position 4t + i holds key i < 2 ? 2t + i : 8 + 2t + i - 2: the
// order in which pack_e4m3 (softmax.cuh) hands P's columns to the e4m3 product. A warp takes 16 keys: lane
// (t, c) loads the 16 columns 16c .. 16c + 15 of keys 2t, 2t + 1, 8 + 2t and 9 + 2t (four 16-byte loads; a
// load instruction reads four whole key rows), transposes the 4 x 16 bytes in registers and writes each
// column's four keys as one word at position 4t of its output row.
constexpr int kTransposeWarps = 8;
__global__ void __launch_bounds__(32 * kTransposeWarps)
    transpose_v_e4m3_kernel(const uint8_t* __restrict__ v, int64_t v_batch, int64_t v_row, int64_t v_head, int skv,
                            int keys, uint8_t* __restrict__ vt) {
  constexpr int kD = 128;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int t = lane / 8, c = lane % 8;
  const int key0 = (blockIdx.x * kTransposeWarps + warp) * 16;
  if (key0 >= keys) return;
  const int hk = blockIdx.y, b = blockIdx.z, hkv = gridDim.y;
  const int rows[4] = {key0 + 2 * t, key0 + 2 * t + 1, key0 + 8 + 2 * t, key0 + 9 + 2 * t};
  uint4 x[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    x[i] = rows[i] < skv ? *reinterpret_cast<const uint4*>(v + b * v_batch + int64_t(rows[i]) * v_row +
                                                           hk * v_head + 16 * c)
                         : make_uint4(0, 0, 0, 0);
  }
  uint8_t* out = vt + ((int64_t(b) * hkv + hk) * kD + 16 * c) * keys + key0 + 4 * t;
  const uint32_t* w[4] = {&x[0].x, &x[1].x, &x[2].x, &x[3].x};
#pragma unroll
  for (int q = 0; q < 4; ++q) {  // columns 16c + 4q .. 16c + 4q + 3
    const uint32_t a = w[0][q], bb = w[1][q], cc = w[2][q], dd = w[3][q];
    const uint32_t ab_lo = __byte_perm(a, bb, 0x5140), ab_hi = __byte_perm(a, bb, 0x7362);
    const uint32_t cd_lo = __byte_perm(cc, dd, 0x5140), cd_hi = __byte_perm(cc, dd, 0x7362);
    const uint32_t col[4] = {__byte_perm(ab_lo, cd_lo, 0x5410), __byte_perm(ab_lo, cd_lo, 0x7632),
                             __byte_perm(ab_hi, cd_hi, 0x5410), __byte_perm(ab_hi, cd_hi, 0x7632)};
#pragma unroll
    for (int j = 0; j < 4; ++j) *reinterpret_cast<uint32_t*>(out + int64_t(4 * q + j) * keys) = col[j];
  }
}

// x [B, S, H, D] e4m3 (strided) times scale[b, h / group] -> y, contiguous [B, S, H, D] in TOut.
template <class TOut>
__global__ void dequantize_e4m3_kernel(const uint8_t* __restrict__ x, int64_t x_batch, int64_t x_row,
                                       int64_t x_head, int64_t S, int H, int D, int group, int hkv,
                                       const float* __restrict__ scale, int64_t total, TOut* __restrict__ y) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int dd = static_cast<int>(i % D);
    const int h = static_cast<int>((i / D) % H);
    const int64_t s = (i / (int64_t(D) * H)) % S;
    const int64_t b = i / (int64_t(D) * H * S);
    const float f = e4m3_to_float(x[b * x_batch + s * x_row + h * x_head + dd]) * scale[b * hkv + h / group];
    if constexpr (std::is_same_v<TOut, __half>) {
      y[i] = __float2half_rn(f);
    } else {
      y[i] = __float2bfloat16_rn(f);
    }
  }
}

// A contiguous [B, S, H, D] tensor of `dtype` over `data`, on t's device.
ak_tensor contiguous_like(const ak_tensor& t, int32_t dtype, void* data) {
  ak_tensor r = t;
  r.data = data;
  r.dtype = dtype;
  int64_t stride = 1;
  for (int i = r.rank - 1; i >= 0; --i) {
    r.strides[i] = stride;
    stride *= r.shape[i];
  }
  return r;
}

// x widened into `out` (contiguous, the output dtype).
void dequantize(const ak_tensor& x, const ak_tensor& scale, const AttnProblem& pr, const ak_tensor& out,
                cudaStream_t stream) {
  const int64_t total = x.shape[0] * x.shape[1] * x.shape[2] * x.shape[3];
  if (total == 0) return;
  const int heads = static_cast<int>(x.shape[2]);
  const int group = static_cast<int>(heads / pr.Hkv);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((total + 255) / 256, 65536));
  const auto* src = static_cast<const uint8_t*>(x.data);
  const auto* s = static_cast<const float*>(scale.data);
  if (pr.out_dtype == AK_FLOAT16) {
    dequantize_e4m3_kernel<__half><<<blocks, 256, 0, stream>>>(src, x.strides[0], x.strides[1], x.strides[2],
                                                               x.shape[1], heads, static_cast<int>(pr.D), group,
                                                               static_cast<int>(pr.Hkv), s, total,
                                                               static_cast<__half*>(out.data));
  } else {
    dequantize_e4m3_kernel<__nv_bfloat16><<<blocks, 256, 0, stream>>>(
        src, x.strides[0], x.strides[1], x.strides[2], x.shape[1], heads, static_cast<int>(pr.D), group,
        static_cast<int>(pr.Hkv), s, total, static_cast<__nv_bfloat16*>(out.data));
  }
  ::ak::cuda::check_launch("dequantize_e4m3_kernel");
}

}  // namespace

void attention_fwd_e4m3(const AttnFwd& a) {
  const AttnProblem& pr = a.p;
  ::ak::cuda::DeviceGuard guard(pr.device_index);
  cudaStream_t stream = ::ak::cuda::stream(pr.device_index);

  planning::FwdShape shape;
  static_cast<planning::CallShape&>(shape) = call_shape(pr);
  shape.total_kv = pr.B * pr.Skv;
  shape.out_dtype = pr.out_dtype;
  shape.aligned = aligned_16(*a.q) && aligned_16(*a.k) && aligned_16(*a.v) && aligned_16(*a.output);
  const planning::FwdChoice choice = planning::plan_fwd(shape, ::ak::cuda::caps(pr.device_index), tuning::current());
  if (choice.plan.rows.empty()) {
    plan::set_last(choice.plan);
    return;
  }

  if (choice.plan.path == "dequantized") {
    const size_t wide = pr.out_dtype == AK_FLOAT16 ? sizeof(__half) : sizeof(__nv_bfloat16);
    const int64_t q_count = pr.B * pr.Sq * pr.Hq * pr.D, kv_count = pr.B * pr.Skv * pr.Hkv * pr.D;
    ::ak::cuda::Scratch q_wide(pr.device_index, q_count * wide), k_wide(pr.device_index, kv_count * wide),
        v_wide(pr.device_index, kv_count * wide);
    const ak_tensor q = contiguous_like(*a.q, pr.out_dtype, q_wide.get());
    const ak_tensor k = contiguous_like(*a.k, pr.out_dtype, k_wide.get());
    const ak_tensor v = contiguous_like(*a.v, pr.out_dtype, v_wide.get());
    dequantize(*a.q, *a.q_scale, pr, q, stream);
    dequantize(*a.k, *a.k_scale, pr, k, stream);
    dequantize(*a.v, *a.v_scale, pr, v, stream);
    AttnFwd wide_call = a;
    wide_call.p.dtype = pr.out_dtype;
    wide_call.q = &q;
    wide_call.k = &k;
    wide_call.v = &v;
    wide_call.q_scale = wide_call.k_scale = wide_call.v_scale = nullptr;
    attention_fwd(wide_call);
    plan::set_last(choice.plan);  // the call's plan (the 16-bit one ran inside it)
    return;
  }

  plan::set_last(choice.plan);
  FwdParams p = forward_params(a);
  p.q_scale = static_cast<const float*>(a.q_scale->data);
  p.k_scale = static_cast<const float*>(a.k_scale->data);
  p.v_scale = static_cast<const float*>(a.v_scale->data);
  p.out_dtype = pr.out_dtype;
  p.num_m_blocks = static_cast<int>((p.sq + choice.block_m - 1) / choice.block_m);
  p.heads_per_section = choice.heads_per_section;

  if (pr.D != 128) fail(AK_ERR_UNSUPPORTED, "attention_fwd: the e4m3 kernel takes head dim 128");  // the planner's rule
  const int keys = static_cast<int>((pr.Skv + 15) / 16 * 16);
  ::ak::cuda::Scratch vt(pr.device_index, static_cast<size_t>(pr.B * pr.Hkv * pr.D * keys));
  const ak_tensor& v = *a.v;
  const dim3 grid(::ak::cuda::ceil_div(keys, 16 * kTransposeWarps), static_cast<unsigned>(pr.Hkv),
                  static_cast<unsigned>(pr.B));
  transpose_v_e4m3_kernel<<<grid, 32 * kTransposeWarps, 0, stream>>>(static_cast<const uint8_t*>(v.data),
                                                                      v.strides[0], v.strides[1], v.strides[2],
                                                                      static_cast<int>(pr.Skv), keys,
                                                                      vt.as<uint8_t>());
  ::ak::cuda::check_launch("transpose_v_e4m3_kernel");
  p.v = vt.get();
  p.vt_keys = keys;
  ::ak::cuda::launch_row<__nv_fp8_e4m3>(choice.plan.rows[0], "attention.fwd", p, stream);
}

}  // namespace ak::attention::cuda
