/**
 * Device memory statistics, the ledger of live tensors, and leak diagnostics: with
 * `setDebug({ leaks: true })` (or the environment variable `ATTNKIT_DEBUG=leaks`), a tensor that the
 * garbage collector reclaims before `dispose()` is reported on `console.warn` with where it was made.
 *
 * @module
 */
import { native, unwrap } from "../ffi/library.ts";
import { checkOptions } from "./args.ts";
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
  /**
   * Of `bytesInUse`, what this thread allocated (each Worker is a thread): a leak check that runs beside
   * other threads' work compares this one.
   */
  threadBytesInUse: number;
  /** Tensors made through attnkit on this device and neither disposed nor collected (views count too). */
  liveTensors: number;
  /** Bytes those tensors hold (memory that views share counted once). */
  tensorBytes: number;
}

/**
 * Memory statistics of a device: what tensors hold now and at peak, and the CUDA pool's size.
 *
 * @example
 * ```ts
 * import { memoryStats, Tensor } from "@attnkit/attnkit";
 * const before = memoryStats("cpu");
 * Tensor.zeros([1024]).dispose();
 * const after = memoryStats("cpu");
 * console.log(after.bytesInUse === before.bytesInUse, after.liveTensors === before.liveTensors); // true true
 * ```
 */
export function memoryStats(device: Device | string = "cpu"): MemoryStats {
  const id = parseDevice(device, "memoryStats");
  const out = new BigInt64Array(6);
  unwrap(native().ak_memory_stats(id.type, id.index, new Uint8Array(out.buffer)), "memoryStats");
  const mine = new BigInt64Array(1);
  unwrap(native().ak_thread_bytes_in_use(id.type, id.index, new Uint8Array(mine.buffer)), "memoryStats");
  return {
    bytesInUse: Number(out[0]),
    peakBytes: Number(out[1]),
    liveAllocations: Number(out[2]),
    totalAllocations: Number(out[3]),
    poolReservedBytes: Number(out[4]),
    poolUsedBytes: Number(out[5]),
    threadBytesInUse: Number(mine[0]),
    liveTensors: ledger.get(id.name)?.tensors ?? 0,
    tensorBytes: ledger.get(id.name)?.bytes ?? 0,
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

// ---- debug switches ----

/** Debug switches (all off by default). */
export interface DebugOptions {
  /**
   * Report each tensor that the garbage collector reclaims without `dispose()`: one `console.warn`
   * per place of creation, with the stack where it was made (capturing it costs a few microseconds
   * per tensor, so leave this off in benchmarks). Applies to tensors made after it is set.
   */
  leaks?: boolean;
}

const DEBUG_FLAGS = ["leaks"] as const;
const debug: Required<DebugOptions> = { leaks: false };

// ATTNKIT_DEBUG: a comma-separated list of flags, e.g. "leaks".
function readEnvironment(): void {
  let value: string | undefined;
  try {
    value = Deno.env.get("ATTNKIT_DEBUG");
  } catch {
    return; // no --allow-env: the switches stay off
  }
  for (const flag of (value ?? "").split(",").map((f) => f.trim()).filter((f) => f !== "")) {
    if ((DEBUG_FLAGS as readonly string[]).includes(flag)) {
      debug[flag as keyof DebugOptions] = true;
    } else {
      console.warn(`attnkit: ATTNKIT_DEBUG: unknown flag '${flag}' (known: ${DEBUG_FLAGS.join(", ")})`);
    }
  }
}
readEnvironment();

/**
 * Turns debug switches on or off; keys left out keep their value. `ATTNKIT_DEBUG=leaks` in the
 * environment turns `leaks` on at start.
 *
 * @example
 * ```ts
 * import { setDebug, Tensor } from "@attnkit/attnkit";
 * setDebug({ leaks: true });
 * using kept = Tensor.zeros([4]); // disposed by `using`: never reported
 * setDebug({ leaks: false });
 * ```
 */
export function setDebug(options: DebugOptions): void {
  const o = checkOptions<DebugOptions>("setDebug", options, { leaks: "boolean" });
  if (o.leaks !== undefined && o.leaks !== null) debug.leaks = o.leaks;
}

/**
 * The debug switches now.
 *
 * @example
 * ```ts
 * import { debugSettings } from "@attnkit/attnkit";
 * console.log(debugSettings().leaks); // false unless ATTNKIT_DEBUG=leaks
 * ```
 */
export function debugSettings(): Required<DebugOptions> {
  return { ...debug };
}

// ---- the ledger of live tensors, kept by Tensor (not exported from the module) ----

const ledger = new Map<string, { tensors: number; bytes: number }>();

function entry(device: string): { tensors: number; bytes: number } {
  let e = ledger.get(device);
  if (e === undefined) ledger.set(device, e = { tensors: 0, bytes: 0 });
  return e;
}

/** Counts a tensor made (+1) or gone (-1) on `device`. */
export function countTensor(device: string, delta: 1 | -1): void {
  entry(device).tensors += delta;
}

/** Counts memory that tensors took (+bytes) or gave back (-bytes) on `device`. */
export function countTensorBytes(device: string, bytes: number): void {
  entry(device).bytes += bytes;
}

// Stack frames inside attnkit's own folders, which a report leaves out to start at the caller.
const LIBRARY_FRAMES = [new URL("./", import.meta.url).href, new URL("../ffi/", import.meta.url).href];

/** Where a tensor is being made (the caller's stack), when leak reports are on; else undefined. */
export function creationSite(): string | undefined {
  if (!debug.leaks) return undefined;
  const frames = (new Error().stack ?? "").split("\n").slice(1);
  const outside = frames.filter((f) => !LIBRARY_FRAMES.some((dir) => f.includes(dir)));
  return (outside.length > 0 ? outside : frames).map((f) => f.trim()).join("\n  ");
}

const reported = new Set<string>();

/** Reports a tensor collected without dispose(), once per place of creation. */
export function reportLeak(what: string, site: string): void {
  if (reported.has(site)) return;
  reported.add(site);
  console.warn(
    `attnkit: ${what} was reclaimed by the garbage collector without dispose(); its memory is freed now, ` +
      `but release tensors with dispose() or \`using\` (later leaks made at the same place are not reported). ` +
      `It was made\n  ${site}`,
  );
}
