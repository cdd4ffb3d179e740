/**
 * The evaluation of feature-map linear attention: the gated-linear chunk kernel without decay
 * (`chunkLinearAttn`, scale 1) between one-pass native stages. With features P (queries) and R
 * (keys), already re-weighted for cosformer, and the values read as `[v | 1 | 0 ...]` (so one
 * kernel call gives the numerator and the normaliser):
 * - causal: one call on (P, R, [v | 1]) gives `sum_{j<=i} (P_i . R_j) [v_j | 1]`.
 * - bidirectional: one call on (R, R, [v | 1]) with its final state gives `S = sum_j R_j [v_j | 1]^T`
 *   (its output is not used), and one on (P, 0, 0) starting from S gives `P_i S` (zero keys and
 *   values leave the state as it is); the backward runs both calls' backwards, the second's
 *   initial-state gradient feeding the first's final-state gradient.
 * (The bidirectional forward and backward run fused where they can: `feature_map_bidirectional.ts`.)
 * Each query row is first multiplied by 1 / (i + 1) (causal) or 1 / T (bidirectional), and eps with
 * it: numerator and normaliser scale alike, and 16-bit kernel outputs stay averages instead of sums
 * that grow with the sequence (float16 would overflow past a few hundred tokens). Feature dims over
 * 256 and value dims over 248 are split into pieces, one kernel call per pair.
 *
 * @module
 */
