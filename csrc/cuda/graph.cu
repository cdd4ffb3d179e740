// Graph capture on attnkit's stream of a device: the capture's memory, the check record captured calls
// report into, and the instantiated graph that replays them.
//
// Memory: a graph's addresses must hold for every replay, so allocations made while capturing are real
// (cudaMalloc, legal while capturing) rather than stream-ordered. A block the capture frees is reused by
// its later allocations (one stream: a replay keeps the capture's order); every block stays with the
// graph until the graph is destroyed and no tensor made during the capture still points into it.
#include <cstddef>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cuda/backend.h"
#include "cuda/device_check.h"
#include "cuda/runtime.cuh"

namespace ak::cuda {
namespace {

constexpr int kMaxDevices = 64;

struct GraphMemory {
  std::unordered_map<void*, size_t> sizes;  // every block
  std::multimap<size_t, void*> idle;        // freed during the capture: reusable by it
  ~GraphMemory() {
    for (auto& block : sizes) cudaFree(block.first);
  }
};

// The part of a check record a reset clears (its mirror pointer stays).
constexpr size_t kCheckFields = offsetof(DeviceCheck, mirror);

struct Capture {
  bool active = false;
  std::shared_ptr<GraphMemory> memory;
  DeviceCheck* check = nullptr;   // device memory
  DeviceCheck* report = nullptr;  // its mirror: mapped pinned host memory, written by a failing check
  std::vector<std::string> labels;
};

struct Graph {
  int device = 0;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  std::shared_ptr<GraphMemory> memory;
  DeviceCheck* check = nullptr;
  DeviceCheck* report = nullptr;
  std::vector<std::string> labels;
};

std::mutex graph_mutex;
// A capture belongs to the thread that began it (its stream is that thread's): other threads' calls on
// the device are neither captured nor refused while it lasts.
thread_local Capture captures[kMaxDevices];
// Blocks a tensor made during a capture still holds, with the memory they keep alive.
std::unordered_map<void*, std::shared_ptr<GraphMemory>> held_blocks;

Capture& capture_of(int device) {
  require(device >= 0 && device < kMaxDevices, "device: index " + std::to_string(device) + " is out of range");
  return captures[device];
}

void free_records(DeviceCheck* check, DeviceCheck* report) {
  if (check != nullptr) cudaFree(check);
  if (report != nullptr) cudaFreeHost(report);
}

// Moves the capture's state out (the capture ends); blocks still in use become held by their tensors.
Capture finish(int device) {
  std::lock_guard<std::mutex> lock(graph_mutex);
  Capture& c = capture_of(device);
  Capture done = std::move(c);
  c = Capture{};
  if (done.memory) {
    std::unordered_set<void*> idle;
    for (auto& block : done.memory->idle) idle.insert(block.second);
    for (auto& block : done.memory->sizes) {
      if (idle.count(block.first) == 0) held_blocks[block.first] = done.memory;
    }
  }
  return done;
}

std::string describe(const DeviceCheck& r, const std::vector<std::string>& labels) {
  const auto n = [](int64_t x) { return std::to_string(x); };
  std::string what;
  switch (r.code) {
    case kCheckSlotPastPool:
      what = "state_indices: entry " + n(r.entry) + " is " + n(r.value) + ", past the " + n(r.limit) +
             " slots of state_cache";
      break;
    case kCheckSlotTwice:
      what = "state_indices: entries " + n(r.other) + " and " + n(r.entry) + " both name slot " + n(r.value) +
             " (each live slot at most once)";
      break;
    case kCheckOffsetsStart:
      what = "cu_seqlens: must start at 0, got " + n(r.value);
      break;
    case kCheckOffsetsDecrease:
      what = "cu_seqlens: must be nondecreasing, but entry " + n(r.entry) + " (" + n(r.value) + ") is below entry " +
             n(r.entry - 1) + " (" + n(r.other) + ")";
      break;
    case kCheckOffsetsPastEnd:
      what = "cu_seqlens: the last offset " + n(r.value) + " exceeds the " + n(r.limit) + " tokens of the call";
      break;
    default:
      what = "an unknown device check (code " + n(r.code) + ")";
  }
  const bool known = r.label >= 0 && static_cast<size_t>(r.label) < labels.size();
  return what + " (found on the device during a graph replay, in call " + n(r.label + 1) + " of the graph" +
         (known ? ", " + labels[static_cast<size_t>(r.label)] : std::string()) +
         "; the graph's later checked calls wrote nothing)";
}

}  // namespace

bool capturing(int device) {
  std::lock_guard<std::mutex> lock(graph_mutex);
  return capture_of(device).active;
}

void refuse_while_capturing(int device, const char* what) {
  if (!capturing(device)) return;
  fail(AK_ERR_UNSUPPORTED, std::string(what) + " cannot be captured in a graph (cuda:" + std::to_string(device) +
                               " is capturing): a captured call may not wait for the device or move data " +
                               "between host and device; do it before or after captureGraph");
}

DeviceCheck* capture_check(int device, const char* label, int32_t* label_id) {
  std::lock_guard<std::mutex> lock(graph_mutex);
  Capture& c = capture_of(device);
  if (!c.active) return nullptr;
  if (label_id != nullptr) {
    *label_id = static_cast<int32_t>(c.labels.size());
    c.labels.emplace_back(label);
  }
  return c.check;
}

void* capture_alloc(int device, size_t bytes) {
  std::lock_guard<std::mutex> lock(graph_mutex);
  Capture& c = capture_of(device);
  if (!c.active) return nullptr;
  const size_t want = bytes == 0 ? 1 : bytes;
  auto fit = c.memory->idle.lower_bound(want);
  if (fit != c.memory->idle.end() && fit->first <= 2 * want) {  // reuse, wasting at most half a block
    void* p = fit->second;
    c.memory->idle.erase(fit);
    return p;
  }
  void* p = nullptr;
  AK_CUDA_CHECK(cudaMalloc(&p, want));
  c.memory->sizes[p] = want;
  return p;
}

bool release_graph_memory(int device, void* ptr) {
  std::shared_ptr<GraphMemory> last;  // destroyed outside the lock (its blocks go back to CUDA)
  std::lock_guard<std::mutex> lock(graph_mutex);
  Capture& c = capture_of(device);
  if (c.active) {
    auto found = c.memory->sizes.find(ptr);
    if (found != c.memory->sizes.end()) {
      c.memory->idle.emplace(found->second, ptr);
      return true;
    }
  }
  auto held = held_blocks.find(ptr);
  if (held == held_blocks.end()) return false;
  last = std::move(held->second);
  held_blocks.erase(held);
  return true;
}

void graph_begin(int device) {
  DeviceGuard guard(device);
  {
    std::lock_guard<std::mutex> lock(graph_mutex);
    require(!capture_of(device).active, "device: cuda:" + std::to_string(device) +
                                            " is already capturing a graph (captures do not nest)");
  }
  DeviceCheck* record = nullptr;
  DeviceCheck* report = nullptr;
  DeviceCheck initial{};
  cudaError_t err = cudaMalloc(&record, sizeof(DeviceCheck));
  if (err == cudaSuccess) err = cudaHostAlloc(&report, sizeof(DeviceCheck), cudaHostAllocMapped);
  if (err == cudaSuccess) {
    *report = DeviceCheck{};
    err = cudaHostGetDevicePointer(reinterpret_cast<void**>(&initial.mirror), report, 0);
  }
  // From pageable memory the call returns once `initial` (on this stack frame) has been staged.
  if (err == cudaSuccess) {
    err = cudaMemcpyAsync(record, &initial, sizeof(DeviceCheck), cudaMemcpyHostToDevice, stream(device));
  }
  if (err == cudaSuccess) err = cudaStreamBeginCapture(stream(device), cudaStreamCaptureModeRelaxed);
  if (err != cudaSuccess) {
    free_records(record, report);
    check(err, "beginning a graph capture");
  }
  std::lock_guard<std::mutex> lock(graph_mutex);
  Capture& c = capture_of(device);
  c.active = true;
  c.memory = std::make_shared<GraphMemory>();
  c.check = record, c.report = report;
}

void* graph_end(int device) {
  DeviceGuard guard(device);
  require(capturing(device), "device: cuda:" + std::to_string(device) + " is not capturing a graph");
  cudaGraph_t graph = nullptr;
  cudaError_t err = cudaStreamEndCapture(stream(device), &graph);
  Capture c = finish(device);
  cudaGraphExec_t exec = nullptr;
  if (err == cudaSuccess) err = cudaGraphInstantiate(&exec, graph, 0);
  if (err != cudaSuccess) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    free_records(c.check, c.report);
    check(err, "capturing the graph");
  }
  Graph* g = new Graph;
  g->device = device, g->graph = graph, g->exec = exec, g->memory = std::move(c.memory);
  g->check = c.check, g->report = c.report, g->labels = std::move(c.labels);
  return g;
}

