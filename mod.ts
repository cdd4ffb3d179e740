/**
 * attnkit: fast attention kernels for NVIDIA GPUs, from Deno.
 *
 * Tensors live on the CPU or a CUDA GPU; every op runs on both (the CPU backend is a portable
 * reference, the CUDA backend the fast path), so results can be checked anywhere.
 *
 * A script needs `--allow-ffi` (to call the native library), `--allow-read` (to find it and read
 * tensor files) and `--allow-env` (to find the per-user cache through `HOME` / `XDG_CACHE_HOME`, and
 * to honour `ATTNKIT_LIB`).
 * The native library is built once: `deno task build` in a checkout, or, for attnkit used as a
 * dependency, `deno run --allow-read --allow-write --allow-run --allow-env path/to/attnkit/build.ts
 * --cache` (into the per-user cache; works offline). A missing or mismatched library raises an
 * `AttnkitError` that names the command to run.
 *
 * @example
 * ```ts
 * import { defaultDevice, Tensor } from "@attnkit/attnkit";
 * const device = defaultDevice(); // "cuda" when a GPU is present, else "cpu"
 * using x = Tensor.randn([2, 128, 4, 64], { dtype: "bfloat16", device, seed: 1 });
 * console.log(`${x}`);
 * ```
 *
 * @module
 */
export { AttnkitError, type ErrorCode } from "./ffi/errors.ts";
export {
  builtWithCuda,
  cudaAvailable,
  cudaDeviceCount,
  defaultDevice,
  type Device,
  type DeviceId,
  type DeviceInfo,
  deviceInfo,
  nativeVersion,
  parseDevice,
  synchronize,
} from "./ops/device.ts";
export { type AnyArray, type ArrayFor, type DType, DTYPES, dtypeSize, isFloating } from "./ops/dtype.ts";
export {
  bf16BitsToNumber,
  f16BitsToNumber,
  manualSeed,
  type NestedNumbers,
  type RandomOptions,
  type SourceArray,
  Tensor,
  type TensorOptions,
} from "./ops/tensor.ts";
export { type IndexSpec } from "./ops/tensor_math/indexing.ts";
export { type Dims, type ReduceOptions } from "./ops/tensor_math/reduce.ts";
export { where } from "./ops/tensor_math/elementwise.ts";
export {
  type DebugOptions,
  debugSettings,
  type MemoryStats,
  memoryStats,
  setDebug,
  trimMemoryPool,
} from "./ops/memory.ts";
export { DeviceEvent, timeIt, type TimeOptions, type Timing } from "./ops/timing.ts";
export { CapturedGraph, captureGraph, captureGraphAsync, type CaptureGraphOptions } from "./ops/graph.ts";
export {
  assertClose,
  type Comparable,
  compare,
  type Comparison,
  type Tolerance,
  ToleranceError,
} from "./ops/compare.ts";
export {
  explain,
  type GpuName,
  type KernelInfo,
  kernels,
  lastPlan,
  type Plan,
  type PlanKernel,
  type PlanOp,
  type PlanQuery,
  setTuning,
  tuning,
  type TuningKey,
  type TuningSpec,
  type TuningTable,
  withTuning,
} from "./ops/kernels.ts";
export { type ChoiceSource, type KernelChoice, type KernelMap, lastChoice } from "./ops/tune/choice.ts";
export {
  clearTuneCache,
  setTuneCachePath,
  tuneCachePath,
  type TuneCandidate,
  type TuneRecord,
} from "./ops/tune/cache.ts";
export { type Layout, LAYOUTS } from "./ops/layout.ts";
export type { CuSeqlens } from "./ops/seqlens.ts";
export * from "./ops/io/mod.ts";
export * from "./ops/linear/mod.ts";
export * from "./ops/attention/mod.ts";
export * from "./ops/sparse/mod.ts";
