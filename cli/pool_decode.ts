/**
 * The command line's serving decode steps on a paged state pool: `kda-decode` (`recurrentKdaDecode`, a
 * gate per key channel, bounded or softplus) and `gdn-pool-decode` (`recurrentGdnDecode`, a softplus
 * gate per head). One token per sequence from the packed projection row; the gate, beta and the q/k L2
 * norm are formed in the step, and the slots the sequences name in a `[numSlots, H, V, K]` pool advance
 * in place. Checked against `pagedDecodeReference` under the paged decode tests' rule
 * (`pagedDecodeTolerance`, `rowToleranceBreach` in reference/tolerance.ts): the output (padding rows
 * must be zero), the new state of the slots the compared rows name, and the slots no row names, which
 * must be unchanged. Forward only, timed as called by default (the indices read back and checked on the
 * host), in GB/s: the token's inputs read and o written once, each resumed slot read and each named slot
 * written once.
 *
 * Layout (seed + 5): a pool of B + 1 + e slots, e uniform in [1, ceil(B / 2)] (slot 0 is never named:
 * index 0 means padding); each live row a distinct slot drawn from 1..numSlots-1; for B > 1, 1 to
 * max(1, B / 4) padding rows (never row 0, so every check compares a live one), index 0 or negative;
 * each live row fresh (hasInitialState false) with probability 0.3, its slot holding NaN so that reading
 * it fails the check.
 *
 * Inputs, drawn as tests/paged_decode.test.ts draws them: packedQkv standard normal (seed), rawGate and
 * rawBeta normal with std 2 (seed + 1, seed + 2), all in the row dtype; aLog and dtBias float32 normal
 * with std 0.5 (seed + 3, seed + 4); the pool normal with std 0.1 (seed + 6), float32, or bfloat16 with
 * `--state-dtype bf16`.
 *
 * @module
 */
import { type DType, recurrentGdnDecode, recurrentKdaDecode, Tensor } from "../mod.ts";
import { pagedDecodeReference } from "../reference/paged_decode.ts";
import { roundBf16 } from "../reference/attention.ts";
import { pagedDecodeTolerance } from "../reference/tolerance.ts";
import { leastBytes } from "./flops.ts";
import { byRowTolerance, hostValues, poisoned, uniforms } from "./problem.ts";
import type { CaseSettings, CheckRow, Mode, OpCase } from "./problem.ts";
import { isPoolDecode, type OpName, type PoolDecodeOp, refuseForeignFlag, UsageError } from "./shape.ts";

/**
 * What the pool decode flags chose.
 *
 * @example
 * ```ts
 * import type { PoolFlags } from "./pool_decode.ts";
 * const flags: PoolFlags = { gateTransform: "bounded", lowerBound: -3, stateDtype: "bfloat16" };
 * ```
 */
export interface PoolFlags {
  /** The gate transform: kda-decode's choice (default bounded); gdn-pool-decode's is softplus. */
  gateTransform: "bounded" | "softplus";
  /** The bounded transform's floor (default -5, the op's). */
  lowerBound?: number;
  /** The pool's dtype. */
  stateDtype: "float32" | "bfloat16";
}

const STATE_DTYPES: Record<string, PoolFlags["stateDtype"]> = {
  fp32: "float32",
  f32: "float32",
  float32: "float32",
  bf16: "bfloat16",
  bfloat16: "bfloat16",
};

/**
 * Reads `--gate-transform` and `--lower-bound` (kda-decode only) and `--state-dtype` (the pool decode
 * steps only); each is refused, naming it, for an op that does not take it or for a bad value.
 *
 * @example
 * ```ts
 * import { parsePoolFlags } from "./pool_decode.ts";
 * console.log(parsePoolFlags("kda-decode", "softplus", undefined, "bf16"));
 * // { gateTransform: "softplus", lowerBound: undefined, stateDtype: "bfloat16" }
 * ```
 */
