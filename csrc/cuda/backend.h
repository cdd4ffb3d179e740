// The CUDA backend's host-side interface, in plain C++ types so that .cpp entries can call it
// without CUDA headers. Implemented in csrc/cuda/*.cu; only linked when AK_WITH_CUDA is 1.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/registry.h"
#include "include/attnkit.h"

namespace ak::cuda {

int device_count();
void device_info(int device, ak_device_props* out);
void synchronize(int device);

void* alloc(int device, int64_t bytes);
void free(int device, void* ptr);
void memory_stats(int device, ak_memory_stats_t* out);
int64_t thread_bytes_in_use(int device);
void trim_pool(int device);
// The calling thread's stream on the device, as an opaque handle.
void* stream_handle(int device);
// Makes the device the calling thread's current one.
void set_current(int device);

// Same device, same shape; any strides and dtypes.
void copy_strided(const ak_tensor& dst, const ak_tensor& src);
// Contiguous, same dtype, across devices (CPU <-> CUDA or CUDA <-> CUDA). Synchronous.
void copy_across(const ak_tensor& dst, const ak_tensor& src);
void copy_to_host(const ak_tensor& src, void* host, int64_t bytes);
void copy_from_host(const ak_tensor& dst, const void* host, int64_t bytes);
void fill(const ak_tensor& dst, double value);
void random(const ak_tensor& dst, uint64_t seed, uint64_t offset, int kind, double a, double b);
// dst[i] = start + i step, computed in double and rounded once to dst's dtype (formed on the device).
void arange(const ak_tensor& dst, double start, double step);

void* event_create(int device);
void event_record(void* event);
double event_elapsed_ms(void* start, void* end);
void event_destroy(void* event);

// ---- graph capture (graph.cu) ----
struct DeviceCheck;
// Starts capturing attnkit's work on `device`'s stream; one capture per device at a time.
void graph_begin(int device);
// Ends the capture and instantiates it: an opaque graph for graph_launch / graph_destroy.
void* graph_end(int device);
// Ends a capture that failed part-way and discards it (nothing when not capturing).
void graph_abort(int device);
// Replays a graph on its device's stream (asynchronous); first reports an earlier replay's failed check.
void graph_launch(void* graph);
// Waits for the device's stream and raises the first failed check of the replays since the last report.
void graph_synchronize(void* graph);
int64_t graph_nodes(void* graph);
void graph_destroy(void* graph);
bool capturing(int device);
// Fails (AK_ERR_UNSUPPORTED) when `device` is capturing: `what` waits for it or moves data to or from
// the host, which a graph cannot hold.
void refuse_while_capturing(int device, const char* what);
// While `device` captures: the check record of the graph, with `label` registered as the call that
// reports into it (its index in *label_id when asked for); nullptr otherwise.
DeviceCheck* capture_check(int device, const char* label, int32_t* label_id);
// While `device` captures, the check a pool call makes on the device in place of reading its arguments
// back: state_indices [n] each below `slots` with no live slot twice and, given cu_seqlens, offsets from 0,
// nondecreasing, the last at most T; failures go to the graph's record, which is returned for the call's
// kernels (they write nothing once a check has failed). `trusted` leaves the indices unchecked (the
// offsets are still checked). nullptr outside a capture: the caller then checks on the host.
DeviceCheck* capture_pool_check(int device, const ak_tensor* indices, int64_t n, int64_t slots,
                                const ak_tensor* cu_seqlens, int64_t T, const char* label, bool trusted);
// While `device` captures: a block of the capture's memory (see graph.cu); nullptr otherwise.
void* capture_alloc(int device, size_t bytes);
// Frees a block of a capture's memory, returning false when ptr is none.
bool release_graph_memory(int device, void* ptr);

// What the planners know about device `device`: its limits, and which registry rows were built for it.
const registry::Caps& caps(int device);

}  // namespace ak::cuda
