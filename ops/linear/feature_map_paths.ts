/**
 * The two evaluation paths of feature-map linear attention, composed from existing pieces (no
 * kernel of their own), with their hand-derived backwards. With features P (queries) and R (keys),
 * already re-weighted for cosformer:
 * - causal: the numerator `sum_{j<=i} (P_i . R_j) v_j` and the normaliser `P_i . sum_{j<=i} R_j` come
 *   from one call of the gated-linear chunk kernel without decay (`chunkLinearAttn`, scale 1) on v
 *   with columns of ones appended. Each query row is first divided by its token count i + 1:
 *   numerator and normaliser scale alike (eps with them), and 16-bit kernel outputs stay averages
 *   instead of sums that grow with the sequence (float16 would overflow past a few hundred tokens).
 *   Feature dims over 256 and value dims over 248 are split into pieces, one call per pair.
 * - bidirectional: per (batch, head) `S = R^T v` and `z = sum_j R_j`, then `o = P S / (P . z + eps)`,
 *   batched matrix products in float32, memory linear in T.
 *
 * @module
 */
import type { DType } from "../dtype.ts";
import { Tensor } from "../tensor.ts";
import type { GlaResult } from "./gla_functional.ts";
import { chunkLinearAttn } from "./linear_attn.ts";
import type { LinearLayout } from "./layouts.ts";
import {
  featureGradient,
  type FeatureMapKind,
  features,
  type Temporaries,
  type TokenWeights,
  writeColumns,
} from "./feature_map_features.ts";

/** One call's validated inputs and settings. */
export interface FeatureMapCall {
  q: Tensor;
  k: Tensor;
  v: Tensor;
  layout: LinearLayout;
  phi: FeatureMapKind;
  isCausal: boolean;
  eps: number;
  /** `[T]` tensors (any float dtype), both or neither. */
  cosWeight?: Tensor;
  sinWeight?: Tensor;
}

/** The gradients in float32 (temps of the scope), in the call's layout. */
export interface Float32Gradients {
  dq: Tensor;
  dk: Tensor;
  dv: Tensor;
}

/** A `[T]` tensor as float32 broadcasting against the token dim of `layout` (`[1, T, 1, 1]` or `[1, 1, T, 1]`). */
function alongTokens(scope: Temporaries, t: Tensor, layout: LinearLayout): Tensor {
  const f = t.dtype === "float32" ? t : scope.temp(t.cast("float32"));
  const T = t.shape[0];
  return scope.temp(f.reshape(layout === "bshd" ? [1, T, 1, 1] : [1, 1, T, 1]));
}

function cosformer(scope: Temporaries, c: FeatureMapCall, layout: LinearLayout): TokenWeights {
  if (!c.cosWeight || !c.sinWeight) return {};
  return { cos: alongTokens(scope, c.cosWeight, layout), sin: alongTokens(scope, c.sinWeight, layout) };
}

const normalised = (c: FeatureMapCall) => c.phi !== "softmax_free";

// ---- causal ----

/** The kernels' largest head dim. */
const KERNEL_MAX_DIM = 256;
/** The columns appended to each value piece: a column of ones (the normaliser) and zeros (width rule). */
const ONES_COLUMNS = 8;

/**
 * Splits n columns into the fewest pieces of at most `max` (a multiple of 8): equal widths, each a
 * multiple of 8 where n is, so every piece keeps the kernels' head-dim rule.
 */
function pieces(n: number, max: number): [number, number][] {
  const count = Math.ceil(n / max);
  const width = Math.min(max, 8 * Math.ceil(n / (8 * count)));
  return Array.from({ length: count }, (_, i) => [i * width, Math.min(n, (i + 1) * width)]);
}

/** Columns [a, b) of t: t itself when that is all of it, else a copy (a temp). */
function columns(scope: Temporaries, t: Tensor, [a, b]: [number, number]): Tensor {
  return a === 0 && b === t.shape[t.ndim - 1] ? t : scope.temp(t.slice(-1, a, b));
}

