/**
 * Device memory statistics.
 *
 * @module
 */
import { native, unwrap } from "../ffi/library.ts";
import { type Device, parseDevice } from "./device.ts";

/** Memory accounting of one device. */
export interface MemoryStats {
  /** Bytes held by live tensors (allocations made through attnkit). */
  bytesInUse: number;
  /** High-water mark of `bytesInUse`. */
  peakBytes: number;
  /** Live allocations. */
  liveAllocations: number;
  /** Allocations ever made. */
  totalAllocations: number;
  /** CUDA: bytes the stream-ordered pool holds from the driver (0 on the CPU). */
  poolReservedBytes: number;
  /** CUDA: bytes of the pool in use, including op intermediates in flight (0 on the CPU). */
  poolUsedBytes: number;
}

/**
 * Memory statistics of a device: what tensors hold now and at peak, and the CUDA pool's size.
 *
 * @example
 * ```ts
 * import { memoryStats, Tensor } from "@attnkit/attnkit";
 * const before = memoryStats("cpu").bytesInUse;
 * Tensor.zeros([1024]).dispose();
 * console.log(memoryStats("cpu").bytesInUse === before); // true
 * ```
 */
export function memoryStats(device: Device | string = "cpu"): MemoryStats {
  const id = parseDevice(device, "memoryStats");
  const out = new BigInt64Array(6);
  unwrap(native().ak_memory_stats(id.type, id.index, new Uint8Array(out.buffer)), "memoryStats");
  return {
    bytesInUse: Number(out[0]),
    peakBytes: Number(out[1]),
    liveAllocations: Number(out[2]),
    totalAllocations: Number(out[3]),
    poolReservedBytes: Number(out[4]),
    poolUsedBytes: Number(out[5]),
  };
}

/**
 * Returns the CUDA pool's cached, unused memory to the driver (attnkit keeps freed blocks cached so
 * that allocations cost microseconds).
 *
 * @example
 * ```ts
 * import { cudaAvailable, trimMemoryPool } from "@attnkit/attnkit";
 * if (cudaAvailable()) trimMemoryPool("cuda");
 * ```
 */
export function trimMemoryPool(device: Device | string = "cuda"): void {
  const id = parseDevice(device, "trimMemoryPool");
  if (id.type === 1) unwrap(native().ak_trim_pool(id.index), "trimMemoryPool");
}
