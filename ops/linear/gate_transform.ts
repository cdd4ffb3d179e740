/**
 * Gate transforms: a raw gate projection to the float32 natural-log decay that the gated linear and
 * delta-rule kernels consume. With x = raw + dtBias and a = exp(aLog) of the element's head:
 *
 *   `"softplus"`: gate = -a softplus(x)            range (-inf, 0]    (Mamba2, Gated DeltaNet)
 *   `"bounded"`:  gate = lowerBound sigmoid(a x)     range [lowerBound, 0]  (Kimi Delta Attention)
 *
 * Per head: raw `[..., H]` (e.g. `[B, T, H]`), dtBias `[H]`; per channel: raw `[..., H, D]`, dtBias
 * `[H, D]` (dtBias's rank says which). aLog is `[H]`; aLog and dtBias are float32, raw any float dtype.
 * Arithmetic and the gate are float32. The backward's aLog and dtBias gradients are float32 sums over
 * every row in an order fixed by the shape (per-block partials, then the partials in block order, no
 * atomics): two runs give the same bits.
 *
 * @module
 */
import { native, unwrap } from "../../ffi/library.ts";
import { invalidArgument } from "../../ffi/errors.ts";
import { checkOptions, describeValue, type OptionSpec } from "../args.ts";
import {
  expectDType,
  expectForwardTensorsLive,
  expectSameDevice,
  expectShape,
  expectTensor,
} from "../checks.ts";
import type { DType } from "../dtype.ts";
import { Tensor } from "../tensor.ts";
import { callerBuffers, disposable } from "./results.ts";

/** The transforms of {@link gateTransform}: `"softplus"` (unbounded below) or `"bounded"`. */
export type GateTransformKind = "softplus" | "bounded";

/**
 * Every kind {@link gateTransform} takes.
 *
 * @example
 * ```ts
 * import { GATE_TRANSFORM_KINDS } from "@attnkit/attnkit";
 * console.log(GATE_TRANSFORM_KINDS); // ["softplus", "bounded"]
 * ```
 */
export const GATE_TRANSFORM_KINDS: readonly GateTransformKind[] = ["softplus", "bounded"];

/**
 * The lower bound of {@link boundGate}: Kimi Delta Attention's gates lie in (-5, 0).
 *
 * @example
 * ```ts
 * import { BOUND_GATE_LOWER_BOUND } from "@attnkit/attnkit";
 * console.log(BOUND_GATE_LOWER_BOUND); // -5
 * ```
 */
export const BOUND_GATE_LOWER_BOUND: number = -5;

/** Options of {@link boundGate}. */
export interface BoundGateOptions {
  /**
   * Allow approximate math (default true). On CUDA the kernels then use the hardware's approximate
   * exp, log and division (`__expf`, `__logf`, `__fdividef`), forward and backward: each gate is then
   * within a few 1e-6 of the accurate one in units of a = exp(aLog) (softplus) or |lowerBound|
   * (bounded), an absolute rather than a relative error, so a softplus gate of a very negative x (a
   * decay within 1e-6 of 1) loses its relative precision. false selects the accurate forms, good to a
   * few float32 ulps. The CPU backend always computes the accurate forms.
   */
  fastmath?: boolean;
  /**
   * Which implementation runs (attention-gym's `impl`): `"fused"` the CUDA kernels (refused on the CPU
   * backend, which has none); `"reference"` the accurate forms of the CPU backend (on CUDA over host
   * copies of the tensors, slow; `fastmath` then has no effect). Default: the device's own.
   */
  impl?: "fused" | "reference";
  /**
   * A buffer to write the gate into instead of a new tensor (raw's shape, float32, same device). It
   * stays the caller's: disposing the result leaves it alone.
   */
  out?: { gate?: Tensor };
}