/** The parts side by side along the last dim, in `dtype` (a temp, or the one part itself). */
function joined(scope: Temporaries, parts: Tensor[], dtype: DType, op: string): Tensor {
  if (parts.length === 1) return parts[0].dtype === dtype ? parts[0] : scope.temp(parts[0].cast(dtype));
  const width = parts.reduce((n, p) => n + p.shape[p.ndim - 1], 0);
  const out = scope.temp(
    Tensor.empty([...parts[0].shape.slice(0, -1), width], { dtype, device: parts[0].device }),
  );
  let at = 0;
  for (const p of parts) {
    writeColumns(out, p, at, op);
    at += p.shape[p.ndim - 1];
  }
  return out;
}

/** The sum of `ts` in float32 (a temp, or the one float32 tensor itself). */
function summed(scope: Temporaries, ts: Tensor[]): Tensor {
  let s = ts[0].dtype === "float32" ? ts[0] : scope.temp(ts[0].cast("float32"));
  for (const t of ts.slice(1)) s = scope.temp(s.add(t));
  return s;
}

interface CausalState {
  weights: TokenWeights;
  /** Query-side weights: the cosformer weights and 1 / (t + 1) (normalised maps only). */
  qWeights: TokenWeights;
  /** Column ranges of the features and of v, one kernel call per pair. */
  featurePieces: [number, number][];
  valuePieces: [number, number][];
  /** calls[f][p]: feature piece f against value piece p (with its ones column when normalised). */
  calls: GlaResult[][];
  /** The scaled normaliser plus the scaled eps, float32, `[..., 1]` (normalised maps). */
  den?: Tensor;
  /** The output in float32. */
  o32: Tensor;
}

// The value pieces as the kernel reads them: with normalisation each gets [v_piece, 1, 0, ...], so one
// call gives the numerator and the normaliser, and in the backward the kernel sums the numerator's
// and the normaliser's share of each score gradient in float32 (separately rounded to 16 bits they
// would cancel badly where the normaliser is small).
function causalForward(scope: Temporaries, c: FeatureMapCall, op: string): CausalState {
  const { layout, v } = c;
  const dtype: DType = v.dtype;
  const T = layout === "bshd" ? v.shape[1] : v.shape[2];
  const V = v.shape[3];
  const norm = normalised(c);
  const weights = cosformer(scope, c, layout);
  const qWeights: TokenWeights = { ...weights };
  if (norm) {
    const counts = scope.temp(Tensor.arange(1, T + 1, 1, { dtype: "float32", device: v.device }));
    qWeights.factor = alongTokens(scope, scope.temp(counts.pow(-1)), layout);
  }
  const P = features(scope, c.q, c.phi, qWeights, dtype, op);
  const R = features(scope, c.k, c.phi, weights, dtype, op);
  const featurePieces = pieces(P.shape[3], KERNEL_MAX_DIM);
  const valuePieces = pieces(V, norm ? KERNEL_MAX_DIM - ONES_COLUMNS : KERNEL_MAX_DIM);
  const values = valuePieces.map((range) => {
    const piece = columns(scope, v, range);
    if (!norm) return piece;
    const w = range[1] - range[0];
    const aug = scope.temp(
      Tensor.zeros([...v.shape.slice(0, -1), w + ONES_COLUMNS], { dtype, device: v.device }),
    );
    writeColumns(aug, piece, 0, op);
    writeColumns(
      aug,
      scope.temp(Tensor.ones([...v.shape.slice(0, -1), 2], { dtype, device: v.device })),
      w,
      op,
    );
    return aug;
  });
  const calls = featurePieces.map((range) => {
    const [p, r] = [columns(scope, P, range), columns(scope, R, range)];
    return values.map((val) => scope.temp(chunkLinearAttn(p, r, val, { layout, scale: 1 })));
  });
  // Each value piece's output summed over the feature pieces, in float32.
  const outputs = valuePieces.map((_, j) => summed(scope, calls.map((row) => row[j].output)));
  const state = { weights, qWeights, featurePieces, valuePieces, calls };
  if (!norm) return { ...state, o32: joined(scope, outputs, "float32", op) };
  const w0 = valuePieces[0][1] - valuePieces[0][0];
  const raw = columns(scope, outputs[0], [w0, w0 + 1]);
  const den = scope.temp(raw.add(scope.temp(qWeights.factor!.mul(c.eps))));
  const numerators = outputs.map((o, j) => columns(scope, o, [0, valuePieces[j][1] - valuePieces[j][0]]));
  const o32 = scope.temp(joined(scope, numerators, "float32", op).div(den));
  return { ...state, den, o32 };
}

