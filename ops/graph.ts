/**
 * CUDA graphs: capture a sequence of attnkit calls once and replay it with one launch.
 *
 * @module
 */
import { invalidArgument } from "../ffi/errors.ts";
import { native, unwrap } from "../ffi/library.ts";
import { checkArgument, checkOptions } from "./args.ts";
import { type Device, parseDevice } from "./device.ts";

/** Options of {@link captureGraph}. */
export interface CaptureGraphOptions {
  /** The CUDA device whose work is captured (default `"cuda"`, the first GPU). */
  device?: Device | string;
}

/**
 * A captured sequence of attnkit calls (see {@link captureGraph}). Each {@link CapturedGraph.replay}
 * runs the same kernels on the same tensors: change the inputs' contents in place between replays,
 * never the tensors themselves.
 *
 * @example
 * ```ts
 * import { captureGraph, cudaAvailable, Tensor } from "@attnkit/attnkit";
 * if (cudaAvailable()) {
 *   using x = Tensor.ones([4], { device: "cuda" });
 *   using graph = captureGraph(() => x.mul(2));
 *   graph.replay();
 *   graph.synchronize();
 *   console.log(graph.result.toArray()); // Float32Array [2, 2, 2, 2]
 *   graph.result.dispose();
 * }
 * ```
 */
export class CapturedGraph<R = void> implements Disposable {
  #ptr: Deno.PointerValue;
  /** The device the graph runs on. */
  readonly device: `cuda:${number}`;
  /**
   * What the captured function returned. Tensors it created live in the graph's memory: every replay
   * rewrites them, and they stay valid until disposed (after the graph, or before it).
   */
  readonly result: R;

  /** @internal Made by {@link captureGraph}. */
  constructor(ptr: Deno.PointerValue, device: `cuda:${number}`, result: R) {
    this.#ptr = ptr;
    this.device = device;
    this.result = result;
  }

  #live(what: string): Deno.PointerValue {
    if (this.#ptr === null) throw invalidArgument(`CapturedGraph.${what}`, "graph: disposed already");
    return this.#ptr;
  }

