// The gated linear family's registry rows in tests/variants.test.ts: each row runs on a case its
// planner sends to it (the decay policy of the row's variant, K = the row's head dim, V not a multiple
// of the 64-column tile, T with a tail chunk, gate spikes), held to the float64 oracle with the
// tolerances of tests/gla_ops_fixtures.ts; the plan of the call must name the row.
import assert from "node:assert/strict";
import { type KernelRow, rowName } from "../build/registry.ts";
import { deviceInfo, type DType, GLADecodeFwdOp, lastPlan, type Tensor } from "../mod.ts";
import { expectClose, GlaCase, type GlaSpec, host, leadingRows, tol } from "./gla_ops_fixtures.ts";
import { poisoned } from "./linear_fixtures.ts";

function expectRan(row: KernelRow, what: string): void {
  const ran = lastPlan()?.kernels.map((k) => k.name) ?? [];
  assert.ok(
    ran.includes(rowName(row)),
    `${rowName(row)} did not run (${what}); the plan was ${JSON.stringify(lastPlan())}`,
  );
}

function spec(row: KernelRow): GlaSpec {
  return {
    fn: row.variant === "scalar" ? "chunkSimpleGla" : "chunkGla",
    B: 2,
    T: 150,
    H: 3,
    K: row.d,
    V: 72,
    dtype: row.dtype as DType,
    spikes: true,
  };
}

/** Runs one row of stage `linear.gla.*` on the CUDA device. */
export function glaExercise(row: KernelRow, seed: number): void {
  if (row.stage === "linear.gla.decode") return decodeExercise(row, seed);
  if (row.variant.startsWith("split")) return stateSplitExercise(row, seed);
  checkCase(row, spec(row), seed);
}

/**
 * The scalar-decay forward on the split state kernel (K = V = 128): the planner gives V tiles of 128 when
 * the sequence-heads fill the GPU, so the heads are sized for the row's tile. Fixed length (TMA loads)
 * with both decays and spikes, packed (cp.async loads, an empty and a one-token sequence, grouped heads)
 * for retention's per-head decay, and linear attention without decay, each with its backward (whose
 * states the plain rows recompute); the normalised rows take linear attention with `normalize`, fixed
 * length and packed.
 */
function stateSplitExercise(row: KernelRow, seed: number): void {
  const sms = deviceInfo("cuda").smCount;
  const base = { K: 128, V: 128, dtype: row.dtype as DType, spikes: true };
  const heads = (sequences: number) => (row.tile === 128 ? Math.ceil(sms / sequences) + 1 : 3);
  if (row.variant === "split_normalized") {
    const linear = { ...base, fn: "chunkLinearAttn", normalize: true } as const;
    checkCase(row, { ...linear, B: 2, T: 150, H: heads(2) }, seed);
    const cuSeqlens = [0, 70, 70, 200, 201];
    checkCase(row, { ...linear, B: 1, T: 260, H: heads(4), cuSeqlens, initialState: false }, seed + 1);
    return;
  }
  checkCase(row, { ...base, fn: "chunkSimpleGla", gGamma: true, B: 2, T: 150, H: heads(2) }, seed);
  const cuSeqlens = [0, 70, 70, 200, 201];
  const H = heads(4) + (heads(4) % 2);
  checkCase(row, { ...base, fn: "chunkRetention", B: 1, T: 260, H, HK: H / 2, cuSeqlens }, seed + 1);
  checkCase(
    row,
    { ...base, fn: "chunkLinearAttn", B: 1, T: 260, H, cuSeqlens, initialState: false },
    seed + 2,
  );
}

function checkCase(row: KernelRow, s: GlaSpec, seed: number): void {
  using c = new GlaCase("cuda", s, seed);
  const t = tol(s.dtype);
  const ref = c.reference();
  // The forward's stages run on the forward; the others on the backward. The plain split kernel runs on
  // both: the backward recomputes its states with it (its output not stored).
  const forward = row.stage === "linear.gla.prep" || row.stage === "linear.gla.pass";
  const backward = !forward || row.variant === "split";
  const what = `${rowName(row)} ${JSON.stringify(s)}`;
  using r = c.forward();
  if (forward) expectRan(row, "forward");
  // Packed calls leave the rows past the last offset unwritten: only the sequences' rows are compared.
  const end = s.cuSeqlens ? s.cuSeqlens[s.cuSeqlens.length - 1] : s.T;
  const rows = (a: ArrayLike<number>) => leadingRows(a, s.B * end, s.H * s.V);
  expectClose(rows(host(r.output)), rows(ref.output), t.output, `output ${what}`);
  expectClose(r.finalState!, ref.finalState, t.state, `final state ${what}`);
  if (!backward) return;
  const { dOutput, dFinalState } = c.cotangents(seed);
  const g = c.referenceBackward(dOutput, dFinalState);
  using grads = c.backward(dOutput, dFinalState);
  expectRan(row, "backward");
  expectClose(grads.dq, g.dq, t.dqkv, `dq ${rowName(row)}`);
  expectClose(grads.dk, g.dk, t.dqkv, `dk ${rowName(row)}`);
  expectClose(grads.dv, g.dv, t.dqkv, `dv ${rowName(row)}`);
  if (grads.dgk) expectClose(grads.dgk, g.dgk, t.dgate, `dgk ${rowName(row)}`);
  if (grads.dg) expectClose(grads.dg, g.dg, t.dgate, `dg ${rowName(row)}`);
  if (c.initialState) {
    expectClose(grads.dInitialState!, g.dInitialState, t.dsmall, `dInitialState ${rowName(row)}`);
  } else {
    assert.equal(grads.dInitialState, undefined, `no initial state, no gradient: ${rowName(row)}`);
  }
}

// One decode step of 3 sequences against the oracle's one-token recurrence.
function decodeExercise(row: KernelRow, seed: number): void {
  const dtype = row.dtype as DType;
  using c = new GlaCase(
    "cuda",
    { fn: "chunkGla", B: 3, T: 1, H: 4, K: 48, V: 40, dtype, spikes: true },
    seed,
  );
  const ref = c.reference();
  const own: Tensor[] = [];
  try {
    const at = (x: Tensor) => {
      const y = x.select(1, 0);
      own.push(y);
      return y;
    };
    const out = { output: poisoned([3, 4, 40], dtype, "cuda") };
    own.push(out.output);
    using state = c.initialState!.clone();
    const r = new GLADecodeFwdOp({ inPlace: true }).forward(at(c.q), at(c.k), at(c.v), at(c.gk!), state, out);
    expectRan(row, "decode");
    expectClose(host(r.output), ref.output, tol(dtype).output, `decode output ${rowName(row)}`);
    expectClose(state, ref.finalState, tol(dtype).state, `decode state ${rowName(row)}`);
  } finally {
    for (const x of own) x.dispose();
  }
}