void graph_abort(int device) {
  DeviceGuard guard(device);
  if (!capturing(device)) return;
  cudaGraph_t graph = nullptr;
  cudaStreamEndCapture(stream(device), &graph);
  if (graph != nullptr) cudaGraphDestroy(graph);
  cudaGetLastError();  // the capture's own failure was reported by the call that hit it
  Capture c = finish(device);
  free_records(c.check, c.report);
}

void graph_synchronize(void* handle) {
  Graph* g = static_cast<Graph*>(handle);
  DeviceGuard guard(g->device);
  AK_CUDA_CHECK(cudaStreamSynchronize(stream(g->device)));
  const DeviceCheck found = *g->report;
  if (found.code == kCheckPassed) return;
  std::memset(g->report, 0, kCheckFields);
  AK_CUDA_CHECK(cudaMemsetAsync(g->check, 0, kCheckFields, stream(g->device)));
  AK_CUDA_CHECK(cudaStreamSynchronize(stream(g->device)));
  fail(AK_ERR_INVALID_ARGUMENT, describe(found, g->labels));
}

void graph_launch(void* handle) {
  Graph* g = static_cast<Graph*>(handle);
  DeviceGuard guard(g->device);
  refuse_while_capturing(g->device, "replaying a graph");
  // An earlier replay's failure is reported before the next one runs (read without waiting).
  if (reinterpret_cast<volatile int32_t*>(&g->report->code)[0] != kCheckPassed) graph_synchronize(handle);
  AK_CUDA_CHECK(cudaGraphLaunch(g->exec, stream(g->device)));
}

int64_t graph_nodes(void* handle) {
  Graph* g = static_cast<Graph*>(handle);
  size_t count = 0;
  AK_CUDA_CHECK(cudaGraphGetNodes(g->graph, nullptr, &count));
  return static_cast<int64_t>(count);
}

void graph_destroy(void* handle) {
  Graph* g = static_cast<Graph*>(handle);
  refuse_while_capturing(g->device, "destroying a graph");
  {
    DeviceGuard guard(g->device);
    cudaStreamSynchronize(stream(g->device));  // a replay may still run
    cudaGraphExecDestroy(g->exec);
    cudaGraphDestroy(g->graph);
    free_records(g->check, g->report);
  }
  delete g;
}

}  // namespace ak::cuda
