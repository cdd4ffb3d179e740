// The CUDA backend of ak_state_pool_copy and ak_zero_padding_rows (decode/pool_cuda.cu): one launch
// each over every sequence, the indices (and offsets) read on the device.
#pragma once

#include "linear/decode/pool_problem.h"

namespace ak::linear::cuda {

void pool_copy(const PoolCopy& p);
void zero_padding_rows(const PaddingRows& p);

}  // namespace ak::linear::cuda
