/**
 * What the DeltaNet and Gated DeltaNet op classes share: their constructor options (with the layout
 * each one requires), the forward ops' results, the backward ops' start state read out of chunk
 * states, the combined ops' forward-save / backward-release cycle and the decode ops' settings.
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { native, unwrap } from "../../ffi/library.ts";
import { booleanOption, checkOptions, type OptionSpec } from "../args.ts";
import {
  expectDType,
  expectForwardTensorsLive,
  expectSameDevice,
  expectShape,
  expectTensor,
} from "../checks.ts";
import { Tensor } from "../tensor.ts";
import { checkKernelMap, type KernelMap } from "../tune/choice.ts";
import {
  type BackwardOutputs,
  checkChunkSize,
  checkDeltaCall,
  type DecodeSettings,
  deltaBackward,
  type DeltaBackwardBuffers,
  deltaForward,
  type DeltaForwardBuffers,
  type DeltaInputs,
  type DeltaKernelChoice,
  type DeltaSettings,
} from "./delta_native.ts";
import { type LinearLayout, linearLayout, namedLayout } from "./layouts.ts";
import { callerBuffers, disposable } from "./results.ts";
import type { DeltaSavedStates } from "./saved.ts";

/** Constructor options of the chunked op classes. */
export interface DeltaOpOptions {
  /**
   * Required: `"bshd"` (q `[B, T, HK, K]`, g and beta `[B, T, H]`) or `"bhsd"` (q `[B, HK, T, K]`, g
   * and beta `[B, H, T]`); outputs and gradients come back in the same layout. The classes whose
   * name states a layout (`...BTHD...` = `"bshd"`, `...BHTD...` = `"bhsd"`) take it from the name.
   */
  layout: LinearLayout;
  /** Tokens per chunk: 32, 64 (default) or 128. */
  chunkSize?: number;
  /** Query scale (default `K ** -0.5`). */
  scale?: number;
  /** L2-normalise q and k inside the kernel (default false). */
  useQkL2norm?: boolean;
}

/**
 * How a delta-rule op class picks its kernels: the planner (default), a fixed map of tuning keys, or a
 * tuning run per shape class.
 */
export interface DeltaKernelOptions {
  /**
   * On the first call of each shape class (dtype, layout, sizes, gating, chunk, norm), time the candidate
   * kernels against the planner's choice (outputs compared; one that disagrees is never chosen), keep the
   * fastest in the on-disk tuning cache and use it from then on (default false). The forward tunes its
   * state pass and tile (`linear.fwd.state`, `linear.fwd.state.tile`), the backward its gradient kernels and
   * tiles (`linear.bwd.grads`, `linear.bwd.states.tile`, `linear.bwd.dstates.tile`); a forward op's result
   * tunes its own backward too. Never inside a graph capture.
   */
  tune?: boolean;
  /**
   * Tuning keys and values for this op's calls, over the table in force: `linear.fwd.*` for the forward
   * classes, `linear.bwd.*` for the backward classes, both for the combined ones (e.g.
   * `{ "linear.fwd.state": "mma", "linear.bwd.grads": "two_pass" }`). Wins over `tune`; a setting that
   * cannot serve a call makes the call throw, naming why.
   */
  kernelMap?: KernelMap;
}

/** Constructor options of the forward and backward op classes that require a layout. */
export type DeltaTunedOpOptions = DeltaOpOptions & DeltaKernelOptions;

/** Constructor options of the combined (forward and backward) op classes. */
export interface DeltaCombinedOpOptions extends DeltaOpOptions, DeltaKernelOptions {
  /**
   * Keep the per-chunk states from the forward for the backward where the backend stores them
   * (default true here, since these ops always expect their backward; see {@link DeltaSavedStates}):
   * a faster backward for `H * chunks * (K V + 64 V + 64 * 64 + 64 K)` more elements held between
   * the two calls.
   */
  saveForBackward?: boolean;
}

/** Constructor options of the op classes whose name states the layout (`layout` optional there). */
export type NamedLayoutOpOptions = Omit<DeltaOpOptions, "layout"> & DeltaKernelOptions & {
  /** The layout the name states (`...BTHD...`: `"bshd"`, `...BHTD...`: `"bhsd"`); may be left out. */
  layout?: LinearLayout;
};

