// Zero-size calls on every backend: every op, in both directions, with each size that can be zero
// (batch, queries, keys, tokens, a sequence of a packed batch), on the dtypes and head dims whose
// kernels differ. A zero-size call returns empty (or exactly defined) results; it must never reach a
// kernel that cannot take it (TMA descriptors of zero extent, grids of zero blocks).
import assert from "node:assert/strict";
import {
  attention,
  chunkDeltaRule,
  chunkGatedDeltaRule,
  type DType,
  GatedDeltaNetDecodeFwdOp,
  type Layout,
  recurrentGatedDeltaRule,
  Tensor,
} from "../mod.ts";
import { deviceTest, expectNoLeak } from "./helpers.ts";

function values(t: Tensor): number[] {
  return Array.from(t.toArray() as ArrayLike<number>, Number);
}

const HALF: DType[] = ["bfloat16", "float16"];

function order(layout: Layout, b: number, s: number, h: number, d: number): number[] {
  return layout === "bhsd" ? [b, h, s, d] : [b, s, h, d];
}

deviceTest(
  "zero-size attention: empty batch, queries or keys, forward and backward",
  (device) =>
    expectNoLeak(device, () => {
      const dtypes = HALF;
      for (const dtype of dtypes) {
        for (const dim of [64, 128, 256]) {
          for (const layout of ["bshd", "bhsd"] as const) {
            for (const [B, Sq, Skv] of [[0, 4, 4], [1, 0, 4], [2, 5, 0], [1, 0, 0]]) {
              const what = `${dtype} D${dim} ${layout} B${B} Sq${Sq} Skv${Skv}`;
              using q = Tensor.randn(order(layout, B, Sq, 4, dim), { dtype, device, seed: 1 });
              using kv = Tensor.randn(order(layout, B, Skv, 2, dim), { dtype, device, seed: 2 });
              using y = attention(q, kv, kv, { layout, isCausal: Sq > 0, returnLse: true });
              assert.deepEqual(y.output.shape, q.shape, what);
              // A row that sees no key: output 0, LSE -inf.
              if (Skv === 0) {
                assert.ok(values(y.output).every((x) => x === 0), `output ${what}`);
                assert.ok(values(y.lse).every((x) => x === -Infinity), `lse ${what}`);
              }
              using dO = Tensor.randn(q.shape, { dtype, device, seed: 3 });
              using g = y.backward(dO);
              assert.deepEqual(g.dq.shape, q.shape, what);
              assert.deepEqual(g.dk.shape, kv.shape, what);
              assert.ok(values(g.dq).every((x) => x === 0), `dq ${what}`);
              assert.ok(
                values(g.dk).every((x) => x === 0) && values(g.dv).every((x) => x === 0),
                `dk, dv ${what}`,
              );
            }
          }
        }
      }
    }),
);

deviceTest(
  "zero-size attention: packed sequences without queries or keys",
  (device) =>
    expectNoLeak(device, () => {
      for (const dtype of HALF) {
        for (const dim of [64, 128]) {
          using q = Tensor.randn([5, 4, dim], { dtype, device, seed: 4 });
          using kv = Tensor.randn([7, 2, dim], { dtype, device, seed: 5 });
          const cuSeqlensQ = [0, 0, 5, 5];
          const cuSeqlensK = [0, 3, 3, 7];
          using y = attention(q, kv, kv, { layout: "thd", cuSeqlensQ, cuSeqlensK, returnLse: true });
          // Sequence 1 has queries but no keys: its rows are 0.
          assert.ok(values(y.output).every((x) => x === 0), `${dtype} D${dim}: rows without keys`);
          using dO = Tensor.randn(q.shape, { dtype, device, seed: 6 });
          using g = y.backward(dO);
          // Keys of sequences without queries get no gradient.
          assert.ok(
            values(g.dk).every((x) => x === 0) && values(g.dv).every((x) => x === 0),
            `${dtype} D${dim}`,
          );
          assert.ok(values(g.dq).every((x) => x === 0), `${dtype} D${dim} dq`);
        }
      }
    }),
);