/** The causal output (float32, a temp of `scope`). */
export function causalOutput(scope: Temporaries, c: FeatureMapCall, op: string): Tensor {
  return causalForward(scope, c, op).o32;
}

/** The causal gradients (float32 temps of `scope`). */
export function causalGradients(
  scope: Temporaries,
  c: FeatureMapCall,
  dO: Tensor,
  op: string,
): Float32Gradients {
  const f = causalForward(scope, c, op);
  const dtype = c.v.dtype;
  const dO32 = dO.dtype === "float32" ? dO : scope.temp(dO.cast("float32"));
  // o = N / D: dN = dO / D, and D's gradient -(dO . o) / D split by value piece (each piece's ones
  // column carries its own share, so the kernel's sum over a piece cancels in float32).
  const dN = f.den ? scope.temp(dO32.div(f.den)) : dO32;
  const dOutputs = f.valuePieces.map((range) => {
    const piece = columns(scope, dN, range);
    if (!f.den) return piece.dtype === dtype ? piece : scope.temp(piece.cast(dtype));
    // The normaliser's share is formed from dN as the kernel reads it (rounded to the dtype), and
    // crosses in two columns, its rounding and the rest, so the kernel's float32 sum over a score
    // gradient cancels what it should.
    const rounded = piece.dtype === dtype ? piece : scope.temp(piece.cast(dtype));
    const back = rounded.dtype === "float32" ? rounded : scope.temp(rounded.cast("float32"));
    const o = columns(scope, f.o32, range);
    const dD = scope.temp(scope.temp(scope.temp(back.mul(o)).sum(-1, { keepDim: true })).neg());
    const high = scope.temp(dD.cast(dtype));
    const low = scope.temp(dD.sub(high));
    const w = range[1] - range[0];
    const aug = scope.temp(
      Tensor.zeros([...piece.shape.slice(0, -1), w + ONES_COLUMNS], { dtype, device: dO.device }),
    );
    writeColumns(aug, rounded, 0, op);
    writeColumns(aug, high, w, op);
    writeColumns(aug, low, w + 1, op);
    return aug;
  });
  const grads = f.calls.map((row) => row.map((call, j) => scope.temp(call.backward(dOutputs[j]))));
  const dP = joined(scope, grads.map((row) => summed(scope, row.map((g) => g.dq))), "float32", op);
  const dR = joined(scope, grads.map((row) => summed(scope, row.map((g) => g.dk))), "float32", op);
  const dv = joined(
    scope,
    f.valuePieces.map((range, j) =>
      columns(scope, summed(scope, grads.map((row) => row[j].dv)), [0, range[1] - range[0]])
    ),
    "float32",
    op,
  );
  return {
    dq: featureGradient(scope, c.q, dP, c.phi, f.qWeights),
    dk: featureGradient(scope, c.k, dR, c.phi, f.weights),
    dv,
  };
}

// ---- bidirectional ----

interface BidirectionalState {
  weights: TokenWeights;
  /** q, k, v as float32 `[B, H, T, *]`. */
  q: Tensor;
  k: Tensor;
  v: Tensor;
  P: Tensor;
  R: Tensor;
  /** `R^T v`, `[B, H, K', V]`. */
  S: Tensor;
  /** `sum_j R_j`, `[B, H, 1, K']` (normalised maps). */
  z?: Tensor;
  /** `P . z + eps`, `[B, H, T, 1]` (normalised maps). */
  den?: Tensor;
  /** `[B, H, T, V]` float32. */
  o: Tensor;
}

