/**
 * Serving decode on a paged state pool: one token per sequence of Gated DeltaNet
 * ({@link recurrentGdnDecode}) or KDA ({@link recurrentKdaDecode}) with the token's preprocessing fused
 * into the step. The input is the post-convolution projection row `[Q of HK heads | K of HK heads | V of
 * H heads]` and the raw gate and beta projections; the step L2-normalises q and k, forms the gate
 * (`-exp(aLog) softplus(raw + dtBias)`, or KDA's bounded `lowerBound sigmoid(exp(aLog) (raw + dtBias))`)
 * and `beta = sigmoid(rawBeta)`, and advances the selected rows of a state pool `[numSlots, H, V, K]`
 * in place:
 *
 *   S <- S diag(exp(g));  u = beta (v - S k);  S <- S + u k^T;  o = scale S q
 *
 * `stateIndices[b]` names sequence b's slot; an index <= 0 is padding: its output is zero and no slot
 * is touched. Positive indices must be unique and below `numSlots` (two sequences on one slot would
 * race); `hasInitialState[b] = false` starts the slot from zero, whatever it holds. The pool is float32
 * or bfloat16, the arithmetic float32 or wider.
 *
 * @module
 */
import { native, unwrap } from "../../ffi/library.ts";
import { invalidArgument } from "../../ffi/errors.ts";
import { checkOptions, type OptionSpec } from "../args.ts";
import { expectDType, expectSameDevice, expectShape, expectTensor, optionalTensor } from "../checks.ts";
import type { DType } from "../dtype.ts";
import { Tensor } from "../tensor.ts";
import { checkScale } from "./delta_native.ts";
import { optionalPerSequence, perSequence } from "./pool_args.ts";

/** Options of {@link recurrentGdnDecode}. */
export interface GdnDecodeOptions {
  /** `[B]` bool: false starts that sequence's slot from zero (a freshly assigned slot). Default: all resume. */
  hasInitialState?: Tensor;
  /** The query scale (default `1 / sqrt(K)`). */
  scale?: number;
  /**
   * The output buffer `[1, B, H, V]` in packedQkv's dtype on its device: written and returned as is.
   * It must not alias an input.
   */
  out?: Tensor;
  /**
   * true (default): `stateIndices` are read to the host and an index past the pool or a live slot named
   * twice is refused before anything is written; on a CUDA device that read waits for the stream (inside
   * `captureGraph` the check runs on the device instead and `synchronize()` reports it). false:
   * no read (for a hot decode loop whose indices are known good): an index past the pool is skipped on
   * the device (zero output, the pool untouched) and a live slot named twice ends unspecified. The CPU
   * always checks.
   */
  checkIndices?: boolean;
  /**
   * `"fused"`: a fused kernel must serve the call, else an AttnkitError naming why (K outside 32, 64, 128,
   * 256, unaligned rows, the CPU). `"reference"`: the exact general path (the CPU backend; for CUDA tensors
   * on host copies, slow). Default: the planner picks (`explain({ op: "linear.paged_decode" })`).
   */
  impl?: "fused" | "reference";
}

/** Options of {@link recurrentKdaDecode}. */
export interface KdaDecodeOptions extends GdnDecodeOptions {
  /** `"bounded"` (default): `lowerBound sigmoid(exp(aLog) (raw + dtBias))`; `"softplus"`: `-exp(aLog) softplus(raw + dtBias)`. */
  gateTransform?: "bounded" | "softplus";
  /** The bounded transform's floor, finite and <= 0 (default -5). Refused with `"softplus"`. */
  lowerBound?: number;
}

const FLOATS: readonly DType[] = ["float16", "bfloat16", "float32"];
const PER_CHANNEL = 1;
const BOUNDED = 2;
const TRUSTED_INDICES = 4;
const IMPL_FLAGS = { fused: 8, reference: 16 } as const;
const LOWER_BOUND = (v: unknown) =>
  typeof v === "number" && Number.isFinite(v) && v <= 0 ? undefined : "a finite number <= 0";
const GDN_SPEC: OptionSpec = {
  hasInitialState: "any",
  scale: "any",
  out: "any",
  checkIndices: "boolean",
  impl: Object.keys(IMPL_FLAGS),
};
const KDA_SPEC: OptionSpec = { ...GDN_SPEC, gateTransform: ["bounded", "softplus"], lowerBound: LOWER_BOUND };

/** The checked tensors of a call and the sizes read off them. */
interface DecodeCall {
  packedQkv: Tensor;
  rawGate: Tensor;
  rawBeta: Tensor;
  aLog: Tensor;
  dtBias: Tensor;
  stateCache: Tensor;
  stateIndices: Tensor;
  hasInitialState?: Tensor;
  sizes: Record<string, number>;
}

