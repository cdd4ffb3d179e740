// Stress test of the shared-memory hand-offs in the Hopper attention backward kernels. compute-sanitizer's
// racecheck reports a write-after-read hazard between the consumers' LSE / D reads and the producer's
// bulk copies into the same stage (csrc/attention/bwd/sm90.cuh explains the mbarrier that orders
// them). Were the ordering wrong, a stage would be overwritten while it is read and dK, dV (which have
// no atomics: one block owns each key tile) would change from run to run. Many query tiles per block
// cycle every stage many times; every run must give the first run's bits.
import assert from "node:assert/strict";
import { attention, kernels, lastPlan, Tensor, withTuning } from "../mod.ts";
import { type AttentionCase, functionalBackward, makeInputs } from "./attention_cases.ts";
import { expectNoLeak, HAS_CUDA } from "./helpers.ts";
import { expandRows, rowName } from "../build/registry.ts";
import { REGISTRIES } from "../build/registries.ts";

const DEVICE = "cuda";
const RUNS = 24;
const RUNNABLE = new Set(HAS_CUDA ? kernels(DEVICE).filter((k) => k.runnable).map((k) => k.name) : []);
// The Hopper backward rows (one test per head dim and variant, bf16), from the registry.
const ROWS = expandRows(REGISTRIES).filter((r) =>
  r.stage === "attention.bwd" && r.arch === "sm90a" && r.dtype === "bfloat16"
);

function bits(t: Tensor): Uint16Array {
  return t.toRawBits();
}

for (const row of ROWS) {
  const { variant, d: dim } = row;
  {
    const name = rowName(row);
    Deno.test({
      name: `attention backward ${name}: ${RUNS} runs give the same dK, dV bits [cuda]`,
      ignore: !RUNNABLE.has(name),
      fn: () =>
        expectNoLeak(DEVICE, () => {
          const c: AttentionCase = {
            dtype: "bfloat16",
            heads: 2,
            headsKv: 2,
            dim,
            batch: 1,
            seqQ: 2048,
            seqKv: 256,
            causal: false,
          };
          using inputs = makeInputs(DEVICE, c, 20261201 + dim);
          using dOut = Tensor.randn(inputs.q.shape, { dtype: c.dtype, device: DEVICE, seed: 7 + dim });
          using fwd = attention(inputs.q, inputs.k, inputs.v, { ...inputs.options, returnLse: true });
          let first: { dk: Uint16Array; dv: Uint16Array } | undefined;
          withTuning({ "attention.bwd": variant }, () => {
            for (let run = 0; run < RUNS; ++run) {
              using dq = Tensor.empty(inputs.q.shape, { dtype: c.dtype, device: DEVICE });
              using dk = Tensor.empty(inputs.k.shape, { dtype: c.dtype, device: DEVICE });
              using dv = Tensor.empty(inputs.k.shape, { dtype: c.dtype, device: DEVICE });
              dk.fill(NaN);
              dv.fill(NaN);
              functionalBackward(inputs, { output: fwd.output, lse: fwd.lse, dOut, deterministic: false }, {
                dq,
                dk,
                dv,
              });
              if (run === 0) {
                const ran = lastPlan()?.kernels.map((k) => k.name) ?? [];
                assert.ok(ran.some((n) => n.startsWith(`attention.bwd.${variant}<`)), JSON.stringify(ran));
                first = { dk: bits(dk), dv: bits(dv) };
                continue;
              }
              assert.deepStrictEqual(bits(dk), first!.dk, `dk of run ${run} differs from run 0`);
              assert.deepStrictEqual(bits(dv), first!.dv, `dv of run ${run} differs from run 0`);
            }
          });
        }),
    });
  }
}