/** Options of {@link gateTransform}. */
export interface GateTransformOptions extends BoundGateOptions {
  /**
   * Required, with no default: a default could silently select the wrong recurrence convention.
   * `"softplus"`: `-exp(aLog) * softplus(raw + dtBias)`; `"bounded"`: `lowerBound * sigmoid(exp(aLog)
   * * (raw + dtBias))`.
   */
  kind: GateTransformKind;
  /** Required with `"bounded"`: a number in [-3e38, 0], the gate's floor. Refused with `"softplus"`. */
  lowerBound?: number;
}

/** Buffers for the gradients (exact shape and dtype, same device); they stay the caller's. */
export interface GateTransformGradientBuffers {
  /** For draw: raw's shape and dtype. */
  draw?: Tensor;
  /** For daLog: `[H]` float32. */
  daLog?: Tensor;
  /** For ddtBias: dtBias's shape, float32. */
  ddtBias?: Tensor;
}

/** Options of {@link gateTransformBackward}: the forward's, with gradient buffers. */
export interface GateTransformBackwardOptions extends Omit<GateTransformOptions, "out"> {
  /** Buffers to write the gradients into instead of new tensors. */
  out?: GateTransformGradientBuffers;
}

/** Options of {@link boundGateBackward}: the forward's, with gradient buffers. */
export interface BoundGateBackwardOptions extends Omit<BoundGateOptions, "out"> {
  /** Buffers to write the gradients into instead of new tensors. */
  out?: GateTransformGradientBuffers;
}

/** Options of a forward result's own {@link GateTransformResult.backward}. */
export interface GateTransformResultBackwardOptions {
  /** Buffers to write the gradients into instead of new tensors. */
  out?: GateTransformGradientBuffers;
}

/** The gradients of the loss `sum(dGate * gate)`; `using` disposes them. */
export interface GateTransformGradients extends Disposable {
  /** raw's shape and dtype (computed in float32, rounded once). */
  draw: Tensor;
  /** `[H]` float32: a fixed-order float32 sum over every row and column of a head. */
  daLog: Tensor;
  /** dtBias's shape, float32: a fixed-order float32 sum over the rows (of draw before its rounding). */
  ddtBias: Tensor;
}

/** What {@link gateTransform} and {@link boundGate} return; `using` disposes the gate. */
export interface GateTransformResult extends Disposable {
  /** raw's shape, float32: the natural-log decay. */
  gate: Tensor;
  /**
   * The gradients of this forward from the gate's gradient (raw's shape, any float dtype): the same
   * as {@link gateTransformBackward} with the forward's inputs and options. The result refers to the
   * inputs: one disposed since the forward is refused, naming it.
   */
  backward(dGate: Tensor, options?: GateTransformResultBackwardOptions): GateTransformGradients;
}

const FLOATS: readonly DType[] = ["float16", "bfloat16", "float32", "float64"];
const KIND_CODES: Record<GateTransformKind, number> = { softplus: 0, bounded: 1 };
const FASTMATH_FLAG = 1;
const IMPL_FLAGS = { fused: 2, reference: 4 } as const;

const LOWER_BOUND = (v: unknown) =>
  typeof v === "number" && Number.isFinite(v) && v <= 0 && v >= -3e38
    ? undefined
    : "a number in [-3e38, 0] (a float32 floor)";
const BOUND_GATE_SPEC: OptionSpec = { fastmath: "boolean", impl: ["fused", "reference"], out: "object" };
const SPEC: OptionSpec = { kind: "any", lowerBound: LOWER_BOUND, ...BOUND_GATE_SPEC };
const RESULT_BACKWARD: OptionSpec = { out: "object" };

/** A checked call: its inputs, settings and the caller's buffers (`out`, checked where used). */
interface Call {
  raw: Tensor;
  aLog: Tensor;
  dtBias: Tensor;
  kind: GateTransformKind;
  /** 0 for softplus. */
  lowerBound: number;
  fastmath: boolean;
  impl?: "fused" | "reference";
  out?: unknown;
}

