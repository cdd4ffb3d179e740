// The CUDA forward's host pieces shared by its 16-bit (dispatch.cu) and float8_e4m3 (fp8.cu) paths.
#pragma once

#include "attention/fwd/params.h"
#include "attention/problem.h"

namespace ak::attention::cuda {

// 16-byte copies (and TMA) need the base and every stride that steps (extent > 1) to be a nonzero
// multiple of 16 bytes.
bool aligned_16(const ak_tensor& t);

// The kernels' parameters of a validated call: pointers, strides, extents, scale, soft cap, window.
FwdParams forward_params(const AttnFwd& a);

// float8_e4m3 inputs: the 8-bit Hopper kernel where the planner serves it, else the inputs dequantised
// to the output dtype and the 16-bit forward.
void attention_fwd_e4m3(const AttnFwd& a);

}  // namespace ak::attention::cuda
