/**
 * Chunked prefill on a paged state pool (inference only): {@link pagedChunkKda} and
 * {@link pagedChunkGdn} read each sequence's state from `stateCache [numSlots, H, V, K]` (float32 or
 * bfloat16), run the chunked forward over its tokens and write the state after the last token back in
 * place, so a decode step ({@link recurrentKdaDecode}, {@link recurrentGdnDecode}) can continue from the
 * same slot. `stateIndices[n]` names sequence n's slot (<= 0: padding, zero output rows, no slot
 * touched); `hasInitialState[n] = false` starts from zero without reading the slot.
 *
 * The steps are the training ops between a gather and a scatter of the selected slots (one launch each on
 * CUDA, after one read-back of the `[N]` indices that refuses an index past the pool or a slot named
 * twice), then a kernel that zeroes the padding sequences' rows where they live.
 *
 * @module
 */
import { native, unwrap } from "../../ffi/library.ts";
import { invalidArgument } from "../../ffi/errors.ts";
import { checkOptions, type OptionSpec } from "../args.ts";
import { expectDType, expectSameDevice, expectShape, expectTensor } from "../checks.ts";
import { type CuSeqlens, int32Seqlens } from "../seqlens.ts";
import { Tensor } from "../tensor.ts";
import { checkScale } from "./delta_native.ts";
import { chunkGatedDeltaRule } from "./delta_rule.ts";
import { chunkKda } from "./kda.ts";
import { optionalPerSequence, perSequence } from "./pool_args.ts";

/** Options of {@link pagedChunkKda} and {@link pagedChunkGdn}. */
export interface PagedChunkOptions {
  /** Packed sequences in a batch of one: `[N + 1]` offsets (the last may stay below T). */
  cuSeqlens?: CuSeqlens;
  /** `[N]` bool: false starts that sequence from a zero state. Default: every live slot resumes. */
  hasInitialState?: Tensor;
  /** The query scale (default `1 / sqrt(K)`). */
  scale?: number;
  /**
   * true (default): `stateIndices` are read to the host once and an index past the pool or a live slot
   * named twice is refused before anything is written; on a CUDA device that read waits for the stream.
   * false: no read (indices known good): an index past the pool is skipped on the device and a live slot
   * named twice ends unspecified. The CPU always checks.
   */
  checkIndices?: boolean;
}

/** Options of {@link pagedChunkGdn}: also the in-kernel q/k L2 norm. */
export interface PagedChunkGdnOptions extends PagedChunkOptions {
  /** L2-normalise q and k in the kernel (default false). */
  useQkL2norm?: boolean;
}

const POOL_GATHER = 0;
const POOL_SCATTER = 1;
const POOL_TRUSTED_INDICES = 2;
const SPEC: OptionSpec = { cuSeqlens: "any", hasInitialState: "any", scale: "any", checkIndices: "boolean" };
const GDN_SPEC: OptionSpec = { ...SPEC, useQkL2norm: "boolean" };

interface Pool {
  cache: Tensor;
  indices: Tensor;
  hasInitialState?: Tensor;
  /** Whether the gather reads the indices back and checks them (options.checkIndices). */
  checkIndices: boolean;
  N: number;
  H: number;
  V: number;
  K: number;
}

function checkPool(
  op: string,
  q: Tensor,
  v: Tensor,
  stateCache: unknown,
  stateIndices: unknown,
  o: PagedChunkOptions,
) {
  const cache = expectTensor(op, "stateCache", stateCache);
  expectDType(op, "stateCache", cache, ["float32", "bfloat16"]);
  expectSameDevice(op, "stateCache", cache, q, "q");
  if (v.ndim !== 4) throw invalidArgument(op, `v: expected [B, T, H, V], got [${v.shape.join(", ")}]`);
  expectShape(op, "stateCache", cache, [null, v.shape[2], v.shape[3], q.shape[3]]);
  const indices = perSequence(op, "stateIndices", stateIndices, "int32", q, "q");
  const hasInitialState = optionalPerSequence(
    op,
    "options.hasInitialState",
    o.hasInitialState,
    "bool",
    q,
    "q",
    {
      N: indices.shape[0],
    },
  );
  return {
    cache,
    indices,
    hasInitialState,
    checkIndices: o.checkIndices !== false,
    N: indices.shape[0],
    H: v.shape[2],
    V: v.shape[3],
    K: q.shape[3],
  } satisfies Pool;
}

