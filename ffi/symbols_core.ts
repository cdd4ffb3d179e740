/** Runtime symbols of the C ABI: library, devices, memory, copies, random numbers, events, graphs. */
export const coreSymbols = {
  // const char* ak_last_error(void)
  ak_last_error: { parameters: [], result: "pointer" },
  // const char* ak_version(void)
  ak_version: { parameters: [], result: "pointer" },
  // int32_t ak_built_with_cuda(void)
  ak_built_with_cuda: { parameters: [], result: "i32" },
  // ak_status ak_device_count(int32_t* out_count)
  ak_device_count: { parameters: ["buffer"], result: "i32" },
  // ak_status ak_device_info(int32_t device_index, ak_device_props* out)
  ak_device_info: { parameters: ["i32", "buffer"], result: "i32" },
  // ak_status ak_synchronize(int32_t device_type, int32_t device_index)
  ak_synchronize: { parameters: ["i32", "i32"], result: "i32" },
  // ak_status ak_alloc(int32_t device_type, int32_t device_index, int64_t bytes, void** out)
  ak_alloc: { parameters: ["i32", "i32", "i64", "buffer"], result: "i32" },
  // ak_status ak_free(int32_t device_type, int32_t device_index, void* ptr)
  ak_free: { parameters: ["i32", "i32", "pointer"], result: "i32" },
  // ak_status ak_memory_stats(int32_t device_type, int32_t device_index, ak_memory_stats_t* out)
  ak_memory_stats: { parameters: ["i32", "i32", "buffer"], result: "i32" },
  // ak_status ak_thread_bytes_in_use(int32_t device_type, int32_t device_index, int64_t* out)
  ak_thread_bytes_in_use: { parameters: ["i32", "i32", "buffer"], result: "i32" },
  // ak_status ak_trim_pool(int32_t device_index)
  ak_trim_pool: { parameters: ["i32"], result: "i32" },
  // ak_status ak_cuda_stream(int32_t device_index, void** out)
  ak_cuda_stream: { parameters: ["i32", "buffer"], result: "i32" },
  // ak_status ak_cuda_set_current(int32_t device_index)
  ak_cuda_set_current: { parameters: ["i32"], result: "i32" },
  // ak_status ak_copy(const ak_tensor* dst, const ak_tensor* src)
  ak_copy: { parameters: ["buffer", "buffer"], result: "i32" },
  // ak_status ak_copy_to_host(const ak_tensor* src, void* host_dst, int64_t bytes)
  ak_copy_to_host: { parameters: ["buffer", "buffer", "i64"], result: "i32" },
  // ak_status ak_copy_from_host(const ak_tensor* dst, const void* host_src, int64_t bytes)
  ak_copy_from_host: { parameters: ["buffer", "buffer", "i64"], result: "i32" },
  // ak_status ak_fill(const ak_tensor* dst, double value)
  ak_fill: { parameters: ["buffer", "f64"], result: "i32" },
  // ak_status ak_arange(const ak_tensor* dst, double start, double step)
  ak_arange: { parameters: ["buffer", "f64", "f64"], result: "i32" },
  // ak_status ak_random(const ak_tensor* dst, uint64_t seed, uint64_t offset, int32_t kind, double a, double b)
  ak_random: { parameters: ["buffer", "u64", "u64", "i32", "f64", "f64"], result: "i32" },
  // ak_status ak_event_create(int32_t device_index, void** out_event)
  ak_event_create: { parameters: ["i32", "buffer"], result: "i32" },
  // ak_status ak_event_record(void* event)
  ak_event_record: { parameters: ["pointer"], result: "i32" },
  // ak_status ak_event_elapsed_ms(void* start, void* end, double* out_ms)
  ak_event_elapsed_ms: { parameters: ["pointer", "pointer", "buffer"], result: "i32" },
  // ak_status ak_event_destroy(void* event)
  ak_event_destroy: { parameters: ["pointer"], result: "i32" },
  // ak_status ak_graph_begin(int32_t device_index)
  ak_graph_begin: { parameters: ["i32"], result: "i32" },
  // ak_status ak_graph_end(int32_t device_index, void** out_graph)
  ak_graph_end: { parameters: ["i32", "buffer"], result: "i32" },
  // ak_status ak_graph_abort(int32_t device_index)
  ak_graph_abort: { parameters: ["i32"], result: "i32" },
  // ak_status ak_graph_launch(void* graph)
  ak_graph_launch: { parameters: ["pointer"], result: "i32" },
  // ak_status ak_graph_synchronize(void* graph)
  ak_graph_synchronize: { parameters: ["pointer"], result: "i32" },
  // ak_status ak_graph_node_count(void* graph, int64_t* out_count)
  ak_graph_node_count: { parameters: ["pointer", "buffer"], result: "i32" },
  // ak_status ak_graph_destroy(void* graph)
  ak_graph_destroy: { parameters: ["pointer"], result: "i32" },
} as const satisfies Deno.ForeignLibraryInterface;
