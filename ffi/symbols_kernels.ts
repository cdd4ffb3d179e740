/** Kernel-layer symbols of the C ABI: the tuning table, the planners, the registry (attnkit.h). */
export const kernelSymbols = {
  // ak_status ak_tune_set(const char* spec)       "key=value,..." ("" resets every key to auto)
  ak_tune_set: { parameters: ["buffer"], result: "i32" },
  // const char* ak_tune_describe(void)            JSON {"current", "keys"}
  ak_tune_describe: { parameters: [], result: "pointer" },
  // ak_status ak_tune_current(const char** out)  "key=value,..." of the table in force
  ak_tune_current: { parameters: ["buffer"], result: "i32" },
  // ak_status ak_plan(const char* query, const char** out_json)
  ak_plan: { parameters: ["buffer", "buffer"], result: "i32" },
  // const char* ak_last_plan(void)                JSON of this thread's last CUDA op, or ""
  ak_last_plan: { parameters: [], result: "pointer" },
  // ak_status ak_kernels(int32_t device_index, const char** out_json)    device -1: none
  ak_kernels: { parameters: ["i32", "buffer"], result: "i32" },
} as const satisfies Deno.ForeignLibraryInterface;
