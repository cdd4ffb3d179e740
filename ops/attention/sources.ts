/**
 * Where a call's queries, keys and values come from, and the checks that turn them into one
 * geometry (batch, lengths, heads, head dim) with BSHD views for the C entries. Dense tensors are
 * `"bshd"` or `"bhsd"`; packed (varlen) tensors are `"thd"` with int32 `cuSeqlens`. Further kinds of
 * source (a paged KV cache) fit here without touching the ops.
 *
 * @module
 */
import { AttnkitError, invalidArgument } from "../../ffi/errors.ts";
import { expectDType, expectSameDevice, expectSameDType, expectShape, expectTensor } from "../checks.ts";
import type { DType } from "../dtype.ts";
import { type Layout, LAYOUTS, warnLayoutLooksSwapped } from "../layout.ts";
import type { Int32Seqlens } from "../seqlens.ts";
import { Tensor } from "../tensor.ts";

/** The layouts of dense (not packed) q, k, v. */
export type DenseLayout = Extract<Layout, "bshd" | "bhsd">;

/**
 * Queries of a call: dense `[B, Sq, Hq, D]` (`"bshd"`) or `[B, Hq, Sq, D]` (`"bhsd"`), or packed
 * `[Tq, Hq, D]` (`"thd"`) with `cuSeqlens` (int32 `[N + 1]` on q's device; `offsets`, its host copy,
 * when the caller gave the offsets on the host).
 *
 * @example
 * ```ts
 * import { type QuerySource, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 16, 4, 64], { dtype: "bfloat16", seed: 1 });
 * const source: QuerySource = { kind: "dense", q, layout: "bshd" };
 * ```
 */
export type QuerySource =
  | { readonly kind: "dense"; readonly q: Tensor; readonly layout: Extract<Layout, "bshd" | "bhsd"> }
  | {
    readonly kind: "packed";
    readonly q: Tensor;
    readonly cuSeqlens: Tensor;
    readonly offsets?: Int32Array;
  };

/**
 * Keys and values of a call: dense `[B, Skv, Hkv, D]` (`"bshd"`) or `[B, Hkv, Skv, D]` (`"bhsd"`), or
 * packed `[Tkv, Hkv, D]` (`"thd"`) with `cuSeqlens`.
 *
 * @example
 * ```ts
 * import { type KvSource, Tensor } from "@attnkit/attnkit";
 * using k = Tensor.randn([1, 16, 1, 64], { dtype: "bfloat16", seed: 2 });
 * using v = Tensor.randn([1, 16, 1, 64], { dtype: "bfloat16", seed: 3 });
 * const source: KvSource = { kind: "dense", k, v, layout: "bshd" };
 * ```
 */
export type KvSource =
  | {
    readonly kind: "dense";
    readonly k: Tensor;
    readonly v: Tensor;
    readonly layout: Extract<Layout, "bshd" | "bhsd">;
  }
  | {
    readonly kind: "packed";
    readonly k: Tensor;
    readonly v: Tensor;
    readonly cuSeqlens: Tensor;
    readonly offsets?: Int32Array;
  };

/** The sources of one call: its queries, and its keys and values. */
type Sources = { query: QuerySource; kv: KvSource };

/** The sources of a dense call: q, k and v in one layout. */
export function denseSources(q: Tensor, k: Tensor, v: Tensor, layout: DenseLayout): Sources {
  return { query: { kind: "dense", q, layout }, kv: { kind: "dense", k, v, layout } };
}

/** The sources of a packed call: q, k and v with their int32 offsets (and the host copies, if any). */
export function packedSources(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  cu: { q: Int32Seqlens; k: Int32Seqlens },
): Sources {
  return {
    query: { kind: "packed", q, cuSeqlens: cu.q.tensor, offsets: cu.q.host },
    kv: { kind: "packed", k, v, cuSeqlens: cu.k.tensor, offsets: cu.k.host },
  };
}

/** Sizes of one call, after every check. */
export interface AttentionGeometry {
  /** Packed (varlen) inputs. */
  readonly packed: boolean;
  /** Memory layout of q, k, v and the output (`"thd"` when packed). */
  readonly layout: Layout;
  /** Batch, or the number of packed sequences. */
  readonly batch: number;
  /** Query length (dense) or packed query tokens Tq. */
  readonly seqQ: number;
  /** Key length (dense) or packed key tokens Tkv. */
  readonly seqKv: number;
  /** Query heads. */
  readonly heads: number;
  /** Key/value heads. */
  readonly headsKv: number;
  /** Head dimension. */
  readonly dim: number;
  /** float16 or bfloat16. */
  readonly dtype: DType;
  /** Device of every tensor. */
  readonly device: string;
}

