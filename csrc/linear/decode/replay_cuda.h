// The CUDA backend of the replay plan's entries (decode/replay_cuda.cu): the plan in three launches (a
// fill, a one-block scan of the runs' offsets, a block per sequence), the row picks and the cache writes
// in one launch each; nothing is read back.
#pragma once

#include "linear/decode/replay_problem.h"

namespace ak::linear::cuda {

void replay_plan(const ReplayPlan& p);
void replay_rows(const ReplayRows& r);
// The kept rows into the caches, or (k.counts set) the new counts into the count tensor.
void replay_keep(const ReplayKeep& k);

}  // namespace ak::linear::cuda
