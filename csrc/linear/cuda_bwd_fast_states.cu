// Fast backward, the sequential stages: launchers and instantiations (kernels:
// cuda_bwd_fast_states.cuh).
#include <algorithm>

#include "../cuda/runtime.cuh"
#include "cuda_bwd_fast_states.cuh"

namespace ak::linear::cuda::bwd {
using namespace states_detail;

namespace {

// State columns per block. Asked for (ATTNKIT_LINEAR_BWD_VS; 16 only at D = 128), or automatic: 64, or
// 32 when 64 leaves a third of the multiprocessors idle (few sequences and heads: the sequential
// stages then take half as long per block).
// jobs: blocks per sequence, head and slice (the segment passes run several).
template <int D>
int slice_width(const Problem& p, int asked, int jobs = 1) {
  if (asked == 16) return D == 128 ? 16 : 32;
  if (asked != 0) return asked;
  int dev = 0;
  AK_CUDA_CHECK(cudaGetDevice(&dev));
  const int64_t blocks = static_cast<int64_t>(D / 64) * p.H * p.N * jobs;
  return blocks * 3 < 2 * static_cast<int64_t>(ak::cuda::props(dev).multiProcessorCount) ? 32 : 64;
}

template <class T, int D, int VS>
constexpr size_t states_smem() {
  return 2 * sizeof(StatesBuf<T, D, VS>) + sizeof(T) * D * (VS + 8);
}

// Blocks of the segment kernel resident per multiprocessor at slice width VS.
template <class T, int D, int VS>
int seg_resident() {
  constexpr size_t smem = states_smem<T, D, VS>();
  AK_CUDA_CHECK(cudaFuncSetAttribute(fast_states<T, D, VS, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  int blocks = 0;
  AK_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, fast_states<T, D, VS, true>, kThreads, smem));
  return blocks;
}

// Slice width of a segment pass (`jobs` chains per sequence and head): asked for, or the one with the
// least modelled time per chunk step (seg_waves_us, cuda_bwd_segments.cuh: the plan's model). Unlike
// the plain run's rule, this counts the waves a pass of many chains needs.
template <class T, int D>
int seg_slice_width(const Problem& p, int asked, int jobs) {
  if (asked != 0) return slice_width<D>(p, asked, jobs);
  int dev = 0;
  AK_CUDA_CHECK(cudaGetDevice(&dev));
  const int64_t sms = ak::cuda::props(dev).multiProcessorCount;
  const int64_t chains = static_cast<int64_t>(p.N) * p.H * jobs;
  int best = 64;
  double best_t = 1e300;
  for (int vs : {64, 32}) {
    const int64_t res = std::max(1, vs == 64 ? seg_resident<T, D, 64>() : seg_resident<T, D, 32>());
    const double t = seg_waves_us(false, D, chains, vs, res, sms);
    if (t < best_t * 0.999) best_t = t, best = vs;
  }
  return best;
}

template <class T, int D, int VS, bool Seg = false>
void launch_states(const Problem& p, const FastWork<T>& w, cudaStream_t s, const SegParams& sg = SegParams{}) {
  constexpr size_t smem = states_smem<T, D, VS>();
  AK_CUDA_CHECK(cudaFuncSetAttribute(fast_states<T, D, VS, Seg>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  const int64_t blocks = static_cast<int64_t>(D / VS) * p.N * seg_jobs(Seg ? sg.pass : 0, sg.count);
  require(blocks < (int64_t{1} << 31), "delta_rule_bwd on CUDA: too many sequences for the state pass");
  fast_states<T, D, VS, Seg><<<dim3(static_cast<unsigned>(blocks), p.H), kThreads, smem, s>>>(p, w, sg);
  ak::cuda::check_launch(Seg ? "delta_bwd fast: states (segments)" : "delta_bwd fast: states");
}

// Slices of 32 columns or fewer run one block per multiprocessor: double-buffer them.
template <class T, int D, int VS>
void launch_dstates(const Problem& p, const FastWork<T>& w, cudaStream_t s) {
  constexpr int kStages = VS <= 32 ? 2 : 1;
  constexpr size_t smem = sizeof(DStatesSmem<T, D, VS, kStages>);
  AK_CUDA_CHECK(cudaFuncSetAttribute(fast_dstates<T, D, VS, kStages>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  fast_dstates<T, D, VS, kStages><<<dim3((D / VS) * p.N, p.H), kThreads, smem, s>>>(p, w);
  ak::cuda::check_launch("delta_bwd fast: dstates");
}

}  // namespace

template <class T, int D>
void launch_fast_states(const Problem& p, const FastWork<T>& w, int vs, cudaStream_t s) {
  if (p.NCt == 0) return;
  switch (slice_width<D>(p, vs)) {
    case 16:
      if constexpr (D == 128) launch_states<T, D, 16>(p, w, s);
      break;
    case 32:
      launch_states<T, D, 32>(p, w, s);
      break;
    default:
      launch_states<T, D, 64>(p, w, s);
  }
}

template <class T, int D>
void launch_fast_states_seg(const Problem& p, const FastWork<T>& w, int vs, const SegParams& sg, cudaStream_t s) {
  if (p.NCt == 0) return;
  switch (seg_slice_width<T, D>(p, vs, seg_jobs(sg.pass, sg.count))) {
    case 16:
      if constexpr (D == 128) launch_states<T, D, 16, true>(p, w, s, sg);
      break;
    case 32:
      launch_states<T, D, 32, true>(p, w, s, sg);
      break;
    default:
      launch_states<T, D, 64, true>(p, w, s, sg);
  }
}

template <class T, int D>
void launch_fast_dstates(const Problem& p, const FastWork<T>& w, int vs, cudaStream_t s) {
  switch (slice_width<D>(p, vs)) {
    case 16:
      if constexpr (D == 128) launch_dstates<T, D, 16>(p, w, s);
      break;
    case 32:
      launch_dstates<T, D, 32>(p, w, s);
      break;
    default:
      launch_dstates<T, D, 64>(p, w, s);
  }
}

#define AK_INSTANTIATE(T, D)                                                                        \
  template void launch_fast_states<T, D>(const Problem&, const FastWork<T>&, int, cudaStream_t);   \
  template void launch_fast_states_seg<T, D>(const Problem&, const FastWork<T>&, int, const SegParams&, \
                                             cudaStream_t);                                             \
  template void launch_fast_dstates<T, D>(const Problem&, const FastWork<T>&, int, cudaStream_t);
AK_INSTANTIATE(__nv_bfloat16, 64)
AK_INSTANTIATE(__nv_bfloat16, 128)
AK_INSTANTIATE(__half, 64)
AK_INSTANTIATE(__half, 128)
#undef AK_INSTANTIATE
// D = 256: the plain states pass only (no segments; dstates is always v2 there).
template void launch_fast_states<__nv_bfloat16, 256>(const Problem&, const FastWork<__nv_bfloat16>&, int,
                                                      cudaStream_t);
template void launch_fast_states<__half, 256>(const Problem&, const FastWork<__half>&, int, cudaStream_t);

}  // namespace ak::linear::cuda::bwd