/** Constructor options of the decode op classes (one token per sequence: no layout). */
export interface DecodeOpOptions {
  /** Query scale (default `K ** -0.5`). */
  scale?: number;
  /** L2-normalise q and k inside the kernel (default false). */
  useQkL2norm?: boolean;
  /** Write the new state over the given state and return that same tensor (default false). */
  inPlace?: boolean;
  /**
   * The decode kernel for this op's calls, over the tuning table in force: `{ "linear.decode": "tile" }`
   * (state tiles in shared memory: K 64, 128 or 256 with 16-byte aligned state rows) or `"simt"` (the
   * state in registers, any K). A kernel that cannot serve a call makes the call throw, naming why.
   */
  kernelMap?: KernelMap;
}

/** Checked op options. */
export interface ResolvedOptions {
  /** The layout of the tensors (unused by decode). */
  layout: LinearLayout;
  /** The chunk size, or undefined where the op picks it per call. */
  chunkSize: number | undefined;
  /** The scale, or undefined for `K ** -0.5`. */
  scale: number | undefined;
  /** In-kernel L2 norm of q and k. */
  l2norm: boolean;
  /** Keep the forward's per-chunk states for the backward (the combined ops). */
  saveForBackward: boolean;
  /** The kernel choice of the op class's forward and backward calls. */
  choice?: DeltaKernelChoice;
}

/** The constructor options of the chunked forward or backward op classes. */
export const CHUNKED_OP_OPTIONS: OptionSpec = {
  layout: "any",
  chunkSize: "any",
  scale: "any",
  useQkL2norm: "any",
};
/** The constructor options of the chunked forward op classes (their kernel choice besides). */
export const CHUNKED_FWD_OP_OPTIONS: OptionSpec = { ...CHUNKED_OP_OPTIONS, tune: "any", kernelMap: "any" };
/** The constructor options of the backward op classes. */
export const CHUNKED_BWD_OP_OPTIONS: OptionSpec = { ...CHUNKED_FWD_OP_OPTIONS };
/** The constructor options of the combined (forward and backward) op classes. */
export const COMBINED_OP_OPTIONS: OptionSpec = { ...CHUNKED_FWD_OP_OPTIONS, saveForBackward: "any" };

/** The constructor options of the decode op classes. */
export const DECODE_OP_OPTIONS: OptionSpec = {
  scale: "any",
  useQkL2norm: "any",
  inPlace: "any",
  kernelMap: "any",
};

// The tuning-key prefixes each kind of op class takes in its kernelMap.
const KERNEL_STAGES = new Map<OptionSpec, readonly string[]>([
  [CHUNKED_FWD_OP_OPTIONS, ["linear.fwd"]],
  [CHUNKED_BWD_OP_OPTIONS, ["linear.bwd"]],
  [COMBINED_OP_OPTIONS, ["linear.fwd", "linear.bwd"]],
  [DECODE_OP_OPTIONS, ["linear.decode"]],
]);

/**
 * How an op class takes its layout: `"required"` (most), the layout its name states (optional,
 * checked), or `"none"` (decode: `[B, H, D]` per step has no sequence dimension).
 */
export type LayoutRule = "required" | LinearLayout | "none";

/**
 * Checks constructor options against the op's keys (`spec`) and their values; `chunkSize` undefined
 * stays undefined when `defaultChunk` is.
 */
export function resolveOptions(
  op: string,
  options: unknown,
  defaultChunk: number | undefined,
  spec: OptionSpec,
  layoutRule: LayoutRule,
): ResolvedOptions {
  if (layoutRule === "none" && typeof options === "object" && options !== null && "layout" in options) {
    throw invalidArgument(
      op,
      "layout: decode tensors ([B, H, D], one token per sequence) have no sequence dimension, so no layout; " +
        "leave it out",
    );
  }
  const o = checkOptions<DeltaCombinedOpOptions>(op, options, spec);
  const layout = layoutRule === "required"
    ? linearLayout(op, o.layout)
    : layoutRule === "none"
    ? "bshd"
    : namedLayout(op, o.layout, layoutRule);
  const chunk = o.chunkSize ?? defaultChunk;
  if (chunk !== undefined) checkChunkSize(op, chunk);
  if (o.scale !== undefined && (typeof o.scale !== "number" || !Number.isFinite(o.scale))) {
    throw invalidArgument(op, `scale: expected a finite number, got ${String(o.scale)}`);
  }
  const l2norm = booleanOption(op, "useQkL2norm", o.useQkL2norm, false);
  const saveForBackward = booleanOption(op, "saveForBackward", o.saveForBackward, true);
  booleanOption(op, "inPlace", (o as DecodeOpOptions).inPlace, false); // the decode ops read it themselves
  return {
    layout,
    chunkSize: chunk,
    scale: o.scale,
    l2norm,
    saveForBackward,
    choice: KERNEL_STAGES.has(spec)
      ? {
        tune: booleanOption(op, "tune", o.tune, false),
        kernelMap: checkKernelMap(op, o.kernelMap, KERNEL_STAGES.get(spec)!),
      }
      : undefined,
  };
}

