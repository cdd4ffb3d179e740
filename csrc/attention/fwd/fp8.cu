// The CUDA forward of float8_e4m3 inputs (dense): the planner's 8-bit Hopper kernel (the persistent
// forward at kInBytes = 1) after V is transposed for it, or the inputs dequantised to the output dtype
// and the 16-bit forward.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "attention/call_fields.h"
#include "attention/fwd/dispatch.h"
#include "attention/planner.h"
#include "core/numeric.h"
#include "cuda/backend.h"
#include "cuda/registry_launch.h"
#include "cuda/runtime.cuh"

namespace ak::attention::cuda {
namespace {

constexpr int kTransposeKeys = 64;  // keys a block of the V transpose moves

// V [B, Skv, Hkv, D] (strided, 16-byte aligned rows) -> vt [B, Hkv, D, keys] (keys = Skv rounded up to
// 16, the tail zeros). Inside each 16 keys, position 4t + i holds key i < 2 ? 2t + i : 8 + 2t + i - 2:
// the order in which pack_e4m3 (softmax.cuh) hands P's columns to the e4m3 product. A block stages
// 64 keys by D in shared memory and writes each of its D rows as four 16-byte runs of keys.
__global__ void transpose_v_e4m3_kernel(const uint8_t* __restrict__ v, int64_t v_batch, int64_t v_row,
                                        int64_t v_head, int skv, int d, int keys, uint8_t* __restrict__ vt) {
  extern __shared__ uint4 staged_v[];
  uint8_t* tile = reinterpret_cast<uint8_t*>(staged_v);
  const int pitch = d + 16;  // bytes a staged key row takes (the pad spreads the column reads)
  const int k0 = blockIdx.x * kTransposeKeys, hk = blockIdx.y, b = blockIdx.z, hkv = gridDim.y;
  const int chunks = d / 16;
  for (int idx = threadIdx.x; idx < kTransposeKeys * chunks; idx += blockDim.x) {
    const int r = idx / chunks, c = idx % chunks;
    uint4 x = make_uint4(0, 0, 0, 0);
    if (k0 + r < skv) x = *reinterpret_cast<const uint4*>(v + b * v_batch + int64_t(k0 + r) * v_row + hk * v_head + 16 * c);
    *reinterpret_cast<uint4*>(tile + r * pitch + 16 * c) = x;
  }
  __syncthreads();
  uint8_t* out = vt + (int64_t(b) * hkv + hk) * d * keys;
  for (int idx = threadIdx.x; idx < d * (kTransposeKeys / 16); idx += blockDim.x) {
    const int row = idx / (kTransposeKeys / 16), g = idx % (kTransposeKeys / 16);
    const int key0 = k0 + 16 * g;
    if (key0 >= keys) continue;
    uint32_t w[4];
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      uint32_t word = 0;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = 16 * g + (i < 2 ? 2 * t + i : 8 + 2 * t + i - 2);
        word |= uint32_t(tile[key * pitch + row]) << (8 * i);
      }
      w[t] = word;
    }
    *reinterpret_cast<uint4*>(out + int64_t(row) * keys + key0) = make_uint4(w[0], w[1], w[2], w[3]);
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
  set_contiguous_strides(r);
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
  const dim3 grid(::ak::cuda::ceil_div(keys, kTransposeKeys), static_cast<unsigned>(pr.Hkv),
                  static_cast<unsigned>(pr.B));
  const size_t smem = static_cast<size_t>(kTransposeKeys) * (pr.D + 16);
  transpose_v_e4m3_kernel<<<grid, 256, smem, stream>>>(static_cast<const uint8_t*>(v.data), v.strides[0],
                                                        v.strides[1], v.strides[2], static_cast<int>(pr.Skv),
                                                        static_cast<int>(pr.D), keys, vt.as<uint8_t>());
  ::ak::cuda::check_launch("transpose_v_e4m3_kernel");
  p.v = vt.get();
  p.vt_keys = keys;
  ::ak::cuda::launch_row<__nv_fp8_e4m3>(choice.plan.rows[0], "attention.fwd", p, stream);
}

}  // namespace ak::attention::cuda
