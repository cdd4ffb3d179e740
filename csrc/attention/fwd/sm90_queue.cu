// The work-queue counters of the persistent Hopper forward (sm90_persistent.cuh): two ints
// per device, zeroed once here; every launch leaves them zeroed for the next one on the stream.
#include <mutex>
#include <unordered_map>

#include "attention/fwd/sm90_persistent.cuh"

namespace ak::attention::cuda::sm90 {

int* persistent_queue(int device, cudaStream_t stream) {
  static std::mutex mutex;
  static std::unordered_map<int, int*> queues;  // never freed: they live as long as the process
  std::lock_guard<std::mutex> lock(mutex);
  auto found = queues.find(device);
  if (found != queues.end()) return found->second;
  int* counters = nullptr;
  AK_CUDA_CHECK(cudaMalloc(&counters, 2 * sizeof(int)));
  AK_CUDA_CHECK(cudaMemsetAsync(counters, 0, 2 * sizeof(int), stream));  // the kernels' stream
  queues.emplace(device, counters);
  return counters;
}

}  // namespace ak::attention::cuda::sm90
