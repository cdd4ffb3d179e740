// The decode kernel: a block of 128 threads per (split, KV head, sequence) runs block.h's phases with a
// barrier between each, then, when the keys were split, a second kernel combines the partial results.
#include "attention/decode/backend.h"
#include "attention/decode/source.h"
#include "cuda/runtime.cuh"

namespace ak::attention::decode::cuda {

namespace {

__global__ void __launch_bounds__(kThreads) decode_kernel(Problem p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const DecodeSource source(p, blockIdx.x, blockIdx.y, blockIdx.z);
  tiled::Block<DecodeSource>(source).run_on_device(smem);
}

// One block per (sequence, KV head, row), a thread per output column.
__global__ void combine_kernel(Problem p) {
  const int64_t R = p.rows(), x = blockIdx.x;
  const int64_t r = x % R, hk = (x / R) % p.Hkv, b = x / (R * p.Hkv);
  for (int64_t c = threadIdx.x; c < p.D; c += blockDim.x) combine(p, b, hk, r, c);
}

}  // namespace

void run(const Problem& problem, int device) {
  ak::cuda::DeviceGuard guard(device);
  const cudaStream_t stream = ak::cuda::stream(device);
  Problem p = problem;
  const int64_t R = p.rows();
  const size_t smem = static_cast<size_t>(tiled::Shared::bytes(R, p.D));
  AK_CUDA_CHECK(cudaFuncSetAttribute(decode_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  const int64_t floats = p.splits > 1 ? p.splits * p.B * p.Hkv * R * (p.D + 1) : 0;
  ak::cuda::Scratch scratch(device, static_cast<size_t>(floats > 0 ? floats : 1) * sizeof(float));
  if (p.splits > 1) {
    p.partial = scratch.as<float>();
    p.partial_lse = p.partial + p.splits * p.B * p.Hkv * R * p.D;
  }
  const dim3 grid(static_cast<unsigned>(p.splits), static_cast<unsigned>(p.Hkv), static_cast<unsigned>(p.B));
  decode_kernel<<<grid, kThreads, smem, stream>>>(p);
  ak::cuda::check_launch("decode_kernel");
  if (p.splits == 1) return;
  combine_kernel<<<static_cast<unsigned>(p.B * p.Hkv * R), 128, 0, stream>>>(p);
  ak::cuda::check_launch("decode_combine_kernel");
}

}  // namespace ak::attention::decode::cuda
