// Forward of the delta rule and the gated delta rule (chunked and recurrent) against the float64
// oracle, and against itself: chunked == recurrent, one call == two chained calls, packed ==
// separate calls, grouped heads == repeated heads. Fresh random inputs per test (the seed is printed
// on failure), outputs NaN-poisoned before each run.
//
// Tolerance (relative RMS against float64 fed the same rounded inputs): float16/bfloat16 outputs
// and states 0.005; float32 5e-5, 100x tighter (see tests/linear_fixtures.ts).
import assert from "node:assert/strict";
import {
  chunkDeltaRule,
  chunkGatedDeltaRule,
  type Device,
  type DType,
  recurrentDeltaRule,
  recurrentGatedDeltaRule,
  Tensor,
} from "../mod.ts";
import { deviceTest, withSeed } from "./helpers.ts";
import {
  type CaseSpec,
  DeltaCase,
  expectAgree,
  expectClose,
  expectSame,
  host,
  leadingRows,
  leadingRowsOf,
  pathTolerance,
  poisoned,
  tol,
} from "./linear_fixtures.ts";
import { deltaRuleReference } from "../reference/delta_rule.ts";

type Mode = { recurrent: true } | { recurrent: false; chunkSize: number };

/** Runs the functional forward for a case into poisoned buffers. */
function run(c: DeltaCase, mode: Mode, extra: { initialState?: Tensor; cuSeqlens?: Tensor } = {}) {
  const out = c.forwardBuffers();
  const options = { ...c.options(), ...extra, outputFinalState: true, out };
  const { q, k, v, g, beta } = c;
  if (c.spec.gated) {
    return mode.recurrent
      ? recurrentGatedDeltaRule(q, k, v, g!, beta, options)
      : chunkGatedDeltaRule(q, k, v, g!, beta, { ...options, chunkSize: mode.chunkSize });
  }
  return mode.recurrent
    ? recurrentDeltaRule(q, k, v, beta, options)
    : chunkDeltaRule(q, k, v, beta, { ...options, chunkSize: mode.chunkSize });
}

function modeName(m: Mode): string {
  return m.recurrent ? "recurrent" : `chunk ${m.chunkSize}`;
}

/** Checks a case's output and final state against the oracle. */
function checkAgainstOracle(device: Device, spec: CaseSpec, mode: Mode, seed: number): void {
  using c = new DeltaCase(device, spec, seed);
  const r = run(c, mode);
  const ref = c.reference();
  const t = tol(spec.dtype);
  const what = `${spec.dtype} ${modeName(mode)} ${JSON.stringify(spec)}`;
  if (spec.cuSeqlens) {
    const end = spec.cuSeqlens[spec.cuSeqlens.length - 1];
    expectClose(
      leadingRowsOf(r.output, end),
      leadingRows(ref.output, end, spec.H * spec.V),
      t.output,
      `output (${what})`,
    );
  } else {
    expectClose(r.output, ref.output, t.output, `output (${what})`);
  }
  expectClose(r.finalState!, ref.finalState, t.state, `final state (${what})`);
}

const DTYPES: DType[] = ["float32", "bfloat16", "float16"];

deviceTest(
  "delta rule forward: chunked and recurrent match the float64 oracle (fp32/bf16/fp16, gated or not)",
  async (device) => {
    const specs: Omit<CaseSpec, "dtype">[] = [
      { B: 2, T: 100, H: 4, HK: 2, K: 64, V: 32, gated: true },
      { B: 1, T: 77, H: 3, HK: 1, K: 32, V: 48, gated: false, l2norm: true, scale: 0.3 },
      { B: 2, T: 130, H: 4, HK: 2, K: 64, V: 64, gated: true, l2norm: true },
      { B: 1, T: 130, H: 2, K: 128, V: 64, gated: true, l2norm: true },
    ];
    for (const dtype of DTYPES) {
      for (const [i, spec] of specs.entries()) {
        const modes: Mode[] = [{ recurrent: true }, { recurrent: false, chunkSize: [64, 32, 128, 64][i] }];
        for (const mode of modes) {
          await withSeed((seed) => checkAgainstOracle(device, { ...spec, dtype }, mode, seed));
        }
      }
    }
  },
);