/**
 * Moves states between the pool and `states`: `[N, H, V, K]` as the pool holds them, or with `kv` the delta
 * rule's `[N, H, K, V]`, passed as its transposed view so the copy itself transposes.
 */
function poolCopy(op: string, p: Pool, states: Tensor, direction: number, kv = false): void {
  const { N, H, V, K } = p;
  unwrap(
    native().ak_state_pool_copy(
      p.cache.descriptor(op),
      p.indices.descriptor(op),
      direction === POOL_GATHER ? p.hasInitialState?.descriptor(op) ?? null : null,
      kv ? states.viewDescriptor([N, H, V, K], [H * K * V, K * V, 1, V], op) : states.descriptor(op),
      // The gather checks the indices (unless told not to); the scatter of the same call needs no second look.
      direction | (direction === POOL_SCATTER || !p.checkIndices ? POOL_TRUSTED_INDICES : 0),
    ),
    op,
  );
}

/** Zeroes the output rows of padding sequences (index <= 0) on the output's device, in place. */
function zeroPadding(op: string, output: Tensor, p: Pool, cuSeqlens: CuSeqlens | undefined): void {
  // The chunked op has checked the offsets: a tensor goes as it is, host numbers are uploaded.
  using uploaded = cuSeqlens === undefined || cuSeqlens instanceof Tensor
    ? undefined
    : int32Seqlens(op, "cuSeqlens", cuSeqlens, output.device);
  const offsets = cuSeqlens instanceof Tensor ? cuSeqlens : uploaded?.tensor;
  unwrap(
    native().ak_zero_padding_rows(
      output.descriptor(op),
      p.indices.descriptor(op),
      offsets?.descriptor(op) ?? null,
    ),
    op,
  );
}

/**
 * KDA's chunked forward over a paged state pool, advancing each sequence's slot in place (inference
 * only). Inputs as {@link chunkKda} takes them in `"bshd"`: q, k `[B, T, HK, K]`, v `[B, T, H, V]`, gate
 * `[B, T, H, K]` (per-token natural-log decays, float32), beta `[B, T, H]` (float32).
 *
 * @param stateCache `[numSlots, H, V, K]` float32 | bfloat16, advanced in place.
 * @param stateIndices `[N]` int32: sequence n's slot (N = B, or the packed sequences); <= 0 is padding.
 * @returns The output `[B, T, H, V]` in q's dtype (rows past the last packed offset unspecified).
 *
 * @example
 * ```ts
 * import { pagedChunkKda, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([2, 40, 2, 16]);
 * using k = Tensor.randn([2, 40, 2, 16], { std: 0.25 });
 * using v = Tensor.randn([2, 40, 2, 16]);
 * using gate = Tensor.rand([2, 40, 2, 16], { low: -0.5, high: 0 });
 * using beta = Tensor.rand([2, 40, 2]);
 * using pool = Tensor.zeros([4, 2, 16, 16]);
 * using slots = Tensor.from([2, 3], { dtype: "int32" });
 * using o = pagedChunkKda(q, k, v, gate, beta, pool, slots);
 * console.log(o.shape); // [2, 40, 2, 16]
 * ```
 */
