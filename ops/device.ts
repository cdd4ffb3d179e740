/**
 * Devices: the CPU backend and CUDA GPUs.
 *
 * @module
 */
import { AttnkitError, invalidArgument } from "../ffi/errors.ts";
import { native, readCString, unwrap } from "../ffi/library.ts";

/** A device name: `"cpu"`, `"cuda"` (the first GPU) or `"cuda:N"`. */
export type Device = "cpu" | "cuda" | `cuda:${number}`;

/** A parsed device: the C device type (0 CPU, 1 CUDA) and index. */
export interface DeviceId {
  /** 0 for the CPU, 1 for CUDA. */
  readonly type: 0 | 1;
  /** The GPU's index (0 for the CPU). */
  readonly index: number;
  /** The canonical name: `"cpu"` or `"cuda:N"`. */
  readonly name: "cpu" | `cuda:${number}`;
}

/** Properties of a CUDA device. */
export interface DeviceInfo {
  /** `"cuda:N"`. */
  readonly device: `cuda:${number}`;
  /** The GPU's name, e.g. `"NVIDIA H200"`. */
  readonly name: string;
  /** Compute capability, e.g. `[9, 0]`. */
  readonly computeCapability: readonly [number, number];
  /** Streaming multiprocessors. */
  readonly smCount: number;
  /** The opt-in maximum of shared memory per block, bytes. */
  readonly maxSharedMemoryPerBlock: number;
  /** Device memory, bytes. */
  readonly totalMemory: number;
  /** Free device memory when asked, bytes. */
  readonly freeMemory: number;
  /** L2 cache, bytes. */
  readonly l2CacheBytes: number;
}

/**
 * Parses a device name and checks that the device exists.
 *
 * @example
 * ```ts
 * import { parseDevice } from "@attnkit/attnkit";
 * console.log(parseDevice("cpu").name); // "cpu"
 * ```
 */
export function parseDevice(device: Device | string | undefined, op = "attnkit"): DeviceId {
  const d = device ?? "cpu";
  if (d === "cpu") return { type: 0, index: 0, name: "cpu" };
  const m = /^cuda(?::(\d+))?$/.exec(d);
  if (!m) throw invalidArgument(op, `device: expected "cpu", "cuda" or "cuda:N", got ${JSON.stringify(d)}`);
  const index = m[1] === undefined ? 0 : Number(m[1]);
  const count = cudaDeviceCount();
  if (index >= count) {
    const why = native().ak_built_with_cuda() === 0
      ? "this attnkit library was built without CUDA"
      : `${count} CUDA device${count === 1 ? "" : "s"} present`;
    throw new AttnkitError("NO_DEVICE", op, `device: ${d} is not available (${why})`);
  }
  return { type: 1, index, name: `cuda:${index}` };
}

let cachedCount: number | undefined;

/**
 * The number of CUDA devices (0 without a GPU, or when the library was built without CUDA).
 *
 * @example
 * ```ts
 * import { cudaDeviceCount } from "@attnkit/attnkit";
 * const device = cudaDeviceCount() > 0 ? "cuda" : "cpu";
 * ```
 */
export function cudaDeviceCount(): number {
  if (cachedCount === undefined) {
    const out = new Int32Array(1);
    unwrap(native().ak_device_count(out));
    cachedCount = out[0];
  }
  return cachedCount;
}

/**
 * True when at least one CUDA device can run attnkit's kernels.
 *
 * @example
 * ```ts
 * import { cudaAvailable } from "@attnkit/attnkit";
 * console.log(cudaAvailable() ? "GPU" : "CPU only");
 * ```
 */
export function cudaAvailable(): boolean {
  return cudaDeviceCount() > 0;
}

/**
 * The default device for scripts: the first GPU when there is one, else the CPU.
 *
 * @example
 * ```ts
 * import { defaultDevice, Tensor } from "@attnkit/attnkit";
 * using x = Tensor.randn([4, 4], { device: defaultDevice() });
 * ```
 */
export function defaultDevice(): Device {
  return cudaAvailable() ? "cuda" : "cpu";
}

/**
 * Properties of a CUDA device.
 *
 * @example
 * ```ts
 * import { cudaAvailable, deviceInfo } from "@attnkit/attnkit";
 * if (cudaAvailable()) console.log(deviceInfo("cuda").name);
 * ```
 */
export function deviceInfo(device: Device | string = "cuda"): DeviceInfo {
  const id = parseDevice(device, "deviceInfo");
  if (id.type !== 1) throw invalidArgument("deviceInfo", `device: expected a CUDA device, got ${device}`);
  const buf = new Uint8Array(320);
  unwrap(native().ak_device_info(id.index, buf));
  const view = new DataView(buf.buffer);
  const nameEnd = buf.indexOf(0);
  return {
    device: `cuda:${id.index}`,
    name: new TextDecoder().decode(buf.subarray(0, nameEnd < 0 ? 256 : Math.min(nameEnd, 256))),
    computeCapability: [view.getInt32(256, true), view.getInt32(260, true)],
    smCount: view.getInt32(264, true),
    maxSharedMemoryPerBlock: view.getInt32(268, true),
    totalMemory: Number(view.getBigInt64(272, true)),
    freeMemory: Number(view.getBigInt64(280, true)),
    l2CacheBytes: Number(view.getBigInt64(288, true)),
  };
}

/**
 * Waits until all queued work on a device has finished (a no-op for the CPU).
 *
 * @example
 * ```ts
 * import { synchronize } from "@attnkit/attnkit";
 * synchronize("cpu");
 * ```
 */
export function synchronize(device: Device | string = "cpu"): void {
  const id = parseDevice(device, "synchronize");
  unwrap(native().ak_synchronize(id.type, id.index));
}

/**
 * The version of the loaded native library.
 *
 * @example
 * ```ts
 * import { nativeVersion } from "@attnkit/attnkit";
 * console.log(nativeVersion());
 * ```
 */
export function nativeVersion(): string {
  return readCString(native().ak_version());
}

/**
 * True when the loaded native library was compiled with CUDA.
 *
 * @example
 * ```ts
 * import { builtWithCuda } from "@attnkit/attnkit";
 * console.log(builtWithCuda());
 * ```
 */
export function builtWithCuda(): boolean {
  return native().ak_built_with_cuda() === 1;
}