deviceTest("delta rule forward: head dims 64/128/256, K != V and general sizes", async (device) => {
  const specs: CaseSpec[] = [
    { B: 1, T: 90, H: 2, K: 64, V: 128, dtype: "bfloat16", gated: true, l2norm: true },
    { B: 1, T: 100, H: 1, K: 256, V: 256, dtype: "bfloat16", gated: true, l2norm: true },
    { B: 1, T: 70, H: 2, HK: 1, K: 256, V: 64, dtype: "float32", gated: false },
    { B: 2, T: 50, H: 2, K: 128, V: 128, dtype: "float16", gated: true, l2norm: true },
    { B: 1, T: 75, H: 2, K: 48, V: 80, dtype: "bfloat16", gated: true },
    { B: 1, T: 40, H: 1, K: 100, V: 60, dtype: "float32", gated: true, l2norm: true },
  ];
  for (const spec of specs) {
    await withSeed((seed) => checkAgainstOracle(device, spec, { recurrent: false, chunkSize: 64 }, seed));
  }
});

deviceTest("delta rule forward: T = 1, T not a multiple of the chunk, odd head counts", async (device) => {
  const cases: [Omit<CaseSpec, "dtype" | "gated">, number][] = [
    [{ B: 3, T: 1, H: 3, HK: 1, K: 64, V: 64 }, 64],
    [{ B: 1, T: 63, H: 5, K: 64, V: 64 }, 64],
    [{ B: 1, T: 65, H: 3, HK: 3, K: 64, V: 64 }, 64],
    [{ B: 1, T: 65, H: 3, HK: 3, K: 16, V: 32 }, 64],
    [{ B: 2, T: 33, H: 1, K: 32, V: 32 }, 32],
    [{ B: 1, T: 129, H: 1, K: 32, V: 32 }, 128],
    [{ B: 1, T: 127, H: 2, HK: 1, K: 64, V: 64 }, 128],
  ];
  for (const [spec, chunkSize] of cases) {
    for (const gated of [true, false]) {
      await withSeed((seed) =>
        checkAgainstOracle(device, { ...spec, dtype: "bfloat16", gated, l2norm: true }, {
          recurrent: false,
          chunkSize,
        }, seed)
      );
    }
  }
});

deviceTest("delta rule forward: chunked equals recurrent (kernel against kernel)", async (device) => {
  for (const dtype of ["float32", "bfloat16"] as const) {
    await withSeed((seed) => {
      using c = new DeltaCase(
        device,
        { B: 1, T: 150, H: 2, K: 64, V: 64, dtype, gated: true, l2norm: true },
        seed,
      );
      const chunked = run(c, { recurrent: false, chunkSize: 64 });
      const recurrent = run(c, { recurrent: true });
      // fp32: the two orders of summation agree to ~1e-6; bf16: output rounding flips dominate.
      const limit = dtype === "float32" ? 1e-5 : tol(dtype).output;
      expectClose(chunked.output, host(recurrent.output), limit, `${dtype} chunked vs recurrent output`);
      expectClose(
        chunked.finalState!,
        host(recurrent.finalState!),
        limit,
        `${dtype} chunked vs recurrent state`,
      );
    });
  }
});

/** A [B, T, heads, D] host array's tokens [t0, t1) as a new device tensor of `dtype`. */
function tokens(
  values: ArrayLike<number>,
  shape: readonly number[],
  t0: number,
  t1: number,
  dtype: DType,
  device: Device,
): Tensor {
  const [B, T, ...rest] = shape;
  const row = rest.reduce((a, b) => a * b, 1);
  const out = new Float32Array(B * (t1 - t0) * row);
  for (let b = 0; b < B; b++) {
    for (let t = t0; t < t1; t++) {
      for (let i = 0; i < row; i++) out[(b * (t1 - t0) + t - t0) * row + i] = values[(b * T + t) * row + i];
    }
  }
  return Tensor.from(out, { shape: [B, t1 - t0, ...rest], dtype, device });
}