export function parsePoolFlags(
  op: OpName,
  gateTransform: string | undefined,
  lowerBound: string | undefined,
  stateDtype: string | undefined,
): PoolFlags {
  if (op !== "kda-decode") {
    refuseForeignFlag(op, "gate-transform", gateTransform, "kda-decode");
    refuseForeignFlag(op, "lower-bound", lowerBound, "kda-decode");
  }
  if (!isPoolDecode(op)) refuseForeignFlag(op, "state-dtype", stateDtype, "kda-decode and gdn-pool-decode");
  const transform = gateTransform ?? (op === "gdn-pool-decode" ? "softplus" : "bounded");
  if (transform !== "bounded" && transform !== "softplus") {
    throw new UsageError(`--gate-transform: expected bounded or softplus, got "${gateTransform}"`);
  }
  const bound = lowerBound === undefined ? undefined : Number(lowerBound);
  if (lowerBound !== undefined && (lowerBound.trim() === "" || !Number.isFinite(bound) || bound! > 0)) {
    throw new UsageError(`--lower-bound: expected a finite number of at most 0, got "${lowerBound}"`);
  }
  if (bound !== undefined && transform === "softplus") {
    throw new UsageError("--lower-bound: the softplus gate transform has no lower bound; drop the flag");
  }
  const state = STATE_DTYPES[(stateDtype ?? "fp32").toLowerCase()];
  if (!state) throw new UsageError(`--state-dtype: expected fp32 or bf16, got "${stateDtype}"`);
  return { gateTransform: transform, lowerBound: bound, stateDtype: state };
}

/**
 * The function a pool decode step runs, as result files name it: with its gate transform where it is
 * not the op's default and a bfloat16 pool (`recurrentKdaDecode(softplus, bfloat16 state)`), so `--ref`
 * pairs like with like.
 *
 * @example
 * ```ts
 * import { poolRecordName } from "./pool_decode.ts";
 * console.log(poolRecordName("gdn-pool-decode", { gateTransform: "softplus", stateDtype: "bfloat16" }));
 * // recurrentGdnDecode(bfloat16 state)
 * ```
 */
export function poolRecordName(op: PoolDecodeOp, flags: PoolFlags): string {
  const fn = op === "kda-decode" ? "recurrentKdaDecode" : "recurrentGdnDecode";
  const notes = [
    ...(op === "kda-decode" && flags.gateTransform === "softplus" ? ["softplus"] : []),
    ...(flags.stateDtype === "bfloat16" ? ["bfloat16 state"] : []),
  ];
  return notes.length > 0 ? `${fn}(${notes.join(", ")})` : fn;
}

/** Which slot each row names, and which rows start afresh. */
interface SlotLayout {
  numSlots: number;
  /** `[B]`: a slot, or 0 / negative for padding. */
  indices: Int32Array;
  /** `[B]`: false for a fresh slot. */
  resume: boolean[];
}

// The layout the module describes, from its own seed.
function drawLayout(B: number, seed: number): SlotLayout {
  const draw = uniforms(seed);
  const numSlots = B + 2 + Math.floor(draw() * Math.ceil(B / 2));
  const free = Array.from({ length: numSlots - 1 }, (_, i) => i + 1);
  for (let i = free.length - 1; i > 0; i--) {
    const j = Math.floor(draw() * (i + 1));
    [free[i], free[j]] = [free[j], free[i]];
  }
  const rows = Array.from({ length: B - 1 }, (_, i) => i + 1);
  const padding = new Set<number>();
  const pads = B > 1 ? 1 + Math.floor(draw() * Math.max(1, Math.floor(B / 4))) : 0;
  while (padding.size < pads) padding.add(rows[Math.floor(draw() * rows.length)]);
  const indices = new Int32Array(B), resume: boolean[] = [];
  for (let b = 0; b < B; b++) {
    indices[b] = padding.has(b) ? -Math.floor(draw() * 3) : free[b];
    resume.push(padding.has(b) || draw() >= 0.3);
  }
  return { numSlots, indices, resume };
}

/**
 * A random decode step of kda-decode or gdn-pool-decode on a pool, checked and timed as the module says.
 *
 * @example
 * ```ts
 * import { poolDecodeCase } from "./pool_decode.ts";
 * import { parseShape } from "./shape.ts";
 * const shape = parseShape("B4_H2_D16", "kda-decode");
 * using c = poolDecodeCase({ shape, dtype: "float32", device: "cpu", seed: 1, l2norm: false }, "kda-decode");
 * console.log(c.check(4, false, () => {}).map((r) => `${r.name} ${r.pass}`));
 * // [ "output true", "new state true", "other slots true" ]
 * ```
 */
