/**
 * Where a call's queries, keys and values come from, and the checks that turn them into one
 * geometry (batch, lengths, heads, head dim) with BSHD views for the C entries. Dense tensors are
 * BSHD or BHSD; packed (varlen) tensors are THD with `cu_seqlens`. A later issue adds a paged KV
 * source here without touching the ops.
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { expectDType, expectSameDevice, expectSameDType, expectShape, expectTensor } from "../checks.ts";
import type { DType } from "../dtype.ts";
import { Tensor } from "../tensor.ts";
import type { AttentionLayout } from "./options.ts";

/**
 * Queries of a call: dense `[B, Sq, Hq, D]` (or `[B, Hq, Sq, D]` for `"bhsd"`), or packed
 * `[Tq, Hq, D]` with `cuSeqlens` (int32 `[N + 1]`).
 *
 * @example
 * ```ts
 * import { type QuerySource, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 16, 4, 64], { dtype: "bfloat16", seed: 1 });
 * const source: QuerySource = { kind: "dense", q, layout: "bshd" };
 * ```
 */
export type QuerySource =
  | { readonly kind: "dense"; readonly q: Tensor; readonly layout: AttentionLayout }
  | { readonly kind: "packed"; readonly q: Tensor; readonly cuSeqlens: Tensor };

/**
 * Keys and values of a call: dense `[B, Skv, Hkv, D]` (or BHSD), or packed `[Tkv, Hkv, D]` with
 * `cuSeqlens`. (Paged KV caches come in a later issue as another kind.)
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
  | { readonly kind: "dense"; readonly k: Tensor; readonly v: Tensor; readonly layout: AttentionLayout }
  | { readonly kind: "packed"; readonly k: Tensor; readonly v: Tensor; readonly cuSeqlens: Tensor };

/** Sizes of one call, after every check. */
export interface AttentionGeometry {
  /** Packed (varlen) inputs. */
  readonly packed: boolean;
  /** Dense memory layout (`"bshd"` for packed). */
  readonly layout: AttentionLayout;
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

function densePattern(layout: AttentionLayout, seq: string, heads: string): string[] {
  return layout === "bshd" ? ["B", seq, heads, "D"] : ["B", heads, seq, "D"];
}

/**
 * Checks q, k, v (and cu_seqlens) of a call and returns its geometry. Messages name the op and
 * the argument.
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
  const sizes: Record<string, number> = {};
  let geometry: AttentionGeometry;
  if (query.kind === "dense" && kv.kind === "dense") {
    const layout = query.layout;
    const what = layout === "bshd" ? "[B, S, H, D]" : "[B, H, S, D]";
    if (q.ndim !== 4) {
      throw invalidArgument(op, `q: expected rank 4 ${what} (${layout}), got [${q.shape.join(", ")}]`);
    }
    expectShape(op, "q", q, densePattern(layout, "Sq", "Hq"), sizes);
    expectShape(op, "k", k, densePattern(layout, "Skv", "Hkv"), sizes);
    expectShape(op, "v", v, densePattern(layout, "Skv", "Hkv"), sizes);
    geometry = {
      packed: false,
      layout,
      batch: sizes.B,
      seqQ: sizes.Sq,
      seqKv: sizes.Skv,
      heads: sizes.Hq,
      headsKv: sizes.Hkv,
      dim: sizes.D,
      dtype: q.dtype,
      device: q.device,
    };
  } else if (query.kind === "packed" && kv.kind === "packed") {
    if (q.ndim !== 3) {
      throw invalidArgument(op, `q: expected rank 3 [Tq, Hq, D] (varlen), got [${q.shape.join(", ")}]`);
    }
    expectShape(op, "q", q, ["Tq", "Hq", "D"], sizes);
    expectShape(op, "k", k, ["Tkv", "Hkv", "D"], sizes);
    expectShape(op, "v", v, ["Tkv", "Hkv", "D"], sizes);
    const cuQ = expectCuSeqlens(op, "cuSeqlensQ", query.cuSeqlens, q);
    const cuKv = expectCuSeqlens(op, "cuSeqlensKv", kv.cuSeqlens, q);
    if (cuKv.shape[0] !== cuQ.shape[0]) {
      throw invalidArgument(
        op,
        `cuSeqlensKv: expected ${cuQ.shape[0]} entries (same as cuSeqlensQ), got ${cuKv.shape[0]}`,
      );
    }
    geometry = {
      packed: true,
      layout: "bshd",
      batch: cuQ.shape[0] - 1,
      seqQ: sizes.Tq,
      seqKv: sizes.Tkv,
      heads: sizes.Hq,
      headsKv: sizes.Hkv,
      dim: sizes.D,
      dtype: q.dtype,
      device: q.device,
    };
  } else {
    throw invalidArgument(op, "k: packed (varlen) queries need packed keys and values, and dense ones dense");
  }
  const { dim, heads, headsKv } = geometry;
  if (dim % 8 !== 0 || dim < 8 || dim > MAX_HEAD_DIM) {
    throw invalidArgument(
      op,
      `q: head dim D must be a multiple of 8 between 8 and ${MAX_HEAD_DIM}, got ${dim}`,
    );
  }
  if (headsKv < 1) throw invalidArgument(op, `k: expected at least one KV head, got [${k.shape.join(", ")}]`);
  if (heads % headsKv !== 0) {
    throw invalidArgument(
      op,
      `q: the query heads (${heads}) must be a multiple of the KV heads of k (${headsKv}) for grouped-query attention`,
    );
  }
  return geometry;
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
export function bshdDescriptor(t: Tensor, g: AttentionGeometry, op: string): Uint8Array<ArrayBuffer> {
  if (g.packed || g.layout === "bshd") return t.descriptor(op);
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

/**
 * cu_seqlens from a tensor (used as is) or host numbers (uploaded to `device` as int32; the
 * caller disposes `owned` ones).
 */
export function cuSeqlensTensor(
  op: string,
  name: string,
  value: Tensor | ArrayLike<number>,
  device: string,
): { tensor: Tensor; owned: boolean } {
  if (value instanceof Tensor) return { tensor: value, owned: false };
  if (
    value === null || typeof value !== "object" || typeof (value as ArrayLike<number>).length !== "number"
  ) {
    throw invalidArgument(
      op,
      `${name}: expected an int32 Tensor or an array of offsets, got ${String(value)}`,
    );
  }
  const length = (value as ArrayLike<number>).length;
  // N + 1 offsets of int32 sequences; more sequences than int32 counts cannot be valid.
  if (!Number.isSafeInteger(length) || length < 0 || length > 2 ** 31) {
    throw invalidArgument(
      op,
      `${name}: expected an array of at most 2^31 offsets, got length ${String(length)}`,
    );
  }
  const values = Array.from(value as ArrayLike<number>);
  for (const x of values) {
    if (!Number.isInteger(x) || x < 0 || x > 2 ** 31 - 1) {
      const shown = values.length > 8 ? `[${values.slice(0, 8).join(", ")}, ...]` : `[${values.join(", ")}]`;
      throw invalidArgument(op, `${name}: expected non-negative int32 offsets, got ${shown}`);
    }
  }
  return { tensor: Tensor.from(Int32Array.from(values), { dtype: "int32", device }), owned: true };
}

/** The sequence lengths of a cu_seqlens tensor (read to the host). */
export function sequenceLengths(cu: Tensor): number[] {
  const offsets = cu.values("int32");
  const lengths: number[] = [];
  for (let i = 1; i < offsets.length; i++) lengths.push(offsets[i] - offsets[i - 1]);
  return lengths;
}
