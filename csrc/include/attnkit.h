/*
 * attnkit: the flat C ABI.
 *
 * Every entry returns an ak_status; on failure ak_last_error() gives a message (thread-local) that
 * names the argument and what was expected. No entry aborts, prints or throws across this boundary.
 * Tensors cross as ak_tensor descriptors; the library re-validates them. Each entry that touches a
 * CUDA device selects that device itself, so callers may call from any thread.
 *
 * The operator families declare their entries in the headers included at the end of this file.
 */
#ifndef ATTNKIT_H
#define ATTNKIT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define AK_API __declspec(dllexport)
#else
#define AK_API __attribute__((visibility("default")))
#endif

/* Status codes. Keep in step with ffi/errors.ts. */
typedef enum ak_status {
  AK_OK = 0,
  AK_ERR_INVALID_ARGUMENT = 1, /* wrong shape, dtype, layout, value */
  AK_ERR_OUT_OF_MEMORY = 2,    /* an allocation failed; nothing leaked */
  AK_ERR_CUDA = 3,             /* a CUDA call failed; the message has CUDA's own text */
  AK_ERR_UNSUPPORTED = 4,      /* valid, but not served by this build or device */
  AK_ERR_NO_DEVICE = 5,        /* the device asked for does not exist */
  AK_ERR_INTERNAL = 6          /* a bug: please report the message */
} ak_status;

/* Element types. Keep in step with ops/dtype.ts. */
typedef enum ak_dtype {
  AK_FLOAT32 = 0,
  AK_FLOAT64 = 1,
  AK_FLOAT16 = 2,
  AK_BFLOAT16 = 3,
  AK_INT32 = 4,
  AK_INT64 = 5,
  AK_BOOL = 6, /* one byte, 0 or 1 */
  AK_FLOAT8_E4M3 = 7 /* one byte: 4 exponent bits (bias 7), 3 mantissa bits, no infinities; 0x7f / 0xff are
                        NaN, the largest finite value 448 (PyTorch's float8_e4m3fn) */
} ak_dtype;

typedef enum ak_device_type { AK_CPU = 0, AK_CUDA = 1 } ak_device_type;

#define AK_MAX_RANK 8

/*
 * A tensor descriptor: 152 bytes, laid out for ffi/descriptor.ts.
 * Strides are in elements. Shape entries past rank are ignored.
 */
typedef struct ak_tensor {
  void* data;              /* offset 0 */
  int32_t dtype;           /* offset 8, an ak_dtype */
  int32_t rank;            /* offset 12, 0..AK_MAX_RANK */
  int32_t device_type;     /* offset 16, an ak_device_type */
  int32_t device_index;    /* offset 20 */
  int64_t shape[AK_MAX_RANK];   /* offset 24 */
  int64_t strides[AK_MAX_RANK]; /* offset 88 */
} ak_tensor;

/* Device properties, filled by ak_device_info: 320 bytes, laid out for ffi/device_info.ts. */
typedef struct ak_device_props {
  char name[256];              /* offset 0, NUL-terminated */
  int32_t major;               /* offset 256 */
  int32_t minor;               /* offset 260 */
  int32_t sm_count;            /* offset 264 */
  int32_t max_smem_per_block;  /* offset 268, opt-in maximum, bytes */
  int64_t total_bytes;         /* offset 272 */
  int64_t free_bytes;          /* offset 280 */
  int64_t l2_bytes;            /* offset 288 */
  int32_t clock_khz;           /* offset 296, 0 when the runtime does not report it */
  int32_t memory_clock_khz;    /* offset 300, 0 when the runtime does not report it */
  int32_t memory_bus_bits;     /* offset 304, 0 when the runtime does not report it */
  int32_t reserved[3];         /* offset 308 */
} ak_device_props;

