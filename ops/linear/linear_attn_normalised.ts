/**
 * Linear attention's normaliser on the chunk kernels, where no kernel divides by it: the values read as
 * `[v | 1 | 1 | 0 ...]` (pieces of at most 248 value columns, so a piece and its 8 extra columns fit the
 * kernels' 256), so one kernel call gives the numerator and, in its ones columns, the normaliser
 * `z_t = scale q_t . (k_1 + ... + k_t)` of the token's own sequence; the initial state holds zeros in
 * those columns (it carries no key sum). float16 queries are first scaled by 1 / (t + 1), eps with them,
 * so 16-bit outputs stay averages instead of sums that grow with the sequence (bfloat16 has the range).
 *
 * The backward runs the kernels' backward on the same values with the output gradient
 * `[dO / D | dD high | dD low | 0 ...]` (`normaliseGradient`, D = z + eps): the two ones columns carry the
 * normaliser's gradient `dD = -(dO / D) . o` into dq and dk inside the kernels' float32 sums, where it
 * cancels against the numerator's share, instead of two products rounded apart and subtracted.
 *
 * @module
 */
import { Tensor } from "../tensor.ts";
import type { DType } from "../dtype.ts";
import {
  columnPieces,
  type ColumnRange,
  copyColumns,
  featureGradient,
  features,
  normalise,
  normaliseGradient,
  type RowSettings,
  summed,
  Temporaries,
  TokenFactor,
  valuesWithOnes,
} from "./feature_map_features.ts";
import { checkGlaCall, glaBackward, glaForward, type GlaInputs, type GlaSettings } from "./gla_native.ts";

/** Value columns per kernel call: with the 8 extra columns, the kernels' largest head dim (256). */
const MAX_VALUE_COLUMNS = 248;
/** The columns appended to each value piece: two ones (the normaliser and its gradient's low part), zeros. */
const EXTRA_COLUMNS = 8;

/** One call's kernel operands: the queries as read, the value pieces and their ranges of v. */
interface Operands {
  rows: RowSettings;
  factor: number;
  queries: Tensor;
  ranges: ColumnRange[];
  values: Tensor[];
  /** Settings of each piece's kernel call (its initial state widened with zero columns). */
  settings: GlaSettings[];
  /** A zeroed output buffer per piece for packed calls (rows past the last offset stay 0), else none. */
  outputs: (Tensor | undefined)[];
}

/** `[N, H, K, V]` float32 state columns `range`, widened to `width` columns with zeros. */
function widenedState(
  tmp: Temporaries,
  state: Tensor,
  range: ColumnRange,
  width: number,
  op: string,
): Tensor {
  const wide = tmp.temp(
    Tensor.zeros([...state.shape.slice(0, 3), width], { dtype: "float32", device: state.device }),
  );
  copyColumns(wide, [0, range[1] - range[0]], state, range, op);
  return wide;
}

function operands(tmp: Temporaries, op: string, inputs: GlaInputs, s: GlaSettings): Operands {
  const { q, v } = inputs;
  const dtype: DType = q.dtype;
  const rows: RowSettings = { tokenDim: s.layout === "bshd" ? 1 : 2 };
  const factor = dtype === "float16" ? TokenFactor.CAUSAL : TokenFactor.NONE;
  const queries = factor === TokenFactor.NONE ? q : features(tmp, q, "identity", factor, rows, dtype, op);
  const ranges = columnPieces(v.shape[3], MAX_VALUE_COLUMNS);
  const values = ranges.map((range) => {
    const w = range[1] - range[0];
    const x = valuesWithOnes(tmp, v, range, w + EXTRA_COLUMNS, dtype, op);
    copyColumns(x, [w + 1, w + 2], x, [w, w + 1], op);
    return x;
  });
  const settings = ranges.map((range, j) => ({
    ...s,
    initialState: s.initialState
      ? widenedState(tmp, s.initialState, range, values[j].shape[3], op)
      : undefined,
  }));
  const outputs = values.map((x) =>
    s.cuSeqlens === undefined ? undefined : tmp.temp(Tensor.zeros(x.shape, { dtype, device: x.device }))
  );
  return { rows, factor, queries, ranges, values, settings, outputs };
}

/** The kernel's output for piece j: numerator columns, then the normaliser's (owned by `tmp`). */
function numerator(
  tmp: Temporaries,
  op: string,
  inputs: GlaInputs,
  o: Operands,
  j: number,
  finalState: boolean,
) {
  const given = o.outputs[j];
  const r = glaForward(op, { q: o.queries, k: inputs.k, v: o.values[j] }, o.settings[j], { finalState }, {
    output: given,
  });
  if (!given) tmp.temp(r.output);
  if (r.finalState) tmp.temp(r.finalState);
  return r;
}

/**
 * The normalised forward into `output` (shaped like v, q's dtype), and the final state `[N, H, K, V]`
 * into `finalState` when given.
 */
export function normalisedForward(
  op: string,
  inputs: GlaInputs,
  s: GlaSettings,
  eps: number,
  output: Tensor,
  finalState: Tensor | undefined,
): void {
  using tmp = new Temporaries();
  const o = operands(tmp, op, inputs, s);
  o.ranges.forEach((range, j) => {
    const r = numerator(tmp, op, inputs, o, j, finalState !== undefined);
    normalise(output, range, r.output, eps, o.factor, o.rows, op);
    if (finalState) copyColumns(finalState, range, r.finalState!, [0, range[1] - range[0]], op);
  });
}

/** Where the normalised backward writes: the caller's (or new) dq, dk, dv and optional dInitialState. */
export interface NormalisedGradientTargets {
  dq: Tensor;
  dk: Tensor;
  dv: Tensor;
  dInitialState?: Tensor;
}

/** The normalised backward from `dOutput` (and the final state's gradient `dFinalState`) into `into`. */
export function normalisedBackward(
  op: string,
  inputs: GlaInputs,
  s: GlaSettings,
  eps: number,
  dOutput: Tensor,
  dFinalState: Tensor | undefined,
  into: NormalisedGradientTargets,
): void {
  using tmp = new Temporaries();
  const { q, k } = inputs;
  checkGlaCall(op, inputs, s);
  const o = operands(tmp, op, inputs, s);
  const dQueries: Tensor[] = [];
  const dKeys: Tensor[] = [];
  o.ranges.forEach((range, j) => {
    const w = range[1] - range[0];
    const width = o.values[j].shape[3];
    const num = numerator(tmp, op, inputs, o, j, false).output;
    const dNum = normaliseGradient(tmp, dOutput, range, num, width, eps, o.factor, o.rows, q.dtype, op);
    const dState = dFinalState ? widenedState(tmp, dFinalState, range, width, op) : undefined;
    const g = glaBackward(op, { q: o.queries, k, v: o.values[j] }, o.settings[j], dNum, {
      dFinalState: dState,
      wantDInitialState: into.dInitialState !== undefined,
    });
    for (const t of [g.dq, g.dk, g.dv]) tmp.temp(t);
    if (g.dInitialState) tmp.temp(g.dInitialState);
    dQueries.push(g.dq);
    dKeys.push(g.dk);
    copyColumns(into.dv, range, g.dv, [0, w], op);
    if (into.dInitialState) copyColumns(into.dInitialState, range, g.dInitialState!, [0, w], op);
  });
  const dq = summed(tmp, dQueries);
  if (o.factor === TokenFactor.NONE) into.dq.copyFrom(dq);
  else featureGradient(into.dq, q, dq, "identity", o.factor, o.rows, op);
  into.dk.copyFrom(summed(tmp, dKeys));
}
