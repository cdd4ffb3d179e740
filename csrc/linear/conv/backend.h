// What each backend defines for the causal convolution (conv/entries.cpp), called with validated
// arguments.
#pragma once

#include "core/common.h"
#include "linear/conv/conv.h"

namespace ak::linear::conv {

// forward: the output rows (a.rows > 0 or none) and the final histories when given.
// backward: dx, d_initial and dweight where given; dweight's workspace is the backend's own.
AK_DECLARE_BACKENDS(void forward(const ForwardArgs& a); void backward(BackwardArgs a);)

}  // namespace ak::linear::conv
