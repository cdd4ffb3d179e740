// A state pass split into segments (context parallelism within one GPU). Over a segment of chunks the
// end state is affine in the start state, S_end = M S_start + N (M: K x K, acting on the state's rows),
// so the segments can be summarised in parallel, N from a zero start with the real inputs and M from
// the identity with the inputs taken as zero, and chained afterwards:
//   E_1 = N_0,  E_{j+1} = M_j E_j + N_j          (entry state of segment j + 1)
// The summaries and entry states are fp32 [N * H][Pm][D][D] (row index n H + h, Pm = segments - 1).
#pragma once

#include <cuda_runtime.h>

namespace ak::linear::cuda {

// entry[j - 1] (j = 1 .. Pm) = fwd[0] for j = 1, tr[j - 2] entry[j - 2] + fwd[j - 1] after; D in
// {64, 128, 256}.
void launch_segment_combine(const float* fwd, const float* tr, float* entry, int N, int H, int D, int Pm,
                            cudaStream_t stream);

}  // namespace ak::linear::cuda
