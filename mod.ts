/**
 * attnkit: fast attention kernels for NVIDIA GPUs, from Deno.
 *
 * @module
 */
export { AttnkitError, type ErrorCode } from "./ffi/errors.ts";
export { type Device, type DeviceInfo, cudaAvailable, cudaDeviceCount, defaultDevice, deviceInfo, parseDevice, synchronize, nativeVersion, builtWithCuda, type DeviceId } from "./ops/device.ts";
export { type DType, DTYPES, dtypeSize, isFloating } from "./ops/dtype.ts";
export { manualSeed, Tensor, type TensorOptions, type RandomOptions, type NestedNumbers, type SourceArray } from "./ops/tensor.ts";