/* Memory statistics of one device, filled by ak_memory_stats: 48 bytes. */
typedef struct ak_memory_stats_t {
  int64_t bytes_in_use;      /* live allocations made through ak_alloc */
  int64_t peak_bytes;        /* high-water mark of bytes_in_use */
  int64_t live_allocations;  /* how many are live */
  int64_t total_allocations; /* how many were ever made */
  int64_t pool_reserved;     /* CUDA: bytes the stream-ordered pool holds; CPU: 0 */
  int64_t pool_used;         /* CUDA: bytes of the pool in use; CPU: 0 */
} ak_memory_stats_t;

/* ---- library ---- */

/* The thread's last error message; "" when none. Valid until the next failing call on this thread. */
AK_API const char* ak_last_error(void);
/* The library version, e.g. "0.1.0". */
AK_API const char* ak_version(void);
/* 1 when the library was built with CUDA, else 0. */
AK_API int32_t ak_built_with_cuda(void);

/* ---- devices ---- */

/* Number of CUDA devices; 0 (and AK_OK) when built without CUDA or when no driver is present. */
AK_API ak_status ak_device_count(int32_t* out_count);
AK_API ak_status ak_device_info(int32_t device_index, ak_device_props* out);
/* Waits until all work queued on the device's attnkit stream has finished. */
AK_API ak_status ak_synchronize(int32_t device_type, int32_t device_index);

/* ---- memory ---- */

/* Allocates bytes (> 0) on the device: 64-byte aligned host memory for AK_CPU, the stream-ordered
 * pool for AK_CUDA. *out is NULL for bytes == 0. */
AK_API ak_status ak_alloc(int32_t device_type, int32_t device_index, int64_t bytes, void** out);
/* Frees what ak_alloc returned (NULL is a no-op). Stream-ordered on CUDA. */
AK_API ak_status ak_free(int32_t device_type, int32_t device_index, void* ptr);
AK_API ak_status ak_memory_stats(int32_t device_type, int32_t device_index, ak_memory_stats_t* out);
/* Of bytes_in_use, the bytes the calling thread allocated (through ak_alloc) that are still live. */
AK_API ak_status ak_thread_bytes_in_use(int32_t device_type, int32_t device_index, int64_t* out);
/* Returns the CUDA pool's cached, unused memory to the driver. */
AK_API ak_status ak_trim_pool(int32_t device_index);
/* The calling thread's attnkit stream on the CUDA device (a cudaStream_t), for a library that must order
 * its work with attnkit's (a collective); created at first use. */
AK_API ak_status ak_cuda_stream(int32_t device_index, void** out);
/* Makes the CUDA device the calling thread's current one (what a library that uses the current device,
 * such as a collective's initialisation, then works on). */
AK_API ak_status ak_cuda_set_current(int32_t device_index);

/* Copies dst <- src: same shape; any strides (a permuted view of src gives a permute); any dtypes
 * (a cast, round to nearest even); same device, or across CPU and CUDA when both are contiguous and
 * of one dtype. */
AK_API ak_status ak_copy(const ak_tensor* dst, const ak_tensor* src);
/* Copies a contiguous tensor to host memory of `bytes` bytes (must equal its size); synchronises
 * the tensor's stream first. */
AK_API ak_status ak_copy_to_host(const ak_tensor* src, void* host_dst, int64_t bytes);
/* Copies `bytes` of host memory into a contiguous tensor. The host buffer may be reused on return. */
AK_API ak_status ak_copy_from_host(const ak_tensor* dst, const void* host_src, int64_t bytes);
/* Fills every element with value (converted to the dtype as ak_copy would). */
AK_API ak_status ak_fill(const ak_tensor* dst, double value);
/* dst (contiguous, numeric) [i] = start + i step, computed in double and rounded once to its dtype. */
AK_API ak_status ak_arange(const ak_tensor* dst, double start, double step);

/* Counter-based random numbers: element i (in row-major order) of dst draws from counter
 * (offset + i) under key seed, Philox-4x32-10, so CPU and CUDA give the same values.
 * kind 0: uniform in [a, b); kind 1: normal with mean a, standard deviation b. */
AK_API ak_status ak_random(const ak_tensor* dst, uint64_t seed, uint64_t offset, int32_t kind, double a,
                           double b);