function checkKind(op: string, o: { kind?: unknown; lowerBound?: unknown }): [GateTransformKind, number] {
  const kind = o.kind;
  if (kind === undefined || kind === null) {
    throw invalidArgument(
      op,
      'options.kind: required, "softplus" or "bounded" (no default: it selects the recurrence\'s convention)',
    );
  }
  if (!GATE_TRANSFORM_KINDS.includes(kind as GateTransformKind)) {
    throw invalidArgument(op, `options.kind: expected "softplus" or "bounded", got ${describeValue(kind)}`);
  }
  const bound = o.lowerBound ?? undefined;
  if (kind === "bounded" && bound === undefined) {
    throw invalidArgument(
      op,
      'options.lowerBound: required with kind "bounded" (a number in [-3e38, 0], e.g. -5)',
    );
  }
  if (kind === "softplus" && bound !== undefined) {
    throw invalidArgument(op, 'options.lowerBound: kind "softplus" has no lower bound; leave it out');
  }
  return [kind as GateTransformKind, (bound as number | undefined) ?? 0];
}

function checkInputs(
  op: string,
  raw: unknown,
  aLog: unknown,
  dtBias: unknown,
): Omit<Call, "kind" | "lowerBound" | "fastmath" | "impl"> {
  const r = expectTensor(op, "raw", raw);
  expectDType(op, "raw", r, FLOATS);
  const a = expectTensor(op, "aLog", aLog);
  expectDType(op, "aLog", a, ["float32"]);
  expectSameDevice(op, "aLog", a, r, "raw");
  const sizes = expectShape(op, "aLog", a, ["H"]);
  const b = expectTensor(op, "dtBias", dtBias);
  expectDType(op, "dtBias", b, ["float32"]);
  expectSameDevice(op, "dtBias", b, r, "raw");
  if (b.ndim !== 1 && b.ndim !== 2) {
    throw invalidArgument(
      op,
      `dtBias: expected shape [H] (per-head gate) or [H, D] (per-channel gate), got [${b.shape.join(", ")}]`,
    );
  }
  expectShape(op, "dtBias", b, b.ndim === 1 ? ["H"] : ["H", "D"], sizes);
  const tail = b.shape;
  const fits = r.ndim >= tail.length && tail.every((n, i) => r.shape[r.ndim - tail.length + i] === n);
  if (!fits) {
    const form = tail.length === 1
      ? `[..., H=${tail[0]}] (per head: dtBias is [H])`
      : `[..., H=${tail[0]}, D=${tail[1]}] (per channel: dtBias is [H, D])`;
    throw invalidArgument(op, `raw: expected shape ${form}, got [${r.shape.join(", ")}]`);
  }
  return { raw: r, aLog: a, dtBias: b };
}

function checkCall(op: string, raw: unknown, aLog: unknown, dtBias: unknown, options: unknown): Call {
  if (options === undefined || options === null) {
    throw invalidArgument(op, 'options: required ({ kind: "softplus" } or { kind: "bounded", lowerBound })');
  }
  const o = checkOptions<GateTransformBackwardOptions | GateTransformOptions>(op, options, SPEC);
  const [kind, lowerBound] = checkKind(op, o);
  return {
    ...checkInputs(op, raw, aLog, dtBias),
    kind,
    lowerBound,
    fastmath: o.fastmath ?? true,
    impl: o.impl ?? undefined,
    out: o.out ?? undefined,
  };
}

function checkBoundGateCall(
  op: string,
  raw: unknown,
  aLog: unknown,
  dtBias: unknown,
  options: unknown,
): Call {
  const o = checkOptions<BoundGateBackwardOptions | BoundGateOptions>(op, options, BOUND_GATE_SPEC);
  const inputs = checkInputs(op, raw, aLog, dtBias);
  if (inputs.dtBias.ndim !== 2) {
    throw invalidArgument(
      op,
      `dtBias: expected [H, D] (boundGate is for per-channel gates), got [${
        inputs.dtBias.shape.join(", ")
      }]; ` +
        'for a per-head gate call gateTransform(raw, aLog, dtBias, { kind: "bounded", lowerBound })',
    );
  }
  return {
    ...inputs,
    kind: "bounded",
    lowerBound: BOUND_GATE_LOWER_BOUND,
    fastmath: o.fastmath ?? true,
    impl: o.impl ?? undefined,
    out: o.out ?? undefined,
  };
}