/** A second handle on a tensor's memory, so it outlives the caller disposing their own handle. */
function retain(t: Tensor): Tensor {
  return t.reshape(t.shape);
}

/** Inputs a combined op keeps between forward and backward (its own handles on the memory). */
class SavedInputs implements Disposable {
  #inputs: DeltaInputs | undefined;
  #states: DeltaSavedStates | undefined;

  /** Keeps these inputs (and takes the forward's saved states), releasing any kept before. */
  save(inputs: DeltaInputs, states?: DeltaSavedStates): void {
    const kept: Tensor[] = [];
    try {
      for (const t of [inputs.q, inputs.k, inputs.v, inputs.g, inputs.beta]) {
        if (t !== undefined) kept.push(retain(t));
      }
    } catch (e) {
      for (const t of kept) t.dispose();
      states?.dispose();
      throw e;
    }
    this.dispose();
    this.#states = states;
    const [q, k, v] = kept;
    this.#inputs = inputs.g !== undefined
      ? { q, k, v, g: kept[3], beta: kept[4] }
      : { q, k, v, beta: kept[3] };
  }

  /** The kept inputs; throws when there are none. */
  get(op: string): DeltaInputs {
    if (this.#inputs === undefined) {
      throw invalidArgument(op, "backward: call forward first (each forward allows one backward)");
    }
    return this.#inputs;
  }

  /** The forward's saved states, if it stored any. */
  get states(): DeltaSavedStates | undefined {
    return this.#states;
  }

  /** True while inputs are kept. */
  get held(): boolean {
    return this.#inputs !== undefined;
  }

  /** Releases the kept inputs (safe to call twice). */
  dispose(): void {
    const s = this.#inputs;
    this.#inputs = undefined;
    this.#states?.dispose();
    this.#states = undefined;
    if (s === undefined) return;
    for (const t of [s.q, s.k, s.v, s.g, s.beta]) t?.dispose();
  }

  /** Same as `dispose()`. */
  [Symbol.dispose](): void {
    this.dispose();
  }
}

/**
 * The forward-save / backward-release cycle of a combined (forward and backward) op class: `forward`
 * keeps its own handles on the inputs (and the forward's saved states), `backward` turns the output's
 * gradient into the op's gradients and releases them, as does `dispose()`.
 */
export class CombinedDeltaRun<G> {
  readonly #op: string;
  readonly #options: ResolvedOptions;
  readonly #gated: boolean;
  readonly #gradients: OpGradients<G>;
  readonly #saved = new SavedInputs();

  /** Checks the op's constructor options (`op` names it in errors). */
  constructor(op: string, options: DeltaCombinedOpOptions, gated: boolean, gradients: OpGradients<G>) {
    this.#options = resolveOptions(op, options, 64, COMBINED_OP_OPTIONS, "required");
    this.#op = op;
    this.#gated = gated;
    this.#gradients = gradients;
  }