// x in float32 `[B, H, T, *]`.
function headsFirst(scope: Temporaries, x: Tensor, layout: LinearLayout): Tensor {
  const x32 = x.dtype === "float32" ? x : scope.temp(x.cast("float32"));
  return layout === "bhsd" ? x32 : scope.temp(x32.permute([0, 2, 1, 3]));
}

/** x (`[B, H, T, *]`) back in the call's layout. */
export function inLayout(scope: Temporaries, x: Tensor, layout: LinearLayout): Tensor {
  return layout === "bhsd" ? x : scope.temp(x.permute([0, 2, 1, 3]));
}

function bidirectionalForward(scope: Temporaries, c: FeatureMapCall, op: string): BidirectionalState {
  const q = headsFirst(scope, c.q, c.layout);
  const k = headsFirst(scope, c.k, c.layout);
  const v = headsFirst(scope, c.v, c.layout);
  const weights = cosformer(scope, c, "bhsd");
  const P = features(scope, q, c.phi, weights, "float32", op);
  const R = features(scope, k, c.phi, weights, "float32", op);
  const S = scope.temp(scope.temp(R.transpose(-2, -1)).matmul(v));
  const N = scope.temp(P.matmul(S));
  if (!normalised(c)) return { weights, q, k, v, P, R, S, o: N };
  const z = scope.temp(R.sum(2, { keepDim: true }));
  const den = scope.temp(scope.temp(scope.temp(P.mul(z)).sum(-1, { keepDim: true })).add(c.eps));
  return { weights, q, k, v, P, R, S, z, den, o: scope.temp(N.div(den)) };
}

/** The bidirectional output (float32 `[B, H, T, V]`, a temp of `scope`). */
export function bidirectionalOutput(scope: Temporaries, c: FeatureMapCall, op: string): Tensor {
  return bidirectionalForward(scope, c, op).o;
}

/** The bidirectional gradients (float32 `[B, H, T, *]` temps of `scope`). */
export function bidirectionalGradients(
  scope: Temporaries,
  c: FeatureMapCall,
  dO: Tensor,
  op: string,
): Float32Gradients {
  const f = bidirectionalForward(scope, c, op);
  const g = headsFirst(scope, dO, c.layout);
  const St = scope.temp(f.S.transpose(-2, -1));
  const Pt = scope.temp(f.P.transpose(-2, -1));
  let dN = g, dP: Tensor, dR: Tensor;
  if (f.den && f.z) {
    // o = N / D: dN = dO / D, dD = -(dO . o) / D; D = P . z + eps feeds dP (dD z) and dz (sum_i P_i dD_i).
    dN = scope.temp(g.div(f.den));
    const dot = scope.temp(scope.temp(g.mul(f.o)).sum(-1, { keepDim: true }));
    const dD = scope.temp(scope.temp(dot.div(f.den)).neg());
    dP = scope.temp(scope.temp(dN.matmul(St)).add(scope.temp(dD.mul(f.z))));
    const dz = scope.temp(scope.temp(f.P.mul(dD)).sum(2, { keepDim: true }));
    const dS = scope.temp(Pt.matmul(dN));
    dR = scope.temp(scope.temp(f.v.matmul(scope.temp(dS.transpose(-2, -1)))).add(dz));
    return {
      dq: featureGradient(scope, f.q, dP, c.phi, f.weights),
      dk: featureGradient(scope, f.k, dR, c.phi, f.weights),
      dv: scope.temp(f.R.matmul(dS)),
    };
  }
  dP = scope.temp(dN.matmul(St));
  const dS = scope.temp(Pt.matmul(dN));
  dR = scope.temp(f.v.matmul(scope.temp(dS.transpose(-2, -1))));
  return {
    dq: featureGradient(scope, f.q, dP, c.phi, f.weights),
    dk: featureGradient(scope, f.k, dR, c.phi, f.weights),
    dv: scope.temp(f.R.matmul(dS)),
  };
}