/** The buffer `out.<name>` when given: a live tensor of `like`'s shape, in `dtype`, on its device. */
function buffer(op: string, out: unknown, name: string, like: Tensor, dtype: DType): Tensor | undefined {
  const b = (out as Record<string, unknown> | undefined)?.[name];
  if (b === undefined || b === null) return undefined;
  const t = expectTensor(op, `out.${name}`, b);
  if (t.dtype !== dtype) throw invalidArgument(op, `out.${name}: expected dtype ${dtype}, got ${t.dtype}`);
  expectSameDevice(op, `out.${name}`, t, like, "raw");
  if (t.ndim !== like.ndim || t.shape.some((n, i) => n !== like.shape[i])) {
    throw invalidArgument(
      op,
      `out.${name}: expected shape [${like.shape.join(", ")}], got [${t.shape.join(", ")}]`,
    );
  }
  return t;
}

const flags = (c: Call) => (c.fastmath ? FASTMATH_FLAG : 0) | (c.impl ? IMPL_FLAGS[c.impl] : 0);

function forward(op: string, c: Call): GateTransformResult {
  checkOptions(op, c.out, { gate: "any" }, "out");
  const into = buffer(op, c.out, "gate", c.raw, "float32");
  const gate = into ?? Tensor.empty(c.raw.shape, { dtype: "float32", device: c.raw.device });
  try {
    unwrap(
      native().ak_gate_transform_fwd(
        c.raw.descriptor(op),
        c.aLog.descriptor(op),
        c.dtBias.descriptor(op),
        KIND_CODES[c.kind],
        c.lowerBound,
        flags(c),
        gate.descriptor(op),
      ),
      op,
    );
  } catch (e) {
    if (!into) gate.dispose();
    throw e;
  }
  rememberForward(c);
  const saved: Call = { ...c, out: undefined };
  return {
    ...disposable({ gate }, callerBuffers(c.out)),
    backward(dGate: Tensor, options?: GateTransformResultBackwardOptions): GateTransformGradients {
      const bop = "GateTransformResult.backward";
      const o = checkOptions<GateTransformResultBackwardOptions>(bop, options, RESULT_BACKWARD);
      expectForwardTensorsLive(bop, { raw: saved.raw, aLog: saved.aLog, dtBias: saved.dtBias });
      return gradients(bop, saved, dGate, o.out);
    },
  };
}

function gradients(op: string, c: Call, dGate: unknown, out: unknown): GateTransformGradients {
  const g = expectTensor(op, "dGate", dGate);
  expectDType(op, "dGate", g, FLOATS);
  expectSameDevice(op, "dGate", g, c.raw, "raw");
  if (g.ndim !== c.raw.ndim || g.shape.some((n, i) => n !== c.raw.shape[i])) {
    throw invalidArgument(
      op,
      `dGate: expected shape [${c.raw.shape.join(", ")}] (the gate's), got [${g.shape.join(", ")}]`,
    );
  }
  checkOptions(op, out, { draw: "any", daLog: "any", ddtBias: "any" }, "out");
  const given = {
    draw: buffer(op, out, "draw", c.raw, c.raw.dtype),
    daLog: buffer(op, out, "daLog", c.aLog, "float32"),
    ddtBias: buffer(op, out, "ddtBias", c.dtBias, "float32"),
  };
  const made: Tensor[] = [];
  const fresh = (t: Tensor | undefined, like: Tensor, dtype: DType) => {
    if (t) return t;
    const n = Tensor.empty(like.shape, { dtype, device: like.device });
    made.push(n);
    return n;
  };
  try {
    const into = {
      draw: fresh(given.draw, c.raw, c.raw.dtype),
      daLog: fresh(given.daLog, c.aLog, "float32"),
      ddtBias: fresh(given.ddtBias, c.dtBias, "float32"),
    };
    // The kernels read a float32 gradient, as the gate is.
    using cast = g.dtype === "float32" ? undefined : g.cast("float32");
    unwrap(
      native().ak_gate_transform_bwd(
        c.raw.descriptor(op),
        c.aLog.descriptor(op),
        c.dtBias.descriptor(op),
        (cast ?? g).descriptor(op),
        KIND_CODES[c.kind],
        c.lowerBound,
        flags(c),
        into.draw.descriptor(op),
        into.daLog.descriptor(op),
        into.ddtBias.descriptor(op),
      ),
      op,
    );
    return disposable(into, callerBuffers(out));
  } catch (e) {
    for (const t of made) t.dispose();
    throw e;
  }
}

