// The CPU backend of ak_paged_decode (decode/cpu.cpp).
#pragma once

#include "linear/decode/problem.h"

namespace ak::linear::cpu {

void paged_decode(const PagedDecode& d);

}  // namespace ak::linear::cpu