function checkCall(
  op: string,
  perChannel: boolean,
  args: Record<string, unknown>,
  hasInitialState: unknown,
): DecodeCall {
  const qkv = expectTensor(op, "packedQkv", args.packedQkv);
  expectDType(op, "packedQkv", qkv, FLOATS);
  const state = expectTensor(op, "stateCache", args.stateCache);
  expectDType(op, "stateCache", state, ["float32", "bfloat16"]);
  expectSameDevice(op, "stateCache", state, qkv, "packedQkv");
  const sizes = expectShape(op, "stateCache", state, ["numSlots", "H", "V", "K"]);
  expectShape(op, "packedQkv", qkv, ["B", "W"], sizes);
  const { H, V, K, W } = sizes;
  const width = W - H * V;
  if (width <= 0 || width % (2 * K) !== 0 || H % (width / (2 * K)) !== 0) {
    throw invalidArgument(
      op,
      `packedQkv: a row of ${W} values does not split into [Q | K] for query/key heads that divide H=${H}, ` +
        `K=${K} each, and V=${V} for each of the ${H} value heads (expected 2 HK K + H V)`,
    );
  }
  sizes.HK = width / (2 * K);
  const tensor = (name: string, pattern: (string | number)[], dtypes: readonly DType[]) => {
    const t = expectTensor(op, name, args[name]);
    expectDType(op, name, t, dtypes);
    expectSameDevice(op, name, t, qkv, "packedQkv");
    expectShape(op, name, t, pattern, sizes);
    return t;
  };
  const rawGate = tensor("rawGate", perChannel ? [1, "B", "H", "K"] : [1, "B", "H"], FLOATS);
  const rawBeta = tensor("rawBeta", [1, "B", "H"], FLOATS);
  const aLog = tensor("aLog", ["H"], ["float32"]);
  const dtBias = tensor("dtBias", perChannel ? ["H", "K"] : ["H"], ["float32"]);
  const stateIndices = perSequence(
    op,
    "stateIndices",
    args.stateIndices,
    "int32",
    qkv,
    "packedQkv",
    sizes,
    "B",
  );
  const flagsTensor = optionalPerSequence(
    op,
    "options.hasInitialState",
    hasInitialState,
    "bool",
    qkv,
    "packedQkv",
    sizes,
    "B",
  );
  return {
    packedQkv: qkv,
    rawGate,
    rawBeta,
    aLog,
    dtBias,
    stateCache: state,
    stateIndices,
    hasInitialState: flagsTensor,
    sizes,
  };
}

function run(
  op: string,
  c: DecodeCall,
  o: GdnDecodeOptions,
  settings: { flags: number; lowerBound: number },
): Tensor {
  const { B, H, V, K } = c.sizes;
  const out = optionalTensor(op, "options.out", o.out);
  if (out) {
    expectDType(op, "options.out", out, [c.packedQkv.dtype]);
    expectSameDevice(op, "options.out", out, c.packedQkv, "packedQkv");
    expectShape(op, "options.out", out, [1, "B", "H", "V"], c.sizes);
  }
  const output = out ?? Tensor.empty([1, B, H, V], { dtype: c.packedQkv.dtype, device: c.packedQkv.device });
  try {
    unwrap(
      native().ak_paged_decode(
        c.packedQkv.descriptor(op),
        c.rawGate.descriptor(op),
        c.rawBeta.descriptor(op),
        c.aLog.descriptor(op),
        c.dtBias.descriptor(op),
        c.stateCache.descriptor(op),
        c.stateIndices.descriptor(op),
        c.hasInitialState?.descriptor(op) ?? null,
        checkScale(op, o.scale ?? undefined, K),
        settings.lowerBound,
        settings.flags | (o.checkIndices === false ? TRUSTED_INDICES : 0) | (o.impl ? IMPL_FLAGS[o.impl] : 0),
        output.descriptor(op),
      ),
      op,
    );
  } catch (e) {
    if (!out) output.dispose();
    throw e;
  }
  return output;
}