// ---- an explicit backward against the forwards seen on its inputs ----

interface SeenForward {
  aLog: WeakRef<Tensor>;
  dtBias: WeakRef<Tensor>;
  kind: GateTransformKind;
  lowerBound: number;
}
// Weak on both sides: remembering a forward keeps no tensor alive.
const seen = new WeakMap<Tensor, SeenForward[]>();
const MAX_REMEMBERED = 4;

const sameInputs = (f: SeenForward, c: Call) => f.aLog.deref() === c.aLog && f.dtBias.deref() === c.dtBias;

function rememberForward(c: Call): void {
  const kept = (seen.get(c.raw) ?? []).filter((f) =>
    !(sameInputs(f, c) && f.kind === c.kind && f.lowerBound === c.lowerBound)
  );
  kept.push({
    aLog: new WeakRef(c.aLog),
    dtBias: new WeakRef(c.dtBias),
    kind: c.kind,
    lowerBound: c.lowerBound,
  });
  seen.set(c.raw, kept.slice(-MAX_REMEMBERED));
}

/**
 * Refuses a backward whose kind or lower bound matches none of the forwards run on these very
 * tensors (a wrong kind gives plausible but wrong gradients). Inputs never seen in a forward pass.
 */
function checkAgainstForwards(op: string, c: Call): void {
  const forwards = (seen.get(c.raw) ?? []).filter((f) => sameInputs(f, c));
  if (forwards.length === 0 || forwards.some((f) => f.kind === c.kind && f.lowerBound === c.lowerBound)) {
    return;
  }
  const f = forwards[forwards.length - 1];
  const ran = f.kind === "bounded" ? `kind "bounded", lowerBound ${f.lowerBound}` : 'kind "softplus"';
  const asked = c.kind === "bounded" ? `kind "bounded", lowerBound ${c.lowerBound}` : 'kind "softplus"';
  const name = f.kind !== c.kind ? "kind" : "lowerBound";
  throw invalidArgument(
    op,
    `options.${name}: the forward on these inputs ran with ${ran}, this backward with ${asked}; pass the forward's options`,
  );
}

// ---- the public functions ----

/**
 * The gate transform, forward: the float32 natural-log decay `[..., H]` or `[..., H, D]` (raw's
 * shape), and a `backward` for its gradients. `kind` is required.
 *
 * @example
 * ```ts
 * import { gateTransform, Tensor } from "@attnkit/attnkit";
 * using raw = Tensor.randn([2, 16, 4], { dtype: "bfloat16" }); // [B, T, H]: a per-head gate
 * using aLog = Tensor.rand([4], { low: -1, high: 1 });
 * using dtBias = Tensor.randn([4]);
 * using r = gateTransform(raw, aLog, dtBias, { kind: "softplus" });
 * console.log(r.gate.dtype, r.gate.shape); // float32 [2, 16, 4]
 * using dGate = Tensor.randn([2, 16, 4]);
 * using grads = r.backward(dGate);
 * console.log(grads.draw.dtype, grads.daLog.shape); // bfloat16 [4]
 * ```
 */
