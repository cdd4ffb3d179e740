/**
 * A backward must run with the options of its forward: left out, `useQkL2norm` alone turns dq into
 * garbage without any error. This module remembers, per q tensor, the options the forwards on exactly
 * these input tensors ran with, and names the first option of a backward that matches none of them.
 * The same comparison checks a backward against the forward that made its `saved` states.
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import type { Tensor } from "../tensor.ts";
import type { LinearLayout } from "./layouts.ts";

/**
 * The options of a delta-rule call that a backward must share with its forward, resolved (`scale`
 * is a number even when the call left it to the default).
 */
export interface DeltaCallOptions {
  /** The layout of q, k, v, g, beta and the output. */
  layout: LinearLayout;
  /** In-kernel L2 norm of q and k. */
  useQkL2norm: boolean;
  /** The query scale the call used. */
  scale: number;
  /** The chunk size, or undefined for the recurrent (token by token) form. */
  chunkSize: number | undefined;
  /** Whether the call started from an initial state. */
  initialState: boolean;
  /** Whether the call read packed sequences. */
  cuSeqlens: boolean;
}

/** Options a comparison leaves out (an op that derives the initial state itself). */
export type Unchecked = ReadonlySet<keyof DeltaCallOptions>;

function show(name: keyof DeltaCallOptions, o: DeltaCallOptions): string {
  const value = o[name];
  if (name === "initialState" || name === "cuSeqlens") return value ? `with ${name}` : `without ${name}`;
  return `with ${name}: ${typeof value === "string" ? `"${value}"` : String(value)}`;
}

/**
 * The first option in which a backward differs from a forward, as a message naming it (`source`
 * says which forward, e.g. "the forward on these inputs"), or undefined when they agree. The chunk
 * size is compared only when both ran chunked (the recurrent and chunked forms compute the same).
 */
export function contradiction(
  forward: DeltaCallOptions,
  backward: DeltaCallOptions,
  source: string,
  unchecked: Unchecked = new Set(),
): string | undefined {
  const names: (keyof DeltaCallOptions)[] = [
    "layout",
    "useQkL2norm",
    "scale",
    "chunkSize",
    "initialState",
    "cuSeqlens",
  ];
  for (const name of names) {
    if (unchecked.has(name) || forward[name] === backward[name]) continue;
    if (name === "chunkSize" && (forward.chunkSize === undefined || backward.chunkSize === undefined)) {
      continue;
    }
    return `${name}: ${source} ran ${show(name, forward)}, this backward ${
      show(name, backward)
    }; pass the forward's options`;
  }
  return undefined;
}

/** The tensors that identify a forward's inputs (q is the key of the map). */
interface SeenForward {
  k: WeakRef<Tensor>;
  v: WeakRef<Tensor>;
  g: WeakRef<Tensor> | undefined;
  beta: WeakRef<Tensor>;
  options: DeltaCallOptions;
}

/** The inputs a forward or backward ran on. */
export interface CallTensors {
  /** Queries (the key). */
  q: Tensor;
  /** Keys. */
  k: Tensor;
  /** Values. */
  v: Tensor;
  /** Decay (gated rule only). */
  g?: Tensor;
  /** Write strength. */
  beta: Tensor;
}

// Weak on both sides: remembering a forward keeps no tensor alive.
const seen = new WeakMap<Tensor, SeenForward[]>();
const MAX_VARIANTS = 8;

function sameInputs(f: SeenForward, x: CallTensors): boolean {
  return f.k.deref() === x.k && f.v.deref() === x.v && f.beta.deref() === x.beta && f.g?.deref() === x.g;
}

function sameOptions(a: DeltaCallOptions, b: DeltaCallOptions): boolean {
  return contradiction(a, b, "") === undefined && a.chunkSize === b.chunkSize;
}

/** Remembers that a forward ran on these tensors with these options. */
export function rememberForward(x: CallTensors, options: DeltaCallOptions): void {
  const list = seen.get(x.q) ?? [];
  const kept = list.filter((f) => !(sameInputs(f, x) && sameOptions(f.options, options)));
  kept.push({
    k: new WeakRef(x.k),
    v: new WeakRef(x.v),
    g: x.g === undefined ? undefined : new WeakRef(x.g),
    beta: new WeakRef(x.beta),
    options: { ...options },
  });
  seen.set(x.q, kept.slice(-MAX_VARIANTS));
}

/**
 * Refuses a backward whose inputs were seen in forwards when its options match none of them, naming
 * the first differing option of the latest such forward. Inputs never seen in a forward pass.
 */
export function checkAgainstForwards(
  op: string,
  x: CallTensors,
  options: DeltaCallOptions,
  unchecked?: Unchecked,
): void {
  const forwards = (seen.get(x.q) ?? []).filter((f) => sameInputs(f, x));
  if (forwards.length === 0) return;
  const source = "the forward on these inputs";
  if (forwards.some((f) => contradiction(f.options, options, source, unchecked) === undefined)) return;
  const message = contradiction(forwards[forwards.length - 1].options, options, source, unchecked)!;
  throw invalidArgument(op, message);
}