deviceTest("delta rule forward: one call equals two calls chained through the state", async (device) => {
  for (const gated of [true, false]) {
    await withSeed((seed) => {
      const spec: CaseSpec = {
        B: 2,
        T: 128,
        H: 2,
        HK: 1,
        K: 32,
        V: 32,
        dtype: "float32",
        gated,
        l2norm: true,
      };
      using c = new DeltaCase(device, spec, seed);
      const whole = run(c, { recurrent: false, chunkSize: 64 });
      const split = 70;
      const parts = (t0: number, t1: number) => {
        const x = c.hostInputs;
        return {
          q: c.own(tokens(x.q, c.q.shape, t0, t1, "float32", device)),
          k: c.own(tokens(x.k, c.k.shape, t0, t1, "float32", device)),
          v: c.own(tokens(x.v, c.v.shape, t0, t1, "float32", device)),
          g: gated ? c.own(tokens(x.g!, c.g!.shape, t0, t1, "float32", device)) : undefined,
          beta: c.own(tokens(x.beta, c.beta.shape, t0, t1, "float32", device)),
        };
      };
      const call = (p: ReturnType<typeof parts>, h0: Tensor) => {
        const o = { layout: "bshd", initialState: h0, outputFinalState: true, useQkL2norm: true } as const;
        const r = gated
          ? chunkGatedDeltaRule(p.q, p.k, p.v, p.g!, p.beta, o)
          : chunkDeltaRule(p.q, p.k, p.v, p.beta, o);
        c.own(r.output);
        return { output: r.output, finalState: c.own(r.finalState!) };
      };
      const first = call(parts(0, split), c.initialState!);
      const second = call(parts(split, 128), first.finalState);
      const joined = new Float64Array(c.spec.B * 128 * 2 * 32);
      const a = host(first.output), b = host(second.output), row = 2 * 32;
      for (let bb = 0; bb < 2; bb++) {
        joined.set(a.subarray(bb * split * row, (bb + 1) * split * row), bb * 128 * row);
        joined.set(
          b.subarray(bb * (128 - split) * row, (bb + 1) * (128 - split) * row),
          (bb * 128 + split) * row,
        );
      }
      expectClose(whole.output, joined, 1e-5, "chained output");
      expectClose(whole.finalState!, host(second.finalState), 1e-5, "chained final state");
    });
  }
});

deviceTest(
  "delta rule forward: packed sequences equal separate calls (empty, 1, 63, 65 tokens; tail untouched)",
  async (device) => {
    const cu = [0, 0, 1, 64, 129, 129, 150];
    for (const gated of [true, false]) {
      await withSeed((seed) => {
        const spec: CaseSpec = {
          B: 1,
          T: 160,
          H: 2,
          HK: 1,
          K: 64,
          V: 64,
          dtype: "bfloat16",
          gated,
          l2norm: true,
          cuSeqlens: cu,
        };
        checkAgainstOracle(device, spec, { recurrent: false, chunkSize: 64 }, seed);
        using c = new DeltaCase(device, spec, seed);
        const packed = run(c, { recurrent: false, chunkSize: 64 });
        const packedOut = host(packed.output), packedState = host(packed.finalState!);
        const row = spec.H * spec.V, KV = spec.K * spec.V;
        // Rows past the last sequence are left as they were (poisoned).
        assert.ok(packedOut.subarray(150 * row).every(Number.isNaN), "rows past cuSeqlens[N] were written");
        const h0 = c.hostInputs.initialState!;
        for (let n = 0; n + 1 < cu.length; n++) {
          const [t0, t1] = [cu[n], cu[n + 1]];
          const x = c.hostInputs;
          const q = c.own(tokens(x.q, c.q.shape, t0, t1, "bfloat16", device));
          const k = c.own(tokens(x.k, c.k.shape, t0, t1, "bfloat16", device));
          const v = c.own(tokens(x.v, c.v.shape, t0, t1, "bfloat16", device));
          const g = gated ? c.own(tokens(x.g!, c.g!.shape, t0, t1, "float32", device)) : undefined;
          const beta = c.own(tokens(x.beta, c.beta.shape, t0, t1, "float32", device));
          const init = c.own(
            Tensor.from(Float32Array.from(h0.subarray(n * 2 * KV, (n + 1) * 2 * KV)), {
              shape: [1, 2, 64, 64],
              device,
            }),
          );
          const out = poisoned([1, t1 - t0, 2, 64], "bfloat16", device);
          c.own(out);
          const o = {
            layout: "bshd",
            initialState: init,
            outputFinalState: true,
            useQkL2norm: true,
            out: { output: out },
          } as const;
          const r = gated ? chunkGatedDeltaRule(q, k, v, g!, beta, o) : chunkDeltaRule(q, k, v, beta, o);
          c.own(r.finalState!);
          // Same arithmetic per sequence: the packed call must agree to fp32 summation order.
          expectAgree(
            host(out),
            packedOut.subarray(t0 * row, t1 * row),
            pathTolerance("bfloat16"),
            `sequence ${n} output`,
          );
          expectClose(
            r.finalState!,
            packedState.subarray(n * 2 * KV, (n + 1) * 2 * KV),
            pathTolerance("float32"),
            `sequence ${n} state`,
          );
          if (t1 === t0) {
            expectSame(
              host(r.finalState!),
              h0.subarray(n * 2 * KV, (n + 1) * 2 * KV),
              "state passed through",
            );
          }
        }
      });
    }
  },
);