  /**
   * Replays the graph on its device's stream and returns without waiting. If a device-side check of an
   * earlier replay failed (a bad `stateIndices` entry, bad offsets), throws that error first.
   */
  replay(): void {
    unwrap(native().ak_graph_launch(this.#live("replay")), "CapturedGraph.replay");
  }

  /**
   * Waits for the replays so far. Throws an `AttnkitError` naming the argument when a device-side
   * check of any of them failed (the graph's later checked calls then wrote nothing); the graph stays usable.
   */
  synchronize(): void {
    unwrap(native().ak_graph_synchronize(this.#live("synchronize")), "CapturedGraph.synchronize");
  }

  /** How many nodes (kernels, copies, fills) the graph holds. */
  get nodeCount(): number {
    const out = new BigInt64Array(1);
    unwrap(
      native().ak_graph_node_count(this.#live("nodeCount"), new Uint8Array(out.buffer)),
      "CapturedGraph.nodeCount",
    );
    return Number(out[0]);
  }

  /** Whether {@link CapturedGraph.dispose} has run. */
  get disposed(): boolean {
    return this.#ptr === null;
  }

  /** Waits for the graph's replays and releases it (safe twice). Tensors in `result` stay valid. */
  dispose(): void {
    if (this.#ptr === null) return;
    unwrap(native().ak_graph_destroy(this.#ptr), "CapturedGraph.dispose");
    this.#ptr = null;
  }

  /** Same as {@link CapturedGraph.dispose}. */
  [Symbol.dispose](): void {
    this.dispose();
  }
}

let captureDepth = 0;

/** Whether a {@link captureGraph} body is running (work that must not be captured checks it). */
export function insideCapture(): boolean {
  return captureDepth > 0;
}

/**
 * Captures the CUDA work of `body` (run once, now, without executing anything on the device) into a
 * graph that replays it with one launch, as a serving loop's decode step wants.
 *
 * Inside `body` nothing may wait for the device or move data between host and device: such a call (a
 * host read-back of `cuSeqlens`, `toArray()`, `Tensor.from` on CUDA, `synchronize`) throws an
 * `AttnkitError` and the capture is discarded. The pool ops (`recurrentGdnDecode`,
 * `recurrentKdaDecode`, `causalConv1dDecode`, `pagedCausalConv1d`, the paged prefill with or without a
 * replay state) and the packed chunked ops (the delta rule, Gated DeltaNet, KDA and the gated linear family with a
 * `cuSeqlens` tensor, forward and backward, which size their work by T and N and never by the offsets)
 * then check `stateIndices` and `cuSeqlens` on the device instead of reading them back: a failure is
 * reported by the next {@link CapturedGraph.replay} or {@link CapturedGraph.synchronize}, and the
 * graph's later checked calls write nothing (a packed chunked call then runs every sequence empty). A
 * replay may change the offsets' values (empty sequences, tokens past the last offset), not their count.
 * A captured packed call cannot see its longest sequence, so with few long sequences its forward may
 * split the state pass differently from an eager call: results then agree to rounding, not to the bit.
 * Run each op once before capturing (its first call loads its kernels). Tensors created inside `body`
 * keep their addresses for every replay.
 *
 * @example
 * ```ts
 * import { captureGraph, cudaAvailable, Tensor } from "@attnkit/attnkit";
 * if (cudaAvailable()) {
 *   using x = Tensor.ones([8], { device: "cuda" });
 *   using y = Tensor.zeros([8], { device: "cuda" });
 *   using graph = captureGraph(() => y.copyFrom(x.add(1)));
 *   graph.replay();
 *   graph.synchronize();
 *   console.log(y.toArray()); // Float32Array of 2s
 * }
 * ```
 */
export function captureGraph<R>(body: () => R, options: CaptureGraphOptions = {}): CapturedGraph<R> {
  const capture = begin("captureGraph", body, options);
  let result: R;
  try {
    result = body();
    if (result instanceof Promise) {
      result.catch(() => {}); // its failure, if any, is not this function's to report
      throw invalidArgument(
        "captureGraph",
        "body: expected a synchronous function, got one returning a Promise (captureGraphAsync takes those)",
      );
    }
  } catch (e) {
    capture.abort();
    throw e;
  }
  return capture.end(result);
}

/** An open capture: checked arguments, the device capturing, and its two ways to close. */
function begin(op: string, body: unknown, options: CaptureGraphOptions) {
  checkArgument(op, "body", body, "function");
  const o = checkOptions<CaptureGraphOptions>(op, options, { device: "string" });
  const id = parseDevice(o.device ?? "cuda", op);
  if (id.type !== 1) throw invalidArgument(op, `device: expected a CUDA device, got "${id.name}"`);
  const lib = native();
  unwrap(lib.ak_graph_begin(id.index), op);
  captureDepth++;
  return {
    abort() {
      captureDepth--;
      lib.ak_graph_abort(id.index);
    },
    end<R>(result: R): CapturedGraph<R> {
      captureDepth--;
      const out = new BigUint64Array(1);
      unwrap(lib.ak_graph_end(id.index, new Uint8Array(out.buffer)), op);
      return new CapturedGraph(Deno.UnsafePointer.create(out[0]), id.name as `cuda:${number}`, result);
    },
  };
}

/**
 * {@link captureGraph} for a body that awaits: the capture stays open across its awaits, so a step that
 * goes through an asynchronous communicator (the context-parallel recipes over an `NcclGroup`, whose
 * all-gathers are captured like any kernel) becomes one graph. While the body awaits, nothing else in
 * the process may use the device (it would be captured too) and the body may only await work that is
 * enqueued on the device, never a timer, a file or another process: those cannot be replayed.
 *
 * @example
 * ```ts
 * import { captureGraphAsync, cudaAvailable, Tensor } from "@attnkit/attnkit";
 * if (cudaAvailable()) {
 *   using x = Tensor.ones([8], { device: "cuda" });
 *   using graph = await captureGraphAsync(async () => {
 *     const y = x.add(1);
 *     return await Promise.resolve(y.mul(2)); // an awaited step, enqueued on the device
 *   });
 *   graph.replay();
 *   graph.synchronize();
 *   console.log(graph.result.toArray()); // Float32Array of 4s
 *   graph.result.dispose();
 * }
 * ```
 */
export async function captureGraphAsync<R>(
  body: () => Promise<R>,
  options: CaptureGraphOptions = {},
): Promise<CapturedGraph<R>> {
  const capture = begin("captureGraphAsync", body, options);
  let result: R;
  try {
    result = await body();
  } catch (e) {
    capture.abort();
    throw e;
  }
  return capture.end(result);
}
