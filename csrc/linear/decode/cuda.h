// The CUDA backend of ak_paged_decode (decode/cuda.cu).
#pragma once

#include "linear/decode/problem.h"

namespace ak::linear::cuda {

void paged_decode(const PagedDecode& d);

}  // namespace ak::linear::cuda