deviceTest("delta rule forward: grouped heads equal repeated heads", async (device) => {
  await withSeed((seed) => {
    const [B, T, H, HK, D] = [2, 70, 6, 2, 64];
    const spec: CaseSpec = { B, T, H, HK, K: D, V: D, dtype: "bfloat16", gated: true, l2norm: true };
    using c = new DeltaCase(device, spec, seed);
    const grouped = run(c, { recurrent: false, chunkSize: 64 });
    // Repeat each q/k head over its H / HK value heads.
    const repeat = (a: ArrayLike<number>) => {
      const out = new Float32Array(B * T * H * D);
      for (let bt = 0; bt < B * T; bt++) {
        for (let h = 0; h < H; h++) {
          for (let i = 0; i < D; i++) {
            out[(bt * H + h) * D + i] = a[(bt * HK + Math.floor(h / (H / HK))) * D + i];
          }
        }
      }
      return c.own(Tensor.from(out, { shape: [B, T, H, D], dtype: "bfloat16", device }));
    };
    const q = repeat(c.hostInputs.q), k = repeat(c.hostInputs.k);
    using r = chunkGatedDeltaRule(q, k, c.v, c.g!, c.beta, { ...c.options(), outputFinalState: true });
    expectAgree(r.output, host(grouped.output), pathTolerance("bfloat16"), "grouped vs repeated output");
    expectClose(
      r.finalState!,
      host(grouped.finalState!),
      pathTolerance("float32"),
      "grouped vs repeated state",
    );
  });
});

deviceTest(
  "delta rule forward: g and beta in bfloat16 or float64, gates with spikes of -20",
  async (device) => {
    for (const gateDtype of ["bfloat16", "float64"] as const) {
      await withSeed((seed) =>
        checkAgainstOracle(
          device,
          { B: 1, T: 80, H: 2, K: 64, V: 64, dtype: "bfloat16", gated: true, l2norm: true, gateDtype },
          { recurrent: false, chunkSize: 64 },
          seed,
        )
      );
    }
    await withSeed((seed) => {
      for (const dtype of ["float32", "bfloat16"] as const) {
        const spec: CaseSpec = { B: 1, T: 100, H: 2, K: 32, V: 32, dtype, gated: true, l2norm: true };
        using c = new DeltaCase(device, spec, seed);
        // Replace g by one with a few spikes of -20 (a near-total reset of the state).
        const g = Float32Array.from(c.hostInputs.g!);
        for (const t of [3, 40, 64, 65, 99]) g[t * 2] = -20;
        const spiky = c.own(Tensor.from(g, { shape: [1, 100, 2], device }));
        const out = c.forwardBuffers();
        chunkGatedDeltaRule(c.q, c.k, c.v, spiky, c.beta, { ...c.options(), outputFinalState: true, out });
        const ref = deltaRuleReference({ ...c.hostInputs, g });
        expectClose(out.output, ref.output, tol(dtype).output, `${dtype} output with gate spikes`);
        expectClose(out.finalState, ref.finalState, tol(dtype).state, `${dtype} state with gate spikes`);
      }
    });
  },
);

