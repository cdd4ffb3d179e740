// initcheck and bulk-async (TMA) stores: writer() fills b1 with cp.async.bulk and b2 with
// cp.async.bulk.tensor from shared memory, and b3 with plain stores; reader() reads all three and the
// program checks the sum. With compute-sanitizer 2025.3.1 on an H200 the sum is right, memcheck is clean
// and initcheck reports 504 uninitialised reads, all in b1 and b2: the tool does not record the bulk
// stores as writes. tools/sanitize.ts lists the sites where that explains the reports.
//
//   nvcc -arch=sm_90a -o /tmp/bulk_store tools/probes/initcheck_bulk_store.cu -lcuda
//   compute-sanitizer --tool initcheck /tmp/bulk_store
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdio>

__global__ void writer(float* buf1, float* buf3, const __grid_constant__ CUtensorMap map) {
  __shared__ alignas(128) float tile[256];
  for (int i = threadIdx.x; i < 256; i += blockDim.x) tile[i] = i;
  for (int i = threadIdx.x; i < 256; i += blockDim.x) buf3[i] = i;
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(tile));
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], 1024;" ::"l"(buf1), "r"(s) : "memory");
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];"
                 ::"l"(&map), "r"(s), "r"(0), "r"(0) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  }
}

__global__ void reader(const float* b1, const float* b2, const float* b3, float* out) {
  float s = 0;
  for (int i = threadIdx.x; i < 256; i += blockDim.x) s += b1[i] + 2 * b2[i] + 3 * b3[i];
  atomicAdd(out, s);
}

int main() {
  float *b1, *b2, *b3, *out;
  cudaMalloc(&b1, 1024); cudaMalloc(&b2, 1024); cudaMalloc(&b3, 1024); cudaMalloc(&out, 4);
  cudaMemset(out, 0, 4);
  CUtensorMap map;
  cuuint64_t dims[2] = {16, 16}, strides[1] = {64};
  cuuint32_t box[2] = {16, 16}, es[2] = {1, 1};
  CUresult r = cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, b2, dims, strides, box, es,
                                      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                      CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) { printf("encode failed %d\n", r); return 1; }
  writer<<<1, 128>>>(b1, b3, map);
  reader<<<1, 128>>>(b1, b2, b3, out);
  float h = 0;
  cudaMemcpy(&h, out, 4, cudaMemcpyDeviceToHost);
  printf("sum %g (expected %g) err %s\n", h, 6.0 * 255 * 256 / 2, cudaGetErrorString(cudaGetLastError()));
  return 0;
}
