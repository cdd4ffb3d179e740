// The decode backends (cpu.cpp: the blocks run phase by phase on the host; cuda.cu: the kernel), for
// ak_attention_decode.
#pragma once

#include "attention/decode/problem.h"

namespace ak::attention::decode {

// Blocks the split plan aims for: two per multiprocessor of an H200 (the CPU runs the same plan, so its
// tests cover the split and the combine).
constexpr int64_t kBlocksWanted = 2 * 132;

namespace cpu {
void run(const Problem& p);
}
namespace cuda {
void run(const Problem& p, int device);
}

}  // namespace ak::attention::decode