/**
 * One Gated DeltaNet decode step per sequence on a paged state pool, the gate (`-exp(aLog)
 * softplus(rawGate + dtBias)`, one per head), beta (`sigmoid(rawBeta)`) and the q/k L2 norm computed in
 * the step. Grouped heads: packedQkv's HK query/key heads each serve H / HK consecutive value heads.
 *
 * @param packedQkv `[B, 2 HK K + H V]` float16 | bfloat16 | float32: `[Q of HK heads | K | V of H heads]`.
 * @param rawGate `[1, B, H]` the raw gate projection.
 * @param rawBeta `[1, B, H]` the raw write-gate projection.
 * @param aLog `[H]` float32.
 * @param dtBias `[H]` float32.
 * @param stateCache `[numSlots, H, V, K]` float32 | bfloat16, advanced in place (slots may be apart).
 * @param stateIndices `[B]` int32: sequence b's slot; <= 0 is padding (zero output, no slot touched).
 * @returns The output `[1, B, H, V]` in packedQkv's dtype (`options.out` itself when given).
 *
 * @example
 * ```ts
 * import { recurrentGdnDecode, Tensor } from "@attnkit/attnkit";
 * const [B, H, K, V] = [2, 4, 16, 16];
 * using qkv = Tensor.randn([B, 2 * H * K + H * V]);
 * using rawGate = Tensor.randn([1, B, H]);
 * using rawBeta = Tensor.randn([1, B, H]);
 * using aLog = Tensor.zeros([H]);
 * using dtBias = Tensor.zeros([H]);
 * using pool = Tensor.zeros([4, H, V, K]);
 * using slots = Tensor.from([1, 3], { dtype: "int32" });
 * using o = recurrentGdnDecode(qkv, rawGate, rawBeta, aLog, dtBias, pool, slots);
 * console.log(o.shape); // [1, 2, 4, 16]
 * ```
 */
export function recurrentGdnDecode(
  packedQkv: Tensor,
  rawGate: Tensor,
  rawBeta: Tensor,
  aLog: Tensor,
  dtBias: Tensor,
  stateCache: Tensor,
  stateIndices: Tensor,
  options: GdnDecodeOptions = {},
): Tensor {
  const op = "recurrentGdnDecode";
  const o = checkOptions<GdnDecodeOptions>(op, options, GDN_SPEC);
  const c = checkCall(
    op,
    false,
    { packedQkv, rawGate, rawBeta, aLog, dtBias, stateCache, stateIndices },
    o.hasInitialState,
  );
  return run(op, c, o, { flags: 0, lowerBound: 0 });
}

/**
 * One KDA decode step per sequence on a paged state pool: a gate per key channel from `rawGate [1, B, H,
 * K]` (bounded by default, as {@link boundGate}; or softplus), beta (`sigmoid(rawBeta)`) and the q/k L2
 * norm computed in the step.
 *
 * @param packedQkv `[B, 2 HK K + H V]` float16 | bfloat16 | float32: `[Q of HK heads | K | V of H heads]`.
 * @param rawGate `[1, B, H, K]` the raw gate projection.
 * @param rawBeta `[1, B, H]` the raw write-gate projection.
 * @param aLog `[H]` float32.
 * @param dtBias `[H, K]` float32.
 * @param stateCache `[numSlots, H, V, K]` float32 | bfloat16, advanced in place (slots may be apart).
 * @param stateIndices `[B]` int32: sequence b's slot; <= 0 is padding (zero output, no slot touched).
 * @returns The output `[1, B, H, V]` in packedQkv's dtype (`options.out` itself when given).
 *
 * @example
 * ```ts
 * import { recurrentKdaDecode, Tensor } from "@attnkit/attnkit";
 * const [B, H, K, V] = [2, 4, 16, 16];
 * using qkv = Tensor.randn([B, H * (2 * K + V)]);
 * using rawGate = Tensor.randn([1, B, H, K]);
 * using rawBeta = Tensor.randn([1, B, H]);
 * using aLog = Tensor.zeros([H]);
 * using dtBias = Tensor.zeros([H, K]);
 * using pool = Tensor.zeros([4, H, V, K]);
 * using slots = Tensor.from([2, 0], { dtype: "int32" }); // the second sequence is padding
 * using o = recurrentKdaDecode(qkv, rawGate, rawBeta, aLog, dtBias, pool, slots, { lowerBound: -5 });
 * console.log(o.shape); // [1, 2, 4, 16]
 * ```
 */
export function recurrentKdaDecode(
  packedQkv: Tensor,
  rawGate: Tensor,
  rawBeta: Tensor,
  aLog: Tensor,
  dtBias: Tensor,
  stateCache: Tensor,
  stateIndices: Tensor,
  options: KdaDecodeOptions = {},
): Tensor {
  const op = "recurrentKdaDecode";
  const o = checkOptions<KdaDecodeOptions>(op, options, KDA_SPEC);
  const kind = o.gateTransform ?? "bounded";
  if (kind === "softplus" && o.lowerBound !== undefined && o.lowerBound !== null) {
    throw invalidArgument(
      op,
      'options.lowerBound: gateTransform "softplus" has no lower bound; leave it out',
    );
  }
  const c = checkCall(
    op,
    true,
    { packedQkv, rawGate, rawBeta, aLog, dtBias, stateCache, stateIndices },
    o.hasInitialState,
  );
  const flags = PER_CHANNEL | (kind === "bounded" ? BOUNDED : 0);
  return run(op, c, o, { flags, lowerBound: kind === "bounded" ? o.lowerBound ?? -5 : 0 });
}