import type { DType } from "../dtype.ts";
import { Tensor } from "../tensor.ts";
import {
  featureDim,
  fusedBidirectionalGradServes,
  fusedBidirectionalServes,
  writeBidirectionalGradients,
  writeBidirectionalOutput,
} from "./feature_map_bidirectional.ts";
import { glaBackward, glaForward } from "./gla_native.ts";
import { chunkLinearAttn, fusedNormaliser } from "./linear_attn.ts";
import type { LinearLayout } from "./layouts.ts";
import {
  columnPieces,
  type ColumnRange,
  copyColumns,
  featureGradient,
  type FeatureMapKind,
  features,
  normalise,
  normaliseGradient,
  type RowSettings,
  summed,
  type Temporaries,
  TokenFactor,
  valuesWithOnes,
  weightAsRead,
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

/** Where the gradients go: tensors shaped like q, k and v in the call's layout. */
export interface GradientTargets {
  dq: Tensor;
  dk: Tensor;
  dv: Tensor;
}

/** The kernels' largest head dim. */
const KERNEL_MAX_DIM = 256;
/** The columns appended to each value piece: the normaliser's (ones; in the backward its two) and zeros. */
const ONES_COLUMNS = 8;

/** Columns [a, b) of t: t itself when that is all of it, else a copy (a temp). */
function columns(scope: Temporaries, t: Tensor, [a, b]: ColumnRange): Tensor {
  return a === 0 && b === t.shape[3] ? t : scope.temp(t.slice(-1, a, b));
}

/** The parts side by side along the last dim: the one part itself, else a float32 temp. */
function joined(scope: Temporaries, parts: Tensor[], op: string): Tensor {
  if (parts.length === 1) return parts[0];
  const width = parts.reduce((n, p) => n + p.shape[3], 0);
  const out = scope.temp(
    Tensor.empty([...parts[0].shape.slice(0, 3), width], { dtype: "float32", device: parts[0].device }),
  );
  let at = 0;
  for (const p of parts) {
    copyColumns(out, [at, at + p.shape[3]], p, [0, p.shape[3]], op);
    at += p.shape[3];
  }
  return out;
}

/** One kernel pair's forward output and its backward (gradients of P, R and the value piece). */
interface Pair {
  output: Tensor;
  backward(dOutput: Tensor): { dP: Tensor; dR: Tensor; dValues: Tensor };
}

function causalPair(scope: Temporaries, p: Tensor, r: Tensor, values: Tensor, layout: LinearLayout): Pair {
  const call = scope.temp(chunkLinearAttn(p, r, values, { layout, scale: 1 }));
  return {
    output: call.output,
    backward(d) {
      const g = scope.temp(call.backward(d));
      return { dP: g.dq, dR: g.dk, dValues: g.dv };
    },
  };
}

/** Zero tensors shaped like a given one, one per shape and dtype (the bidirectional pairs' keys and values). */
class Zeros {
  #made = new Map<string, Tensor>();
  constructor(readonly scope: Temporaries) {}
  like(t: Tensor): Tensor {
    const key = `${t.shape.join(",")}:${t.dtype}`;
    let z = this.#made.get(key);
    if (!z) {
      z = this.scope.temp(Tensor.zeros(t.shape, { dtype: t.dtype, device: t.device }));
      this.#made.set(key, z);
    }
    return z;
  }
}

function bidirectionalPair(
  scope: Temporaries,
  zeros: Zeros,
  p: Tensor,
  r: Tensor,
  values: Tensor,
  layout: LinearLayout,
): Pair {
  // The state after every token is S = sum_j R_j values_j^T; P_i S is the output from S with no tokens added.
  const sums = scope.temp(chunkLinearAttn(r, r, values, { layout, scale: 1, outputFinalState: true }));
  const zeroValues = zeros.like(values);
  const read = scope.temp(
    chunkLinearAttn(p, zeros.like(r), zeroValues, { layout, scale: 1, initialState: sums.finalState }),
  );
  return {
    output: read.output,
    backward(d) {
      const g = scope.temp(read.backward(d));
      // sums' own output is not part of the result: only its final state has a gradient.
      const h = scope.temp(sums.backward(zeroValues, { dFinalState: g.dInitialState }));
      return { dP: g.dq, dR: h.dk, dValues: h.dv };
    },
  };
}

interface Forward {
  rows: RowSettings;
  /** The query rows' factor (`TokenFactor`). */
  qFactor: number;
  normalised: boolean;
  valuePieces: ColumnRange[];
  /** pairs[f][j]: feature piece f against value piece j. */
  pairs: Pair[][];
  /** Per value piece, the kernels' output summed over the feature pieces (numerator, then normaliser). */
  outputs: Tensor[];
}

function forward(scope: Temporaries, c: FeatureMapCall, op: string): Forward {
  const { layout, v } = c;
  const dtype: DType = v.dtype;
  const V = v.shape[3];
  const normalised = c.phi !== "softmax_free";
  const rows = rowSettings(scope, c);
  const qFactor = !normalised ? TokenFactor.NONE : c.isCausal ? TokenFactor.CAUSAL : TokenFactor.MEAN;
  const P = features(scope, c.q, c.phi, qFactor, rows, dtype, op);
  const R = features(scope, c.k, c.phi, TokenFactor.NONE, rows, dtype, op);
  const featurePieces = columnPieces(P.shape[3], KERNEL_MAX_DIM);
  const valuePieces = columnPieces(V, normalised ? KERNEL_MAX_DIM - ONES_COLUMNS : KERNEL_MAX_DIM);
  const values = valuePieces.map((range) => {
    if (!normalised) return columns(scope, v, range);
    return valuesWithOnes(scope, v, range, range[1] - range[0] + ONES_COLUMNS, dtype, op);
  });
  const zeros = new Zeros(scope);
  const pairs = featurePieces.map((range) => {
    const [p, r] = [columns(scope, P, range), columns(scope, R, range)];
    return values.map((val) =>
      c.isCausal ? causalPair(scope, p, r, val, layout) : bidirectionalPair(scope, zeros, p, r, val, layout)
    );
  });
  const outputs = valuePieces.map((_, j) => summed(scope, pairs.map((row) => row[j].output)));
  return { rows, qFactor, normalised, valuePieces, pairs, outputs };
}

/** The features' row settings of a call: the token dim and cosformer's weights as the kernels read them. */
function rowSettings(scope: Temporaries, c: FeatureMapCall): RowSettings {
  const rows: RowSettings = { tokenDim: c.layout === "bshd" ? 1 : 2 };
  if (c.cosWeight && c.sinWeight) {
    rows.cos = weightAsRead(scope, c.cosWeight);
    rows.sin = weightAsRead(scope, c.sinWeight);
  }
  return rows;
}

/**
 * Whether the causal forward runs as one kernel call with linear attention's normaliser inside it (head
 * dims up to 256; the CPU backend always, on CUDA where the planner fuses the normaliser: bfloat16, 128
 * features and values).
 */
function fusedCausalServes(c: FeatureMapCall, pass: "forward" | "backward" = "forward"): boolean {
  if (!c.isCausal || c.phi === "softmax_free") return false;
  if (featureDim(c) > KERNEL_MAX_DIM || c.v.shape[3] > KERNEL_MAX_DIM) return false; // one call, no pieces
  return fusedNormaliser({
    device: c.q.device,
    dtype: c.v.dtype,
    K: featureDim(c),
    V: c.v.shape[3],
    N: c.v.shape[0],
    H: c.v.shape[c.layout === "bshd" ? 2 : 1],
    recurrent: false,
    chunkStates: false,
  }, pass);
}

/** The fused causal calls' operands: features of q and k (no row factor), and the kernel settings. */
function fusedCausalOperands(scope: Temporaries, c: FeatureMapCall, op: string) {
  const rows = rowSettings(scope, c);
  const dtype = c.v.dtype;
  const inputs = {
    q: features(scope, c.q, c.phi, TokenFactor.NONE, rows, dtype, op),
    k: features(scope, c.k, c.phi, TokenFactor.NONE, rows, dtype, op),
    v: c.v,
  };
  return { rows, dtype, inputs, settings: { layout: c.layout, scale: 1, recurrent: false } };
}

/** The causal forward with the normaliser in the kernel: the features, then one call. */
function writeFusedCausalOutput(scope: Temporaries, c: FeatureMapCall, out: Tensor, op: string): void {
  const { dtype, inputs, settings } = fusedCausalOperands(scope, c, op);
  const given = out.dtype === dtype ? out : undefined;
  const r = glaForward(op, inputs, settings, { normalizeEps: c.eps }, given ? { output: given } : {});
  if (!given) out.copyFrom(scope.temp(r.output));
}

/**
 * The causal backward as one normalised backward call on the features (the normaliser's gradient inside
 * it), then the feature gradients.
 */
function writeFusedCausalGradients(
  scope: Temporaries,
  c: FeatureMapCall,
  dO: Tensor,
  into: GradientTargets,
  op: string,
): void {
  const { rows, dtype, inputs, settings } = fusedCausalOperands(scope, c, op);
  const dOut = dO.dtype === dtype ? dO : scope.temp(dO.cast(dtype));
  const given = into.dv.dtype === dtype ? into.dv : undefined;
  const g = glaBackward(op, inputs, settings, dOut, {
    normalizeEps: c.eps,
    out: given ? { dv: given } : undefined,
  });
  scope.temp(g.dq);
  scope.temp(g.dk);
  if (!given) into.dv.copyFrom(scope.temp(g.dv));
  featureGradient(into.dq, c.q, g.dq, c.phi, TokenFactor.NONE, rows, op);
  featureGradient(into.dk, c.k, g.dk, c.phi, TokenFactor.NONE, rows, op);
}

/** Writes the output (shaped like v, any float dtype) into `out`. */
export function writeOutput(scope: Temporaries, c: FeatureMapCall, out: Tensor, op: string): void {
  if (fusedBidirectionalServes(c)) return writeBidirectionalOutput(scope, c, out, op);
  if (fusedCausalServes(c)) return writeFusedCausalOutput(scope, c, out, op);
  const f = forward(scope, c, op);
  f.valuePieces.forEach((range, j) => {
    const w = range[1] - range[0];
    if (f.normalised) normalise(out, range, f.outputs[j], c.eps, f.qFactor, f.rows, op);
    else copyColumns(out, range, f.outputs[j], [0, w], op);
  });
}

/** Writes the gradients into `into`, from the output's gradient `dO` (shaped like v, any float dtype). */
export function writeGradients(
  scope: Temporaries,
  c: FeatureMapCall,
  dO: Tensor,
  into: GradientTargets,
  op: string,
): void {
  if (fusedBidirectionalGradServes(c)) return writeBidirectionalGradients(scope, c, dO, into, op);
  if (fusedCausalServes(c, "backward")) return writeFusedCausalGradients(scope, c, dO, into, op);
  const f = forward(scope, c, op);
  const dtype = c.v.dtype;
  const dOutputs = f.valuePieces.map((range, j) => {
    if (f.normalised) {
      const width = range[1] - range[0] + ONES_COLUMNS;
      return normaliseGradient(scope, dO, range, f.outputs[j], width, c.eps, f.qFactor, f.rows, dtype, op);
    }
    if (range[1] - range[0] === dO.shape[3] && dO.dtype === dtype) return dO;
    const piece = scope.temp(
      Tensor.empty([...dO.shape.slice(0, 3), range[1] - range[0]], { dtype, device: dO.device }),
    );
    copyColumns(piece, [0, range[1] - range[0]], dO, range, op);
    return piece;
  });
  const grads = f.pairs.map((row) => row.map((pair, j) => pair.backward(dOutputs[j])));
  const dP = joined(scope, grads.map((row) => summed(scope, row.map((g) => g.dP))), op);
  const dR = joined(scope, grads.map((row) => summed(scope, row.map((g) => g.dR))), op);
  featureGradient(into.dq, c.q, dP, c.phi, f.qFactor, f.rows, op);
  featureGradient(into.dk, c.k, dR, c.phi, TokenFactor.NONE, f.rows, op);
  f.valuePieces.forEach((range, j) => {
    const dValues = summed(scope, grads.map((row) => row[j].dValues));
    copyColumns(into.dv, range, dValues, [0, range[1] - range[0]], op);
  });
}
