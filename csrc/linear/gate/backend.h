// What each backend defines for the gate transforms (gate/entries.cpp), called with validated
// arguments. The forward needs at least one element; the backward writes d_a_log and d_dt_bias
// (zeros) even when there are no rows.
#pragma once

#include "core/common.h"
#include "linear/gate/call.h"

namespace ak::linear::gate {

AK_DECLARE_BACKENDS(void forward(const ForwardArgs& a); void backward(const BackwardArgs& a);)

}  // namespace ak::linear::gate