/** The largest head dimension served; any multiple of 8 up to it. */
export const MAX_HEAD_DIM = 256;

function densePattern(layout: DenseLayout, seq: string, heads: string): string[] {
  return layout === "bshd" ? ["B", seq, heads, "D"] : ["B", heads, seq, "D"];
}

// Runs shape checks of a call, adding its layout to what they refuse, so a tensor read in the wrong
// order says which order it was read in.
function inLayout<T>(layout: Layout, check: () => T): T {
  try {
    return check();
  } catch (e) {
    if (!(e instanceof AttnkitError) || e.code !== "INVALID_ARGUMENT") throw e;
    const message = e.message.slice(e.op.length + 2);
    throw invalidArgument(e.op, `${message} (layout "${layout}" reads ${LAYOUTS[layout]})`);
  }
}

// Both q and k holding fewer positions than heads is the usual sign of the other layout.
function warnIfLayoutLooksSwapped(op: string, layout: DenseLayout, sizes: Record<string, number>): void {
  const { Sq, Hq, Skv, Hkv } = sizes;
  if (Skv < 1 || Sq >= Hq || Skv >= Hkv) return;
  warnLayoutLooksSwapped(
    op,
    layout,
    `q has ${Sq} positions and ${Hq} heads, k ${Skv} positions and ${Hkv} heads`,
  );
}

function expectRank(op: string, t: Tensor, layout: Layout): void {
  const rank = layout === "thd" ? 3 : 4;
  if (t.ndim === rank) return;
  const hint = layout === "thd"
    ? '; dense inputs take layout "bshd" or "bhsd" without cuSeqlens'
    : t.ndim === 3
    ? '; packed inputs take layout "thd" with cuSeqlensQ and cuSeqlensK'
    : "";
  throw invalidArgument(
    op,
    `q: expected rank ${rank} ${LAYOUTS[layout]} for layout "${layout}", got [${t.shape.join(", ")}]${hint}`,
  );
}

/**
 * Checks q, k, v (and cu_seqlens) of a call and returns its geometry. Messages name the op, the
 * argument and the layout the tensors were read in.
 */
export function describeCall(op: string, query: QuerySource, kv: KvSource): AttentionGeometry {
  const q = expectTensor(op, "q", query.q);
  const k = expectTensor(op, "k", kv.k);
  const v = expectTensor(op, "v", kv.v);
  expectDType(op, "q", q, ["float16", "bfloat16"]);
  expectSameDType(op, "k", k, q, "q");
  expectSameDType(op, "v", v, q, "q");
  expectSameDevice(op, "k", k, q, "q");
  expectSameDevice(op, "v", v, q, "q");
  if (query.kind !== kv.kind) {
    throw invalidArgument(op, "k: packed (thd) queries need packed keys and values, and dense ones dense");
  }
  const layout: Layout = query.kind === "dense" ? query.layout : "thd";
  if (kv.kind === "dense" && kv.layout !== layout) {
    throw invalidArgument(op, `k: read as layout "${kv.layout}" while q is read as "${layout}"`);
  }
  expectRank(op, q, layout);
  const geometry = inLayout(layout, () => {
    const sizes: Record<string, number> = {};
    if (query.kind === "dense") {
      const dense = query.layout;
      expectShape(op, "q", q, densePattern(dense, "Sq", "Hq"), sizes);
      expectShape(op, "k", k, densePattern(dense, "Skv", "Hkv"), sizes);
      expectShape(op, "v", v, densePattern(dense, "Skv", "Hkv"), sizes);
    } else {
      expectShape(op, "q", q, ["Tq", "Hq", "D"], sizes);
      expectShape(op, "k", k, ["Tkv", "Hkv", "D"], sizes);
      expectShape(op, "v", v, ["Tkv", "Hkv", "D"], sizes);
    }
    const { D: dim, Hq: heads, Hkv: headsKv } = sizes;
    if (dim % 8 !== 0 || dim < 8 || dim > MAX_HEAD_DIM) {
      throw invalidArgument(
        op,
        `q: head dim D must be a multiple of 8 between 8 and ${MAX_HEAD_DIM}, got ${dim}`,
      );
    }
    if (headsKv < 1) {
      throw invalidArgument(op, `k: expected at least one KV head, got [${k.shape.join(", ")}]`);
    }
    if (heads % headsKv !== 0) {
      throw invalidArgument(
        op,
        `q: the query heads (${heads}) must be a multiple of the KV heads of k (${headsKv}) for grouped-query attention`,
      );
    }
    return sizes;
  });
  const common = {
    layout,
    heads: geometry.Hq,
    headsKv: geometry.Hkv,
    dim: geometry.D,
    dtype: q.dtype,
    device: q.device,
  };
  if (query.kind === "dense") {
    warnIfLayoutLooksSwapped(op, query.layout, geometry);
    return { ...common, packed: false, batch: geometry.B, seqQ: geometry.Sq, seqKv: geometry.Skv };
  }
  const cuQ = expectCuSeqlens(op, "cuSeqlensQ", query.cuSeqlens, q);
  const cuKv = expectCuSeqlens(op, "cuSeqlensK", (kv as { cuSeqlens: Tensor }).cuSeqlens, q);
  if (cuKv.shape[0] !== cuQ.shape[0]) {
    throw invalidArgument(
      op,
      `cuSeqlensK: expected ${cuQ.shape[0]} entries (same as cuSeqlensQ), got ${cuKv.shape[0]}`,
    );
  }
  return { ...common, packed: true, batch: cuQ.shape[0] - 1, seqQ: geometry.Tq, seqKv: geometry.Tkv };
}