  /** Runs the forward and keeps the inputs for {@link CombinedDeltaRun.backward}. */
  forward(inputs: DeltaInputs, out?: { output?: Tensor }): Tensor {
    const s = opSettings(this.#options, this.#gated);
    const r = deltaForward(this.#op, inputs, s, { saved: this.#options.saveForBackward }, out);
    try {
      this.#saved.save(inputs, r.saved);
    } catch (e) {
      if (r.output !== out?.output) r.output.dispose();
      throw e;
    }
    return r.output;
  }

  /** Gradients of the last forward's inputs (into `out`'s buffers where given); releases the inputs. */
  backward(dO: Tensor, out?: DeltaBackwardBuffers): G {
    const inputs = this.#saved.get(this.#op);
    try {
      const s = opSettings(this.#options, this.#gated);
      return this.#gradients(deltaBackward(this.#op, inputs, s, dO, { out, saved: this.#saved.states }), out);
    } finally {
      this.#saved.dispose();
    }
  }

  /** True between a forward and its backward (inputs are held). */
  get held(): boolean {
    return this.#saved.held;
  }

  /** Releases the kept inputs (safe to call twice). */
  dispose(): void {
    this.#saved.dispose();
  }
}

/** A decode op class's constructor options, checked, as the settings of its calls. */
export function decodeSettings(op: string, options: DecodeOpOptions, gated: boolean): DecodeSettings {
  const o = resolveOptions(op, options, undefined, DECODE_OP_OPTIONS, "none");
  return {
    gated,
    scale: o.scale,
    l2norm: o.l2norm,
    inPlace: options.inPlace ?? false,
    kernelMap: o.choice?.kernelMap,
  };
}

/**
 * The state before the first chunk, `S[:, :, 0]` of chunk states `[B, H, NC + 1, K, V]`, as a new
 * contiguous `[B, H, K, V]` float32 tensor (one device copy).
 */
export function initialStateOf(
  op: string,
  S: unknown,
  q: Tensor,
  sizes: { B: number; H: number; T: number; K: number; V: number },
  chunkSize: number,
): Tensor {
  const states = expectTensor(op, "S", S);
  expectDType(op, "S", states, ["float32"]);
  expectSameDevice(op, "S", states, q, "q");
  const { B, H, T, K, V } = sizes;
  const entries = Math.ceil(T / chunkSize) + 1;
  expectShape(op, "S", states, [B, H, entries, K, V]);
  const h0 = Tensor.empty([B, H, K, V], { dtype: "float32", device: states.device });
  try {
    const first = states.viewDescriptor([B, H, K, V], [H * entries * K * V, entries * K * V, V, 1], op);
    unwrap(native().ak_copy(h0.descriptor(), first), op);
  } catch (e) {
    h0.dispose();
    throw e;
  }
  return h0;
}

/**
 * A backward op's call: from a zero start state, or with `S` (a forward's chunk states) from the
 * state that forward started from, whose own gradient is not wanted.
 */
export function backwardFromChunkStates(
  op: string,
  inputs: DeltaInputs,
  s: DeltaSettings,
  dO: Tensor,
  S: Tensor | undefined,
  out: DeltaBackwardBuffers | undefined,
): BackwardOutputs {
  if (S === undefined || S === null) return deltaBackward(op, inputs, s, dO, { out });
  const sizes = checkDeltaCall(op, inputs, s);
  using h0 = initialStateOf(op, S, inputs.q, sizes, s.chunkSize);
  // The forward was not given this state, so the check against it leaves the initial state out.
  const extras = { out, wantDInitialState: false, unchecked: new Set(["initialState"] as const) };
  return deltaBackward(op, inputs, { ...s, initialState: h0 }, dO, extras);
}

/** The settings of an op-class call. */
export function opSettings(o: ResolvedOptions, gated: boolean, chunkSize = o.chunkSize ?? 64): DeltaSettings {
  return {
    layout: o.layout,
    gated,
    scale: o.scale,
    chunkSize,
    recurrent: false,
    l2norm: o.l2norm,
    choice: o.choice,
  };
}

/** Options of a forward op result's own `backward`. */
export interface OpResultBackwardOptions {
  /** Buffers for the gradients (exact shape, dtype and device; dg and dbeta float32), left the caller's. */
  out?: DeltaBackwardBuffers;
}

/** How an op class turns a backward's outputs into its own gradients (the caller's `out` kept theirs). */
export type OpGradients<G> = (b: BackwardOutputs, out: unknown) => G;

/**
 * Runs a forward op's call and returns its result (output, chunk states, WY factors) with its own
 * `backward`: the gradients of that forward from the output's gradient, with its inputs (referenced,
 * not copied) and options.
 */
export function forwardWithFactors<G>(
  op: string,
  o: ResolvedOptions,
  gated: boolean,
  inputs: DeltaInputs,
  out: DeltaForwardBuffers | undefined,
  gradients: OpGradients<G>,
): {
  output: Tensor;
  chunkStates: Tensor;
  aw: Tensor;
  au: Tensor;
  backward(dOutput: Tensor, options?: OpResultBackwardOptions): G;
} & Disposable {
  const s = opSettings(o, gated);
  const r = deltaForward(op, inputs, s, { chunkStates: true, factors: true }, out);
  const held = { ...inputs };
  const fields = { output: r.output, chunkStates: r.chunkStates!, aw: r.aw!, au: r.au! };
  return Object.assign(disposable(fields, callerBuffers(out)), {
    backward(dOutput: Tensor, options?: OpResultBackwardOptions): G {
      const bop = `${op}.backward`;
      const o = checkOptions<OpResultBackwardOptions>(bop, options, { out: "object" });
      expectForwardTensorsLive(bop, held);
      return gradients(deltaBackward(bop, held, s, dOutput, { out: o.out }), o.out);
    },
  });
}