deviceTest(
  "zero-size delta rules: empty batch, no tokens, empty packed sequences; decode of no rows",
  (device) =>
    expectNoLeak(device, () => {
      const dtypes: DType[] = device === "cpu" ? ["float32", "bfloat16"] : ["bfloat16", "float16", "float32"];
      for (const dtype of dtypes) {
        for (const D of [64, 128]) {
          for (const layout of ["bshd", "bhsd"] as const) {
            for (const [B, T] of [[0, 5], [1, 0], [2, 0]]) {
              const what = `${dtype} D${D} ${layout} B${B} T${T}`;
              using x = Tensor.randn(order(layout, B, T, 2, D), { dtype, device, seed: 1, std: D ** -0.5 });
              const small = layout === "bhsd" ? [B, 2, T] : [B, T, 2];
              using g = Tensor.rand(small, { device, seed: 2, low: -0.1, high: 0 });
              using beta = Tensor.rand(small, { device, seed: 3 });
              using state = Tensor.randn([B, 2, D, D], { device, seed: 4 });
              for (const run of [chunkGatedDeltaRule, recurrentGatedDeltaRule]) {
                using r = run(x, x, x, g, beta, { layout, initialState: state, outputFinalState: true });
                assert.deepEqual(r.output.shape, x.shape, what);
                // No tokens: the state passes through.
                assert.deepEqual(values(r.finalState!), values(state), `final state ${what}`);
                using grads = r.backward(r.output, { dFinalState: state });
                assert.deepEqual(grads.dq.shape, x.shape, what);
                assert.deepEqual(values(grads.dInitialState!), values(state), `dInitialState ${what}`);
              }
              using plain = chunkDeltaRule(x, x, x, beta, { layout });
              using pg = plain.backward(plain.output);
              assert.equal(pg.dk.numel, x.numel, what);
            }
          }
          // A packed batch whose first and last sequences are empty.
          using q = Tensor.randn([1, 70, 2, D], { dtype, device, seed: 5, std: D ** -0.5 });
          using g = Tensor.rand([1, 70, 2], { device, seed: 6, low: -0.1, high: 0 });
          using beta = Tensor.rand([1, 70, 2], { device, seed: 7 });
          using state = Tensor.randn([3, 2, D, D], { device, seed: 8 });
          using r = chunkGatedDeltaRule(q, q, q, g, beta, {
            layout: "bshd",
            cuSeqlens: [0, 0, 70, 70],
            initialState: state,
            outputFinalState: true,
          });
          const s = values(state), f = values(r.finalState!), n = 2 * D * D;
          assert.deepEqual(
            f.slice(0, n),
            s.slice(0, n),
            `${dtype} D${D}: empty first sequence keeps its state`,
          );
          assert.deepEqual(
            f.slice(2 * n),
            s.slice(2 * n),
            `${dtype} D${D}: empty last sequence keeps its state`,
          );
          using grads = r.backward(r.output, { dFinalState: state });
          assert.ok(values(grads.dq).every(Number.isFinite), `${dtype} D${D} packed dq`);
          const dS = values(grads.dInitialState!);
          assert.deepEqual(
            dS.slice(0, n),
            s.slice(0, n),
            `${dtype} D${D}: dInitialState of an empty sequence`,
          );
        }
      }
      // One decode step of no rows.
      using q0 = Tensor.randn([0, 2, 64], { dtype: "bfloat16", device, seed: 9 });
      using g0 = Tensor.zeros([0, 2], { device });
      using s0 = Tensor.zeros([0, 2, 64, 64], { device });
      const step = new GatedDeltaNetDecodeFwdOp().forward(q0, q0, q0, g0, g0, s0);
      assert.equal(step.output.numel, 0);
      step.output.dispose();
      step.newState.dispose();
    }),
);