function expectCuSeqlens(op: string, name: string, t: unknown, q: Tensor): Tensor {
  const cu = expectTensor(op, name, t);
  expectDType(op, name, cu, ["int32"]);
  expectSameDevice(op, name, cu, q, "q");
  if (cu.ndim !== 1 || cu.shape[0] < 1) {
    throw invalidArgument(op, `${name}: expected shape [N + 1] with N >= 0, got [${cu.shape.join(", ")}]`);
  }
  return cu;
}

/** Shape of q-like tensors (q, output, dO, dq) in the call's own layout. */
export function queryShape(g: AttentionGeometry): number[] {
  if (g.packed) return [g.seqQ, g.heads, g.dim];
  return g.layout === "bshd" ? [g.batch, g.seqQ, g.heads, g.dim] : [g.batch, g.heads, g.seqQ, g.dim];
}

/** Shape of k-like tensors (k, v, dk, dv) in the call's own layout. */
export function keyShape(g: AttentionGeometry): number[] {
  if (g.packed) return [g.seqKv, g.headsKv, g.dim];
  return g.layout === "bshd" ? [g.batch, g.seqKv, g.headsKv, g.dim] : [g.batch, g.headsKv, g.seqKv, g.dim];
}

/** Shape of the LSE: `[B, Hq, Sq]`, or `[Hq, Tq]` when packed. */
export function lseShape(g: AttentionGeometry): number[] {
  return g.packed ? [g.heads, g.seqQ] : [g.batch, g.heads, g.seqQ];
}

/**
 * The BSHD descriptor the C entries read for a contiguous q-like or k-like tensor: the tensor's own
 * descriptor for BSHD and packed layouts, a permuted view (no copy) for BHSD.
 */
export function bshdDescriptor(
  t: Tensor,
  g: Pick<AttentionGeometry, "layout">,
  op: string,
): Uint8Array<ArrayBuffer> {
  if (g.layout !== "bhsd") return t.descriptor(op);
  const [b, h, s, d] = t.shape;
  const strides = t.strides;
  return t.viewDescriptor([b, s, h, d], [strides[0], strides[2], strides[1], strides[3]], op);
}

/**
 * Checks a caller-provided output (or allocates one): shape, dtype and device must match.
 * Returns the tensor and whether this call owns it (to dispose it when the call fails).
 */
export function outputTensor(
  op: string,
  name: string,
  given: Tensor | undefined,
  shape: readonly number[],
  dtype: DType,
  device: string,
): { tensor: Tensor; owned: boolean } {
  if (given === undefined || given === null) {
    return { tensor: Tensor.empty(shape, { dtype, device }), owned: true };
  }
  const t = expectTensor(op, name, given);
  expectShape(op, name, t, shape);
  if (t.dtype !== dtype) throw invalidArgument(op, `${name}: expected dtype ${dtype}, got ${t.dtype}`);
  if (t.device !== device) throw invalidArgument(op, `${name}: expected device ${device}, got ${t.device}`);
  return { tensor: t, owned: false };
}

/** The sequence lengths of cu_seqlens offsets. */
export function sequenceLengths(offsets: Int32Array): number[] {
  const lengths: number[] = [];
  for (let i = 1; i < offsets.length; i++) lengths.push(offsets[i] - offsets[i - 1]);
  return lengths;
}