export function gateTransform(
  raw: Tensor,
  aLog: Tensor,
  dtBias: Tensor,
  options: GateTransformOptions,
): GateTransformResult {
  const op = "gateTransform";
  return forward(op, checkCall(op, raw, aLog, dtBias, options));
}

/**
 * Gradients of {@link gateTransform} for the loss `sum(dGate * gate)`: draw (raw's dtype), daLog and
 * ddtBias (float32, deterministic sums). Takes the forward's inputs and options; a kind or lower
 * bound that contradicts every forward run on these tensors is refused.
 *
 * @example
 * ```ts
 * import { gateTransformBackward, Tensor } from "@attnkit/attnkit";
 * using raw = Tensor.randn([1, 8, 2, 16]); // [B, T, H, D]: a per-channel gate
 * using aLog = Tensor.zeros([2]);
 * using dtBias = Tensor.zeros([2, 16]);
 * using dGate = Tensor.randn([1, 8, 2, 16]);
 * using g = gateTransformBackward(dGate, raw, aLog, dtBias, { kind: "bounded", lowerBound: -5 });
 * console.log(g.ddtBias.shape); // [2, 16]
 * ```
 */
export function gateTransformBackward(
  dGate: Tensor,
  raw: Tensor,
  aLog: Tensor,
  dtBias: Tensor,
  options: GateTransformBackwardOptions,
): GateTransformGradients {
  const op = "gateTransformBackward";
  const c = checkCall(op, raw, aLog, dtBias, options);
  checkAgainstForwards(op, c);
  return gradients(op, c, dGate, c.out);
}

/**
 * Kimi Delta Attention's gate: {@link gateTransform} with `kind: "bounded"` and `lowerBound: -5`, for
 * per-channel gates (raw `[..., H, D]`, dtBias `[H, D]`): `-5 * sigmoid(exp(aLog) * (raw + dtBias))`.
 *
 * @example
 * ```ts
 * import { boundGate, Tensor } from "@attnkit/attnkit";
 * using raw = Tensor.randn([1, 32, 2, 64], { dtype: "bfloat16" });
 * using aLog = Tensor.zeros([2]);
 * using dtBias = Tensor.zeros([2, 64]);
 * using r = boundGate(raw, aLog, dtBias, { fastmath: false });
 * console.log(r.gate.shape); // [1, 32, 2, 64]
 * ```
 */
export function boundGate(
  raw: Tensor,
  aLog: Tensor,
  dtBias: Tensor,
  options?: BoundGateOptions,
): GateTransformResult {
  const op = "boundGate";
  return forward(op, checkBoundGateCall(op, raw, aLog, dtBias, options));
}

/**
 * Gradients of {@link boundGate} for the loss `sum(dGate * gate)`, as {@link gateTransformBackward}
 * with `kind: "bounded"` and `lowerBound: -5`.
 *
 * @example
 * ```ts
 * import { boundGateBackward, Tensor } from "@attnkit/attnkit";
 * using raw = Tensor.randn([1, 4, 2, 8]);
 * using aLog = Tensor.zeros([2]);
 * using dtBias = Tensor.zeros([2, 8]);
 * using dGate = Tensor.ones([1, 4, 2, 8]);
 * using g = boundGateBackward(dGate, raw, aLog, dtBias);
 * console.log(g.daLog.shape); // [2]
 * ```
 */
export function boundGateBackward(
  dGate: Tensor,
  raw: Tensor,
  aLog: Tensor,
  dtBias: Tensor,
  options?: BoundGateBackwardOptions,
): GateTransformGradients {
  const op = "boundGateBackward";
  const c = checkBoundGateCall(op, raw, aLog, dtBias, options);
  checkAgainstForwards(op, c);
  return gradients(op, c, dGate, c.out);
}
