// CUDA runtime of attnkit: devices, one stream per device and thread, the stream-ordered memory pool,
// events.
#include <cstdint>
#include <cstring>
#include <mutex>

#include "core/memory_tracker.h"
#include "cuda/backend.h"
#include "cuda/runtime.cuh"

namespace ak::cuda {
namespace {

constexpr int kMaxDevices = 64;

struct DeviceState {
  std::once_flag once;
  cudaDeviceProp props{};
  MemoryTracker memory;
  cudaError_t init_error = cudaSuccess;
};

DeviceState& state(int device) {
  static DeviceState states[kMaxDevices];
  require(device >= 0 && device < kMaxDevices, "device: index " + std::to_string(device) + " is out of range");
  DeviceState& s = states[device];
  std::call_once(s.once, [&] {
    int previous = 0;
    cudaGetDevice(&previous);
    s.init_error = cudaSetDevice(device);
    if (s.init_error == cudaSuccess) s.init_error = cudaGetDeviceProperties(&s.props, device);
    if (s.init_error == cudaSuccess) {
      // Keep freed blocks in the pool: an op's outputs and intermediates then cost microseconds.
      cudaMemPool_t pool;
      s.init_error = cudaDeviceGetDefaultMemPool(&pool, device);
      uint64_t threshold = UINT64_MAX;
      if (s.init_error == cudaSuccess)
        s.init_error = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold);
    }
    cudaSetDevice(previous);
  });
  check(s.init_error, "initialising the device");
  return s;
}

struct Event {
  cudaEvent_t event;
  int device;
};

}  // namespace

namespace {

// The first error that left the CUDA context unusable (a kernel fault is sticky: every later call
// fails with it), kept so that later calls can name the cause instead of a bare error code.
std::mutex fault_mutex;
std::string first_fault;

bool is_sticky(cudaError_t err) {
  switch (err) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
    case cudaErrorContextIsDestroyed:
      return true;
    default:
      return false;
  }
}

std::string lost_context_message() {
  return "the CUDA context was lost to an earlier fault (" + first_fault + "); restart the process";
}

}  // namespace

void check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  const ak_status status = err == cudaErrorMemoryAllocation ? AK_ERR_OUT_OF_MEMORY : AK_ERR_CUDA;
  std::string message = std::string(what) + " failed: " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
  {
    std::lock_guard<std::mutex> lock(fault_mutex);
    if (!first_fault.empty()) {
      message += "; " + lost_context_message();
    } else if (is_sticky(err)) {
      first_fault = message;
    }
  }
  fail(status, message);
}

void check_usable() {
  std::lock_guard<std::mutex> lock(fault_mutex);
  if (!first_fault.empty()) fail(AK_ERR_CUDA, lost_context_message());
}

// Each thread (a Deno Worker is one) orders its work on a stream of its own, so that one thread's
// synchronisations and graph captures never take in another thread's kernels. Created at the thread's
// first use of the device; kept for the process (a thread's exit does not destroy it).
cudaStream_t stream(int device) {
  state(device);
  thread_local cudaStream_t streams[kMaxDevices] = {};
  cudaStream_t& mine = streams[device];
  if (mine == nullptr) {
    int previous = 0;
    cudaGetDevice(&previous);
    cudaError_t err = cudaSetDevice(device);
    if (err == cudaSuccess) err = cudaStreamCreateWithFlags(&mine, cudaStreamNonBlocking);
    cudaSetDevice(previous);
    if (err != cudaSuccess) mine = nullptr;
    check(err, "creating the thread's stream");
  }
  return mine;
}
const cudaDeviceProp& props(int device) { return state(device).props; }

DeviceGuard::DeviceGuard(int device) : device_(device) {
  check_usable();
  AK_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device_) AK_CUDA_CHECK(cudaSetDevice(device_));
}
DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0 && previous_ != device_) cudaSetDevice(previous_);
}

Scratch::Scratch(int device, size_t bytes) : device_(device) {
  if (bytes == 0) return;
  ptr_ = capture_alloc(device, bytes);  // a graph's scratch must outlive the capture
  if (ptr_ == nullptr) AK_CUDA_CHECK(cudaMallocAsync(&ptr_, bytes, stream(device)));
}
Scratch::~Scratch() {
  if (ptr_ != nullptr && !release_graph_memory(device_, ptr_)) cudaFreeAsync(ptr_, stream(device_));
}

int device_count() {
  static int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();
      n = 0;  // no driver or no device: the CPU backend still works
    }
    return n;
  }();
  return count;
}

void device_info(int device, ak_device_props* out) {
  DeviceGuard guard(device);
  const cudaDeviceProp& p = props(device);
  std::memset(out, 0, sizeof(*out));
  std::strncpy(out->name, p.name, sizeof(out->name) - 1);
  out->major = p.major;
  out->minor = p.minor;
  out->sm_count = p.multiProcessorCount;
  out->max_smem_per_block = static_cast<int32_t>(p.sharedMemPerBlockOptin);
  out->l2_bytes = p.l2CacheSize;
  size_t free_b = 0, total_b = 0;
  AK_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  out->total_bytes = static_cast<int64_t>(total_b);
  out->free_bytes = static_cast<int64_t>(free_b);
  int value = 0;
  if (cudaDeviceGetAttribute(&value, cudaDevAttrClockRate, device) == cudaSuccess) out->clock_khz = value;
  if (cudaDeviceGetAttribute(&value, cudaDevAttrMemoryClockRate, device) == cudaSuccess)
    out->memory_clock_khz = value;
  if (cudaDeviceGetAttribute(&value, cudaDevAttrGlobalMemoryBusWidth, device) == cudaSuccess)
    out->memory_bus_bits = value;
  cudaGetLastError();
}