export function poolDecodeCase(settings: CaseSettings, op: PoolDecodeOp): OpCase {
  const { shape, dtype, device, seed } = settings;
  const flags = settings.pool ?? parsePoolFlags(op, undefined, undefined, undefined);
  const B = shape.batch, H = shape.heads, HK = shape.headsQk, K = shape.dim, V = shape.dimV;
  const perChannel = op === "kda-decode", bounded = flags.gateTransform === "bounded";
  // The bounded gate's floor: the flag's, else -5 (recurrentKdaDecode's and the oracle's default, passed
  // explicitly so that the step, the oracle and the description name the same one).
  const lowerBound = flags.lowerBound ?? -5;
  const W = 2 * HK * K + H * V, slotSize = H * V * K;
  const { numSlots, indices, resume } = drawLayout(B, seed + 5);
  const live = (rows: number) => Array.from(indices.subarray(0, rows)).filter((s) => s > 0);
  const named = new Set(live(B));
  const unnamed = Array.from({ length: numSlots }, (_, s) => s).filter((s) => !named.has(s));
  const gateShape = perChannel ? [1, B, H, K] : [1, B, H];

  const owned = new DisposableStack();
  const own = <X extends Tensor>(t: X) => owned.use(t);
  let qkv: Tensor, rawGate: Tensor, rawBeta: Tensor, aLog: Tensor, dtBias: Tensor;
  let pool: Tensor, slots: Tensor, hasInitial: Tensor, out: Tensor;
  try {
    const normal = (s: number[], offset: number, std: number, dt: DType = dtype) =>
      own(Tensor.randn(s, { dtype: dt, device, seed: seed + offset, std }));
    qkv = normal([B, W], 0, 1);
    rawGate = normal(gateShape, 1, 2);
    rawBeta = normal([1, B, H], 2, 2);
    aLog = normal([H], 3, 0.5, "float32");
    dtBias = normal(perChannel ? [H, K] : [H], 4, 0.5, "float32");
    // Fresh slots hold NaN: the step must not read them.
    const mask = new Float32Array(numSlots).fill(1);
    for (let b = 0; b < B; b++) if (indices[b] > 0 && !resume[b]) mask[indices[b]] = NaN;
    using maskT = Tensor.from(mask, { shape: [numSlots, 1, 1, 1], dtype: flags.stateDtype, device });
    using drawn = Tensor.randn([numSlots, H, V, K], {
      dtype: flags.stateDtype,
      device,
      seed: seed + 6,
      std: 0.1,
    });
    pool = own(drawn.mul(maskT));
    slots = own(Tensor.from(indices, { dtype: "int32", device }));
    hasInitial = own(Tensor.from(resume.map(Number), { dtype: "bool", device }));
    out = own(Tensor.empty([1, B, H, V], { dtype, device }));
  } catch (e) {
    owned.dispose();
    throw e;
  }
  const step = (output: Tensor) => {
    const options = { hasInitialState: hasInitial, out: output };
    if (op === "gdn-pool-decode") {
      recurrentGdnDecode(qkv, rawGate, rawBeta, aLog, dtBias, pool, slots, options);
    } else {
      recurrentKdaDecode(qkv, rawGate, rawBeta, aLog, dtBias, pool, slots, {
        ...options,
        gateTransform: flags.gateTransform,
        ...(bounded ? { lowerBound } : {}),
      });
    }
  };
  // The host copies of some slots of the pool, in the order given.
  const slotValues = (which: number[]) => {
    using picked = pool.indexSelect(0, which);
    return hostValues(picked);
  };

  const fresh = indices.filter((s, b) => s > 0 && !resume[b]).length;
  const pads = indices.filter((s) => s <= 0).length;
  const gate = perChannel
    ? bounded ? `gate bounded (lowerBound ${lowerBound}) per key channel` : "gate softplus per key channel"
    : "gate softplus per head";
  const tol = pagedDecodeTolerance(dtype as "float32", flags.stateDtype);

  return {
    description: [
      `packedQkv [${B}, ${W}] ${dtype} (q, k of ${HK} heads, L2-normalised in the step; v of ${H})`,
      `rawGate [${gateShape.join(", ")}], rawBeta [1, ${B}, ${H}] ${dtype} (std 2)`,
      `aLog [${H}], dtBias [${perChannel ? `${H}, ${K}` : H}] float32 (std 0.5); ${gate}`,
      `pool [${numSlots}, ${H}, ${V}, ${K}] ${flags.stateDtype} (std 0.1), random slots`,
      `live rows ${B - pads} (fresh ${fresh}: their slots NaN), padding rows ${pads} (index <= 0)`,
      "scale K^-0.5",
    ].join("; "),
    modes: ["fwd"],

    check(batches, _backward, progress): CheckRow[] {
      // The oracle sees the slots of the compared rows only, as a compact pool behind an unused slot 0
      // (its host copies grow with the rows compared, not with the pool).
      const checked = live(batches);
      const before = slotValues(checked);
      using unnamedBefore = pool.indexSelect(0, unnamed);
      using output = poisoned([1, B, H, V], dtype, device);
      step(output);
      progress(0, batches * H);
      const compact = new Float64Array((checked.length + 1) * slotSize);
      compact.set(before, slotSize);
      const rows = (t: Tensor, width: number) => hostValues(t, batches * width);
      const want = pagedDecodeReference({
        B: batches,
        H,
        HK,
        K,
        V,
        numSlots: checked.length + 1,
        packedQkv: rows(qkv, W),
        rawGate: rows(rawGate, H * (perChannel ? K : 1)),
        rawBeta: rows(rawBeta, H),
        aLog: hostValues(aLog),
        dtBias: hostValues(dtBias),
        perChannel,
        gateTransform: flags.gateTransform,
        ...(bounded ? { lowerBound } : {}),
        stateCache: compact,
        stateIndices: Array.from(indices.subarray(0, batches), (s) => s > 0 ? 1 + checked.indexOf(s) : s),
        hasInitialState: resume.slice(0, batches),
      });
      progress(batches * H, batches * H);
      using unnamedAfter = pool.indexSelect(0, unnamed);
      // The pool stores its dtype: the oracle's state is rounded the same way.
      const wantState = want.stateCache.subarray(slotSize).map(
        flags.stateDtype === "bfloat16" ? roundBf16 : (x) => x,
      );
      return [
        byRowTolerance("output", rows(output, H * V), want.output, V, tol.output, want.outputMagnitude),
        byRowTolerance("new state", slotValues(checked), wantState, K, tol.state),
        unchangedRow("other slots", unnamedAfter, unnamedBefore),
      ];
    },

    call(mode: Mode): () => void {
      if (mode !== "fwd") throw new Error(`${op} times fwd only, not ${mode}`);
      return () => step(out);
    },

    // The token's inputs (and the indices and flags) read and o written once; a resumed slot read, and
    // every named slot written, once.
    bytes: (mode: Mode) => {
      if (mode !== "fwd") return undefined;
      const slotBytes = slotSize * (pool.nbytes / pool.numel);
      const resumed = indices.filter((s, b) => s > 0 && resume[b]).length;
      return leastBytes([qkv, rawGate, rawBeta, aLog, dtBias, slots, hasInitial], [out]) +
        (resumed + named.size) * slotBytes;
    },

    [Symbol.dispose]: () => owned.dispose(),
  };
}

// The slots no row names against their values before the step, on the device (they are most of the
// pool): unchanged, or the row fails.
function unchangedRow(name: string, after: Tensor, before: Tensor): CheckRow {
  using wide = after.cast("float32"), was = before.cast("float32");
  using diff = wide.sub(was), absolute = diff.abs(), largest = absolute.max();
  using squares = diff.square(),
    errorSum = squares.sum(),
    wasSquares = was.square(),
    wasSum = wasSquares.sum();
  const maxAbs = largest.item();
  const relRms = Math.sqrt(errorSum.item() / Math.max(wasSum.item(), Number.MIN_VALUE));
  return { name, maxAbs, relRms, bound: "unchanged", pass: maxAbs === 0 };
}