/* ---- timing ---- */

AK_API ak_status ak_event_create(int32_t device_index, void** out_event);
AK_API ak_status ak_event_record(void* event);
/* Milliseconds between two recorded events; waits for `end` to complete. */
AK_API ak_status ak_event_elapsed_ms(void* start, void* end, double* out_ms);
AK_API ak_status ak_event_destroy(void* event);

/*
 * ---- graphs ----
 * ak_graph_begin starts capturing the work attnkit sends to a CUDA device (its one stream) into a graph;
 * ak_graph_end instantiates it, ak_graph_launch replays it (asynchronously, on the same stream). While
 * capturing, nothing may wait for the device or move data between host and device: such a call fails
 * with AK_ERR_UNSUPPORTED naming what it tried (the capture is then to be aborted with ak_graph_abort).
 * Tensors allocated while capturing are real memory that keeps its address for every replay (a graph's
 * outputs); the graph holds its memory until ak_graph_destroy and the last of those tensors is freed.
 * Pool calls check state_indices (and offsets) on the device instead of reading them back: the first
 * failure of a replay is kept in the graph, its later checked kernels write nothing, and
 * ak_graph_synchronize (or the next ak_graph_launch) fails with the message an eager call would give.
 */
AK_API ak_status ak_graph_begin(int32_t device_index);
AK_API ak_status ak_graph_end(int32_t device_index, void** out_graph);
/* Ends a capture that failed part-way and discards it; nothing when the device is not capturing. */
AK_API ak_status ak_graph_abort(int32_t device_index);
AK_API ak_status ak_graph_launch(void* graph);
/* Waits for the device's stream; fails with the first device-side check that failed since the last report. */
AK_API ak_status ak_graph_synchronize(void* graph);
AK_API ak_status ak_graph_node_count(void* graph, int64_t* out_count);
AK_API ak_status ak_graph_destroy(void* graph);

/*
 * The kernel layer. Every run-time choice of the library is one entry of the tuning table; its
 * keys and allowed values: ak_tune_describe. Each thread has its own table: the environment variable
 * ATTNKIT_TUNE sets every thread's at first use ("key=value,key=value"); ak_tune_set replaces the
 * calling thread's ("" resets every key to auto), never another thread's. An
 * unknown key or value is an error that names it; a setting that cannot serve a call makes the call
 * fail with AK_ERR_UNSUPPORTED.
 */
AK_API ak_status ak_tune_set(const char* spec);
/* JSON {"current": {key: value}, "keys": [{"name", "values", "doc"}]}; valid until this thread's next call. */
AK_API const char* ak_tune_describe(void);
/* The table in force as ak_tune_set takes it ("key=value,...", "" when all are auto); *out valid until this
 * thread's next call. Cheap: what a caller saves before a temporary setting and restores after. */
AK_API ak_status ak_tune_current(const char** out);
/*
 * What the planners would run for a described call, without running it: query "op=<op>,key=value,..."
 * with op linear.fwd | linear.bwd | linear.decode | attention.fwd | attention.bwd, the GPU as
 * gpu=h200 | h100 | a100 | l40s or device=<index>, and the call's sizes and flags. *out_json receives
 * {"op", "path", "kernels": [{"name", "stage", "variant", "dtype", "d", "tile"}], "details": {...}},
 * valid until this thread's next call.
 */
AK_API ak_status ak_plan(const char* query, const char** out_json);
/* The plan of this thread's last CUDA op (same JSON), or "" before any. */
AK_API const char* ak_last_plan(void);
/* The registry's rows as JSON, each with "runnable" on CUDA device device_index (-1: none). */
AK_API ak_status ak_kernels(int32_t device_index, const char** out_json);

#ifdef __cplusplus
}
#endif

#include "include/attnkit_linear.h"
#include "include/attnkit_attention.h"
#include "include/attnkit_math.h"
#include "include/attnkit_sparse.h"

#endif /* ATTNKIT_H */