void synchronize(int device) {
  DeviceGuard guard(device);
  refuse_while_capturing(device, "synchronize");
  AK_CUDA_CHECK(cudaStreamSynchronize(stream(device)));
}

void* alloc(int device, int64_t bytes) {
  DeviceGuard guard(device);
  void* p = capture_alloc(device, static_cast<size_t>(bytes));  // a graph's tensors outlive the capture
  if (p == nullptr) AK_CUDA_CHECK(cudaMallocAsync(&p, static_cast<size_t>(bytes), stream(device)));
  state(device).memory.on_alloc(p, bytes);
  return p;
}

void free(int device, void* ptr) {
  DeviceGuard guard(device);
  require(state(device).memory.on_free(ptr), "ptr: not a live CUDA allocation of attnkit (freed twice?)");
  if (release_graph_memory(device, ptr)) return;
  AK_CUDA_CHECK(cudaFreeAsync(ptr, stream(device)));
}

int64_t thread_bytes_in_use(int device) { return state(device).memory.thread_in_use(); }

void memory_stats(int device, ak_memory_stats_t* out) {
  DeviceGuard guard(device);
  DeviceState& s = state(device);
  s.memory.fill(out);
  cudaMemPool_t pool;
  AK_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  uint64_t reserved = 0, used = 0;
  AK_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
  AK_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
  out->pool_reserved = static_cast<int64_t>(reserved);
  out->pool_used = static_cast<int64_t>(used);
}

void* stream_handle(int device) { return static_cast<void*>(stream(device)); }

void set_current(int device) {
  state(device);
  check(cudaSetDevice(device), "making the device current");
}

void trim_pool(int device) {
  DeviceGuard guard(device);
  refuse_while_capturing(device, "trimMemoryPool");
  AK_CUDA_CHECK(cudaStreamSynchronize(stream(device)));
  cudaMemPool_t pool;
  AK_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  AK_CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
}

void copy_across(const ak_tensor& dst, const ak_tensor& src) {
  const size_t bytes = static_cast<size_t>(numel(src)) * dtype_size(src.dtype);
  if (dst.device_type == AK_CUDA && src.device_type == AK_CUDA) {
    DeviceGuard guard(dst.device_index);
    refuse_while_capturing(src.device_index, "a copy between devices");
    refuse_while_capturing(dst.device_index, "a copy between devices");
    // Order after pending work on both streams, copy, then wait: the caller gets a finished copy.
    AK_CUDA_CHECK(cudaStreamSynchronize(stream(src.device_index)));
    AK_CUDA_CHECK(cudaMemcpyPeerAsync(dst.data, dst.device_index, src.data, src.device_index, bytes,
                                      stream(dst.device_index)));
    AK_CUDA_CHECK(cudaStreamSynchronize(stream(dst.device_index)));
    return;
  }
  const int device = dst.device_type == AK_CUDA ? dst.device_index : src.device_index;
  DeviceGuard guard(device);
  refuse_while_capturing(device, dst.device_type == AK_CUDA ? "a copy from the host" : "a copy to the host");
  const cudaMemcpyKind kind = dst.device_type == AK_CUDA ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
  AK_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, bytes, kind, stream(device)));
  // The CPU side is attnkit host memory that may be freed or read right after: finish the copy.
  AK_CUDA_CHECK(cudaStreamSynchronize(stream(device)));
}

void copy_to_host(const ak_tensor& src, void* host, int64_t bytes) {
  DeviceGuard guard(src.device_index);
  refuse_while_capturing(src.device_index, "reading device memory back to the host");
  AK_CUDA_CHECK(cudaMemcpyAsync(host, src.data, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost,
                                stream(src.device_index)));
  AK_CUDA_CHECK(cudaStreamSynchronize(stream(src.device_index)));
}

void copy_from_host(const ak_tensor& dst, const void* host, int64_t bytes) {
  DeviceGuard guard(dst.device_index);
  refuse_while_capturing(dst.device_index, "a copy from the host");
  // From pageable memory the call returns once the buffer has been staged, so the caller may reuse it.
  AK_CUDA_CHECK(cudaMemcpyAsync(dst.data, host, static_cast<size_t>(bytes), cudaMemcpyHostToDevice,
                                stream(dst.device_index)));
}

void* event_create(int device) {
  DeviceGuard guard(device);
  Event* e = new Event{nullptr, device};
  const cudaError_t err = cudaEventCreate(&e->event);
  if (err != cudaSuccess) {
    delete e;
    check(err, "cudaEventCreate");
  }
  return e;
}

void event_record(void* event) {
  Event* e = static_cast<Event*>(event);
  DeviceGuard guard(e->device);
  AK_CUDA_CHECK(cudaEventRecord(e->event, stream(e->device)));
}

double event_elapsed_ms(void* start, void* end) {
  Event* a = static_cast<Event*>(start);
  Event* b = static_cast<Event*>(end);
  DeviceGuard guard(b->device);
  refuse_while_capturing(b->device, "reading an event's time");
  AK_CUDA_CHECK(cudaEventSynchronize(b->event));
  float ms = 0;
  AK_CUDA_CHECK(cudaEventElapsedTime(&ms, a->event, b->event));
  return ms;
}

void event_destroy(void* event) {
  Event* e = static_cast<Event*>(event);
  DeviceGuard guard(e->device);
  cudaEventDestroy(e->event);
  delete e;
}

}  // namespace ak::cuda
