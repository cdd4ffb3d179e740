// Fast backward, stage "dstates" v2: launcher and instantiations (the kernel:
// cuda_bwd_fast_dstates8.cuh).
#include <algorithm>

#include "../cuda/runtime.cuh"
#include "cuda_bwd_fast_dstates8.cuh"

namespace ak::linear::cuda::bwd {
using namespace dstates8_detail;

namespace {

// State columns per block: asked for (ATTNKIT_LINEAR_BWD_DVS, at most D), or the widest of D, 64, 32
// that still gives two thirds of the multiprocessors a block (one block per multiprocessor at D = 128).
// Narrower slices also where a wider one's shared memory exceeds the device's limit.
// jobs: blocks per sequence, head and slice (the segment passes run several).
template <class T, int D>
int slice_width(const Problem& p, int asked, int jobs = 1) {
  int dev = 0;
  AK_CUDA_CHECK(cudaGetDevice(&dev));
  const cudaDeviceProp& props = ak::cuda::props(dev);
  auto fits = [&](int vs) {
    const size_t need = vs == 128 ? sizeof(Smem<T, D, 128 <= D ? 128 : D>) : vs == 64 ? sizeof(Smem<T, D, 64>)
                                                                                        : sizeof(Smem<T, D, 32>);
    return need <= props.sharedMemPerBlockOptin;
  };
  const int64_t pairs = static_cast<int64_t>(p.N) * p.H * jobs;
  const int64_t want = 2 * static_cast<int64_t>(props.multiProcessorCount) / 3;
  for (int vs = D < 128 ? D : 128; vs > 32; vs /= 2) {
    if (!fits(vs)) continue;
    if (asked != 0 ? vs <= asked : pairs * (D / vs) >= want) return vs;
  }
  return 32;
}

// Blocks of the segment kernel resident per multiprocessor at slice width VS (0: does not fit).
template <class T, int D, int VS>
int seg_resident() {
  constexpr size_t smem = sizeof(Smem<T, D, VS>);
  int dev = 0;
  AK_CUDA_CHECK(cudaGetDevice(&dev));
  if (smem > ak::cuda::props(dev).sharedMemPerBlockOptin) return 0;
  AK_CUDA_CHECK(cudaFuncSetAttribute(fast_dstates8<T, D, VS, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  int blocks = 0;
  AK_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, fast_dstates8<T, D, VS, true>, kThreads, smem));
  return blocks;
}

// Slice width of a segment pass (`jobs` chains per sequence and head): asked for, or the one with the
// least modelled time per chunk step (seg_waves_us, cuda_bwd_segments.cuh: the plan's model). Unlike
// the plain run's rule, this counts the waves a pass of many chains needs (at D = 128 one block per
// multiprocessor whatever the width).
template <class T, int D>
int seg_slice_width(const Problem& p, int asked, int jobs) {
  if (asked != 0) return slice_width<T, D>(p, asked, jobs);
  int dev = 0;
  AK_CUDA_CHECK(cudaGetDevice(&dev));
  const int64_t sms = ak::cuda::props(dev).multiProcessorCount;
  const int64_t chains = static_cast<int64_t>(p.N) * p.H * jobs;
  int best = 32;
  double best_t = 1e300;
  for (int vs = D; vs >= 32; vs /= 2) {
    int r = 0;
    if constexpr (D == 128) r = vs == 128 ? seg_resident<T, D, 128>() : 0;
    if (vs == 64) r = seg_resident<T, D, 64>();
    if (vs == 32) r = seg_resident<T, D, 32>();
    if (r <= 0) continue;
    const double t = seg_waves_us(true, D, chains, vs, r, sms);
    if (t < best_t * 0.999) best_t = t, best = vs;
  }
  return best;
}

template <class T, int D, int VS, bool Seg = false>
void launch(const Problem& p, const FastWork<T>& w, cudaStream_t s, const SegParams& sg = SegParams{}) {
  constexpr size_t smem = sizeof(Smem<T, D, VS>);
  AK_CUDA_CHECK(cudaFuncSetAttribute(fast_dstates8<T, D, VS, Seg>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  const int64_t blocks = static_cast<int64_t>(D / VS) * p.N * seg_jobs(Seg ? sg.pass : 0, sg.count);
  require(blocks < (int64_t{1} << 31), "delta_rule_bwd on CUDA: too many sequences for the dstates pass");
  fast_dstates8<T, D, VS, Seg><<<dim3(static_cast<unsigned>(blocks), p.H), kThreads, smem, s>>>(p, w, sg);
  ak::cuda::check_launch(Seg ? "delta_bwd fast: dstates v2 (segments)" : "delta_bwd fast: dstates v2");
}

}  // namespace

template <class T, int D>
void launch_fast_dstates8(const Problem& p, const FastWork<T>& w, int vs, cudaStream_t s) {
  switch (slice_width<T, D>(p, vs)) {
    case 128:
      if constexpr (D >= 128) launch<T, D, 128>(p, w, s);
      break;
    case 64:
      launch<T, D, 64>(p, w, s);
      break;
    default:
      launch<T, D, 32>(p, w, s);
  }
}

template <class T, int D>
void launch_fast_dstates8_seg(const Problem& p, const FastWork<T>& w, int vs, const SegParams& sg,
                              cudaStream_t s) {
  switch (seg_slice_width<T, D>(p, vs, seg_jobs(sg.pass, sg.count))) {
    case 128:
      if constexpr (D == 128) launch<T, D, 128, true>(p, w, s, sg);
      break;
    case 64:
      launch<T, D, 64, true>(p, w, s, sg);
      break;
    default:
      launch<T, D, 32, true>(p, w, s, sg);
  }
}

#define AK_INSTANTIATE(T, D)                                                                         \
  template void launch_fast_dstates8<T, D>(const Problem&, const FastWork<T>&, int, cudaStream_t); \
  template void launch_fast_dstates8_seg<T, D>(const Problem&, const FastWork<T>&, int, const SegParams&, \
                                               cudaStream_t);
AK_INSTANTIATE(__nv_bfloat16, 64)
AK_INSTANTIATE(__nv_bfloat16, 128)
AK_INSTANTIATE(__half, 64)
AK_INSTANTIATE(__half, 128)
#undef AK_INSTANTIATE
// D = 256 runs without segments (run_typed never plans them there).
template void launch_fast_dstates8<__nv_bfloat16, 256>(const Problem&, const FastWork<__nv_bfloat16>&, int,
                                                        cudaStream_t);
template void launch_fast_dstates8<__half, 256>(const Problem&, const FastWork<__half>&, int, cudaStream_t);

}  // namespace ak::linear::cuda::bwd