export function pagedChunkKda(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  gate: Tensor,
  beta: Tensor,
  stateCache: Tensor,
  stateIndices: Tensor,
  options: PagedChunkOptions = {},
): Tensor {
  const op = "pagedChunkKda";
  const o = checkOptions<PagedChunkOptions>(op, options, SPEC);
  const qt = expectTensor(op, "q", q), vt = expectTensor(op, "v", v);
  if (qt.ndim !== 4) throw invalidArgument(op, `q: expected [B, T, HK, K], got [${qt.shape.join(", ")}]`);
  const p = checkPool(op, qt, vt, stateCache, stateIndices, o);
  using states = Tensor.empty([p.N, p.H, p.V, p.K], { dtype: "float32", device: qt.device });
  poolCopy(op, p, states, POOL_GATHER);
  const output = Tensor.empty([qt.shape[0], qt.shape[1], p.H, p.V], { dtype: qt.dtype, device: qt.device });
  try {
    using r = chunkKda(qt, k, vt, gate, beta, {
      layout: "bshd",
      initialState: states,
      stateLayout: "vk",
      outputFinalState: true,
      ...(o.cuSeqlens !== undefined ? { cuSeqlens: o.cuSeqlens } : {}),
      scale: checkScale(op, o.scale ?? undefined, p.K),
      out: { output },
    });
    poolCopy(op, p, r.finalState!, POOL_SCATTER);
    zeroPadding(op, output, p, o.cuSeqlens);
  } catch (e) {
    output.dispose();
    throw e;
  }
  return output;
}

/**
 * Gated DeltaNet's chunked forward over a paged state pool `[numSlots, H, V, K]`, advancing each
 * sequence's slot in place (inference only). Inputs as {@link chunkGatedDeltaRule} takes them in
 * `"bshd"`: q, k `[B, T, HK, K]`, v `[B, T, H, V]`, g `[B, T, H]` and beta `[B, T, H]` (float32).
 *
 * @param stateCache `[numSlots, H, V, K]` float32 | bfloat16, advanced in place.
 * @param stateIndices `[N]` int32: sequence n's slot (N = B, or the packed sequences); <= 0 is padding.
 * @returns The output `[B, T, H, V]` in q's dtype (rows past the last packed offset unspecified).
 *
 * @example
 * ```ts
 * import { pagedChunkGdn, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 30, 2, 16]);
 * using k = Tensor.randn([1, 30, 2, 16]);
 * using v = Tensor.randn([1, 30, 2, 16]);
 * using g = Tensor.rand([1, 30, 2], { low: -0.5, high: 0 });
 * using beta = Tensor.rand([1, 30, 2]);
 * using pool = Tensor.zeros([4, 2, 16, 16]);
 * using slots = Tensor.from([1, 0], { dtype: "int32" }); // the second sequence is padding
 * using o = pagedChunkGdn(q, k, v, g, beta, pool, slots, { cuSeqlens: [0, 20, 30], useQkL2norm: true });
 * console.log(o.shape); // [1, 30, 2, 16]
 * ```
 */
export function pagedChunkGdn(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  g: Tensor,
  beta: Tensor,
  stateCache: Tensor,
  stateIndices: Tensor,
  options: PagedChunkGdnOptions = {},
): Tensor {
  const op = "pagedChunkGdn";
  const o = checkOptions<PagedChunkGdnOptions>(op, options, GDN_SPEC);
  const qt = expectTensor(op, "q", q), vt = expectTensor(op, "v", v);
  if (qt.ndim !== 4) throw invalidArgument(op, `q: expected [B, T, HK, K], got [${qt.shape.join(", ")}]`);
  const p = checkPool(op, qt, vt, stateCache, stateIndices, o);
  // The delta rule keeps states as [N, H, K, V]: the pool copies transpose on the way in and out.
  using initial = Tensor.empty([p.N, p.H, p.K, p.V], { dtype: "float32", device: qt.device });
  poolCopy(op, p, initial, POOL_GATHER, true);
  const output = Tensor.empty([qt.shape[0], qt.shape[1], p.H, p.V], { dtype: qt.dtype, device: qt.device });
  try {
    using r = chunkGatedDeltaRule(qt, k, vt, g, beta, {
      layout: "bshd",
      initialState: initial,
      outputFinalState: true,
      useQkL2norm: o.useQkL2norm ?? false,
      ...(o.cuSeqlens !== undefined ? { cuSeqlens: o.cuSeqlens } : {}),
      scale: checkScale(op, o.scale ?? undefined, p.K),
      out: { output },
    });
    poolCopy(op, p, r.finalState!, POOL_SCATTER, true);
    zeroPadding(op, output, p, o.cuSeqlens);
  } catch (e) {
    output.dispose();
    throw e;
  }
  return output;
}
