// The CUDA backend of ak_paged_conv1d (decode/conv_cuda.cu).
#pragma once

#include "linear/decode/conv_problem.h"

namespace ak::linear::cuda {

void paged_conv(const PagedConv& d);

}  // namespace ak::linear::cuda
