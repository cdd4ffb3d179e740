// The C entries of graph capture (cuda/graph.cu): a graph handle is checked against the live ones, so
// a stale or foreign pointer is an error rather than a crash.
#include <mutex>
#include <string>
#include <unordered_set>

#include "core/common.h"
#if AK_WITH_CUDA
#include "cuda/backend.h"
#endif

using namespace ak;

namespace {

std::mutex handles_mutex;
std::unordered_set<void*> live_graphs;

void require_live(void* graph) {
  std::lock_guard<std::mutex> lock(handles_mutex);
  require(graph != nullptr && live_graphs.count(graph) == 1,
          "graph: not a live graph of ak_graph_end (destroyed already?)");
}

}  // namespace

extern "C" {

AK_API ak_status ak_graph_begin(int32_t device_index) {
  AK_ENTRY("ak_graph_begin", {
    check_device_args(AK_CUDA, device_index);
    AK_CUDA_CALL(cuda::graph_begin(device_index));
  });
}

AK_API ak_status ak_graph_end(int32_t device_index, void** out_graph) {
  AK_ENTRY("ak_graph_end", {
    require(out_graph != nullptr, "out_graph: expected a pointer");
    *out_graph = nullptr;
    check_device_args(AK_CUDA, device_index);
#if AK_WITH_CUDA
    void* graph = cuda::graph_end(device_index);
    std::lock_guard<std::mutex> lock(handles_mutex);
    live_graphs.insert(graph);
    *out_graph = graph;
#else
    fail_no_cuda();
#endif
  });
}

AK_API ak_status ak_graph_abort(int32_t device_index) {
  AK_ENTRY("ak_graph_abort", {
    check_device_args(AK_CUDA, device_index);
    AK_CUDA_CALL(cuda::graph_abort(device_index));
  });
}

AK_API ak_status ak_graph_launch(void* graph) {
  AK_ENTRY("ak_graph_launch", {
    require_live(graph);
    AK_CUDA_CALL(cuda::graph_launch(graph));
  });
}

AK_API ak_status ak_graph_synchronize(void* graph) {
  AK_ENTRY("ak_graph_synchronize", {
    require_live(graph);
    AK_CUDA_CALL(cuda::graph_synchronize(graph));
  });
}

AK_API ak_status ak_graph_node_count(void* graph, int64_t* out_count) {
  AK_ENTRY("ak_graph_node_count", {
    require(out_count != nullptr, "out_count: expected a pointer");
    require_live(graph);
    AK_CUDA_CALL(*out_count = cuda::graph_nodes(graph));
  });
}

AK_API ak_status ak_graph_destroy(void* graph) {
  AK_ENTRY("ak_graph_destroy", {
    if (graph == nullptr) return;
    require_live(graph);
    AK_CUDA_CALL(cuda::graph_destroy(graph));
    std::lock_guard<std::mutex> lock(handles_mutex);
    live_graphs.erase(graph);
  });
}

}  // extern "C"
