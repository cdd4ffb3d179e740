// Tensor maps (TMA descriptors) for the Hopper kernels. cuTensorMapEncodeTiled is a driver function:
// it is looked up through the runtime (cudaGetDriverEntryPointByVersion), so the library does not
// link libcuda.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "include/attnkit.h"

namespace ak::cuda {

// A tiled map over 16-bit elements (dtype AK_BFLOAT16 or AK_FLOAT16) or bytes (AK_FLOAT8_E4M3)
// written with the 128-byte swizzle: `rank` dimensions innermost first (the innermost contiguous),
// strides in bytes of dimensions 1 .. rank - 1, box extents (the innermost 128 bytes, one swizzle
// row). Elements out of bounds load as zeros. `what` names the tensor in errors.
void encode_tiled_map(CUtensorMap& map, int dtype, const void* data, int rank, const cuuint64_t* dims,
                      const cuuint64_t* strides, const cuuint32_t* box, const char* what);

// A 4-D map over token rows [batch, rows, heads, d] (strides in elements; innermost first: d, rows,
// heads, batch) whose box is 128 bytes of d (one swizzle row: 64 16-bit or 128 8-bit elements) by
// box_rows rows.
void encode_rows_map(CUtensorMap& map, int dtype, const void* data, int64_t d, int64_t rows, int64_t heads,
                     int64_t batch, int64_t row_stride, int64_t head_stride, int64_t batch_stride, int box_rows,
                     const char* what);

// The map of a token-major [batch, rows, heads, d] tensor of 16-bit elements, from its descriptor.
inline void encode_token_rows_map(CUtensorMap& map, const ak_tensor& t, int box_rows, const char* what) {
  encode_rows_map(map, t.dtype, t.data, t.shape[3], t.shape[1], t.shape[2], t.shape[0], t.strides[1], t.strides[2],
                  t.strides[0], box_rows, what);
}

}  // namespace ak::cuda
