/**
 * Timing device work: CUDA events on the attnkit stream, or the host clock for the CPU.
 *
 * @module
 */
import { checkArgument, checkOptions, numberIn } from "./args.ts";
import { native, unwrap } from "../ffi/library.ts";
import { type Device, parseDevice, synchronize } from "./device.ts";

/** Result of {@link timeIt}. */
export interface Timing {
  /** Median milliseconds per call. */
  medianMs: number;
  /** Fastest call, milliseconds. */
  minMs: number;
  /** Mean milliseconds per call. */
  meanMs: number;
  /** Every measured call, milliseconds. */
  samples: number[];
}

/** Options of {@link timeIt}. */
export interface TimeOptions {
  /** Where the work runs (default `"cpu"`). */
  device?: Device | string;
  /** Untimed calls first (default 3). */
  warmup?: number;
  /** Timed calls (default 20). */
  iterations?: number;
  /** Runs before each timed call, outside the measurement (e.g. to flush a cache). */
  before?: () => void;
}

/**
 * Times `fn` with device events (CUDA) or the host clock (CPU): warm-up calls, then one
 * measurement per call; returns the median and the rest. On CUDA every call's pair of events is
 * recorded first and read once at the end (as triton's `do_bench` does), so the host prepares a
 * call while the device still runs the one before: the samples measure the device's work, not the
 * host's launch latency after an idle device.
 *
 * @example
 * ```ts
 * import { Tensor, timeIt } from "@attnkit/attnkit";
 * using x = Tensor.randn([1 << 16]);
 * const t = timeIt(() => x.cast("bfloat16").dispose(), { iterations: 5 });
 * console.log(`${t.medianMs.toFixed(3)} ms`);
 * ```
 */
export function timeIt(fn: () => void, options: TimeOptions = {}): Timing {
  checkArgument("timeIt", "fn", fn, "function");
  checkOptions("timeIt", options, {
    device: "any",
    warmup: numberIn(0, 1e6, true),
    iterations: numberIn(1, 1e6, true),
    before: "function",
  });
  const id = parseDevice(options.device, "timeIt");
  const warmup = options.warmup ?? 3;
  const iterations = options.iterations ?? 20;
  for (let i = 0; i < warmup; i++) fn();
  synchronize(id.name);
  const samples: number[] = [];
  if (id.type === 0) {
    for (let i = 0; i < iterations; i++) {
      options.before?.();
      const t0 = performance.now();
      fn();
      samples.push(performance.now() - t0);
    }
  } else {
    const events = Array.from({ length: 2 * iterations }, () => new DeviceEvent(id.index));
    try {
      for (let i = 0; i < iterations; i++) {
        options.before?.();
        events[2 * i].record();
        fn();
        events[2 * i + 1].record();
      }
      for (let i = 0; i < iterations; i++) samples.push(events[2 * i].elapsedTo(events[2 * i + 1]));
    } finally {
      for (const e of events) e[Symbol.dispose]();
    }
  }
  const sorted = [...samples].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return {
    medianMs: sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2,
    minMs: sorted[0],
    meanMs: samples.reduce((a, b) => a + b, 0) / samples.length,
    samples,
  };
}

/**
 * A CUDA event on attnkit's stream of one device.
 *
 * @example
 * ```ts
 * import { cudaAvailable, DeviceEvent } from "@attnkit/attnkit";
 * if (cudaAvailable()) {
 *   using a = new DeviceEvent(0);
 *   using b = new DeviceEvent(0);
 *   a.record();
 *   b.record();
 *   console.log(a.elapsedTo(b));
 * }
 * ```
 */
export class DeviceEvent {
  #ptr: Deno.PointerValue;

  /** Creates an event on CUDA device `index`. */
  constructor(index = 0) {
    checkArgument("DeviceEvent", "index", index, numberIn(0, 2 ** 31 - 1, true));
    const out = new BigUint64Array(1);
    unwrap(native().ak_event_create(index, new Uint8Array(out.buffer)), "DeviceEvent");
    this.#ptr = Deno.UnsafePointer.create(out[0]);
  }

  /** Records the event after the work queued so far. */
  record(): void {
    unwrap(native().ak_event_record(this.#ptr), "DeviceEvent.record");
  }

  /** Milliseconds from this event to `end` (waits for `end`). */
  elapsedTo(end: DeviceEvent): number {
    const out = new Float64Array(1);
    unwrap(
      native().ak_event_elapsed_ms(this.#ptr, end.#ptr, new Uint8Array(out.buffer)),
      "DeviceEvent.elapsedTo",
    );
    return out[0];
  }

  /** Releases the event (safe twice). */
  [Symbol.dispose](): void {
    if (this.#ptr === null) return;
    unwrap(native().ak_event_destroy(this.#ptr), "DeviceEvent.dispose");
    this.#ptr = null;
  }
}
