// The CPU backend of ak_paged_conv1d (decode/conv_cpu.cpp).
#pragma once

#include "linear/decode/conv_problem.h"

namespace ak::linear::cpu {

void paged_conv(const PagedConv& d);

}  // namespace ak::linear::cpu
