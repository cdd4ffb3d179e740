// Tiled tensor maps for the Hopper kernels (see tensor_map.h).
#include <cudaTypedefs.h>

#include <mutex>
#include <string>

#include "cuda/runtime.cuh"
#include "cuda/tensor_map.h"

namespace ak::cuda {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_function() {
  static std::once_flag once;
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  static cudaError_t lookup_error = cudaSuccess;
  static cudaDriverEntryPointQueryResult query = cudaDriverEntryPointSuccess;
  std::call_once(once, [] {
    void* ptr = nullptr;
    lookup_error = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &query);
    fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  });
  AK_CUDA_CHECK(lookup_error);
  if (query != cudaDriverEntryPointSuccess || fn == nullptr) {
    fail(AK_ERR_CUDA, "the CUDA driver has no cuTensorMapEncodeTiled");
  }
  return fn;
}

}  // namespace

void encode_tiled_map(CUtensorMap& map, int dtype, const void* data, int rank, const cuuint64_t* dims,
                      const cuuint64_t* strides, const cuuint32_t* box, const char* what) {
  const cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  const CUtensorMapDataType type = dtype == AK_BFLOAT16       ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                   : dtype == AK_FLOAT8_E4M3 ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                                             : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const CUresult res = encode_function()(&map, type, static_cast<cuuint32_t>(rank), const_cast<void*>(data), dims,
                                         strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                         CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                         CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (res != CUDA_SUCCESS) {
    fail(AK_ERR_CUDA, std::string("cuTensorMapEncodeTiled failed for ") + what + " (CUresult " +
                          std::to_string(static_cast<int>(res)) + ")");
  }
}

void encode_rows_map(CUtensorMap& map, int dtype, const void* data, int64_t d, int64_t rows, int64_t heads,
                     int64_t batch, int64_t row_stride, int64_t head_stride, int64_t batch_stride, int box_rows,
                     const char* what) {
  const int64_t elem = dtype == AK_FLOAT8_E4M3 ? 1 : 2;
  // Extent-1 dimensions never step; give them a stride the encoder accepts.
  auto stride_bytes = [&](int64_t extent, int64_t stride) { return extent > 1 ? stride * elem : d * elem; };
  const cuuint64_t dims[4] = {cuuint64_t(d), cuuint64_t(rows), cuuint64_t(heads), cuuint64_t(batch)};
  const cuuint64_t strides[3] = {cuuint64_t(stride_bytes(rows, row_stride)), cuuint64_t(stride_bytes(heads, head_stride)),
                                 cuuint64_t(stride_bytes(batch, batch_stride))};
  const cuuint32_t box[4] = {cuuint32_t(128 / elem), cuuint32_t(box_rows), 1, 1};  // one 128-byte swizzle row
  encode_tiled_map(map, dtype, data, 4, dims, strides, box, what);
}

}  // namespace ak::cuda
