// Tensor maps (TMA descriptors) of the Hopper attention forward. cuTensorMapEncodeTiled is a driver
// function: it is looked up through the runtime (cudaGetDriverEntryPointByVersion), so the library
// does not link libcuda.
#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <mutex>
#include <string>

#include "cuda_fwd_sm90.cuh"

namespace ak::attention::cuda::sm90 {
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
    fail(AK_ERR_CUDA, "attention_fwd: the driver has no cuTensorMapEncodeTiled");
  }
  return fn;
}

// A 4-D map over [batch, rows, heads, D] (innermost first: D, rows, heads, batch) whose box is
// 64 elements of D (one 128-byte swizzle row) by box_rows rows.
void encode(CUtensorMap& map, const void* data, int dtype, int64_t d, int64_t rows, int64_t heads, int64_t batch,
            int64_t row_stride, int64_t head_stride, int64_t batch_stride, int box_rows, const char* what) {
  const int64_t elem = 2;
  // Extent-1 dimensions never step; give them a stride the encoder accepts.
  auto stride_bytes = [&](int64_t extent, int64_t stride) { return extent > 1 ? stride * elem : d * elem; };
  const cuuint64_t dims[4] = {cuuint64_t(d), cuuint64_t(rows), cuuint64_t(heads), cuuint64_t(batch)};
  const cuuint64_t strides[3] = {cuuint64_t(stride_bytes(rows, row_stride)), cuuint64_t(stride_bytes(heads, head_stride)),
                                 cuuint64_t(stride_bytes(batch, batch_stride))};
  const cuuint32_t box[4] = {64, cuuint32_t(box_rows), 1, 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  const CUtensorMapDataType type =
      dtype == AK_BFLOAT16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const CUresult res = encode_function()(&map, type, 4, const_cast<void*>(data), dims, strides, box, element_strides,
                                         CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                         CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (res != CUDA_SUCCESS) {
    fail(AK_ERR_CUDA, std::string("attention_fwd: cuTensorMapEncodeTiled failed for ") + what + " (CUresult " +
                          std::to_string(static_cast<int>(res)) + ")");
  }
}

}  // namespace

void encode_attention_maps(const FwdParams& p, int block_m, int block_n, int dtype, Sm90Maps& maps) {
  const bool varlen = p.cu_q != nullptr;
  // Varlen tensors are packed [T, H, D]: one "batch" whose rows are all tokens. An extent of 0 (no
  // keys at all) still needs a valid map; no tile then reads it.
  const int64_t batch = varlen ? 1 : p.n_seq;
  const int64_t q_rows = std::max<int64_t>(1, varlen ? p.total_q : p.sq);
  const int64_t kv_rows = std::max<int64_t>(1, varlen ? p.total_kv : p.skv);
  encode(maps.q, p.q, dtype, p.d, q_rows, p.hq, batch, p.q_row, p.q_head, p.q_batch, block_m, "q");
  encode(maps.k, p.k, dtype, p.d, kv_rows, p.hkv, batch, p.k_row, p.k_head, p.k_batch, block_n, "k");
  encode(maps.v, p.v, dtype, p.d, kv_rows, p.hkv, batch, p.v_row, p.v_head, p.v_batch, block_n, "v");
}

}  // namespace ak::attention::cuda::sm90