deviceTest(
  "delta rule forward: T = 0 passes the state through; no final state unless asked",
  async (device) => {
    await withSeed((seed) => {
      using c = new DeltaCase(
        device,
        { B: 2, T: 0, H: 2, K: 16, V: 16, dtype: "bfloat16", gated: true },
        seed,
      );
      const r = run(c, { recurrent: false, chunkSize: 64 });
      assert.deepEqual(r.output.shape, [2, 0, 2, 16]);
      expectSame(host(r.finalState!), c.hostInputs.initialState!, "state passed through");
    });
    await withSeed((seed) => {
      using c = new DeltaCase(
        device,
        { B: 1, T: 10, H: 1, K: 16, V: 16, dtype: "float32", gated: false },
        seed,
      );
      using r = chunkDeltaRule(c.q, c.k, c.v, c.beta, { layout: "bshd" });
      assert.equal(r.finalState, undefined);
      assert.deepEqual(r.output.shape, [1, 10, 1, 16]);
    });
  },
);

deviceTest(
  "delta rule forward: a diverging recurrence (raw keys, beta in [1.5, 2]) turns non-finite where the oracle overflows",
  async (device) => {
    // With |k|^2 ~ K = 64 and beta ~ 2 every step multiplies the state by about -100, so an fp32 state
    // overflows after ~20 tokens. Documented behaviour: the outputs stay finite and accurate while the
    // oracle's fp32-range state is finite, and every output from shortly after the oracle's overflow
    // on is non-finite (inf or NaN, never finite garbage), as is the final state. The overflow token
    // may differ by a few tokens between the chunked and the recurrent forms and the oracle.
    for (const mode of [{ recurrent: false, chunkSize: 64 }, { recurrent: true }] as Mode[]) {
      for (const dtype of ["float32", "bfloat16"] as const) {
        await withSeed((seed) => {
          const spec: CaseSpec = {
            B: 1,
            T: 100,
            H: 2,
            K: 64,
            V: 16,
            dtype,
            gated: true,
            gateLow: -0.01,
            keyStd: 1,
            betaLow: 1.5,
            betaHigh: 2,
            initialState: false,
          };
          using c = new DeltaCase(device, spec, seed);
          const r = run(c, mode);
          const out = host(r.output);
          const ref = deltaRuleReference({ ...c.hostInputs, roundState: Math.fround });
          const fp32Max = 3.4028234663852886e38;
          for (let h = 0; h < 2; h++) {
            // Value columns of the recurrence evolve independently (S[:, j] only sees v[:, j]), so each
            // column overflows at its own token: from shortly after it, that column is non-finite. The
            // chunked form may turn every column non-finite as early as the first column's overflow (its
            // WY factors mix the tokens of a chunk), so finiteness is required before that token only.
            const at = (a: ArrayLike<number>, t: number, j: number) => a[(t * 2 + h) * 16 + j];
            const inRange = (x: number) => Number.isFinite(x) && Math.abs(x) <= fp32Max;
            const columnOverflow: number[] = [];
            for (let j = 0; j < 16; j++) {
              let col = 0;
              while (col < 100 && inRange(at(ref.output, col, j))) col++;
              assert.ok(
                col > 5 && col < 60,
                `head ${h} column ${j}: the oracle overflows at token ${col} (test setup)`,
              );
              columnOverflow.push(col);
            }
            const overflow = Math.min(...columnOverflow);
            for (let j = 0; j < 16; j++) {
              for (let t = 0; t < 100; t++) {
                const x = at(out, t, j);
                if (t < overflow - 4) {
                  assert.ok(
                    inRange(x),
                    `${
                      modeName(mode)
                    } ${dtype} head ${h} column ${j}: token ${t} is non-finite before the first overflow at ${overflow}`,
                  );
                } else if (t >= columnOverflow[j] + 4) {
                  assert.ok(
                    !Number.isFinite(x),
                    `${
                      modeName(mode)
                    } ${dtype} head ${h} column ${j}: token ${t} holds finite ${x} after its overflow at ${
                      columnOverflow[j]
                    }`,
                  );
                }
              }
            }
            // Before the overflow window the values agree with the oracle (early tokens, well conditioned).
            const early = Math.min(5, overflow - 4);
            const a = out.subarray(0, early * 32).filter((_, i) => Math.floor(i / 16) % 2 === h);
            const e = ref.output.subarray(0, early * 32).filter((_, i) => Math.floor(i / 16) % 2 === h);
            expectClose(a, e, 0.02, `head ${h} early tokens`);
          }
          const state = host(r.finalState!);
          assert.ok(
            state.some((x) => !Number.isFinite(x)),
            "the final state of a diverged recurrence is finite",
          );
        });
      }
    }
  },
);
