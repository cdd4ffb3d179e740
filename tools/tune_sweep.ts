/**
 * Times one op on one shape under every value of the tuning keys given (their cross product), on the
 * GPU: what a kernel engineer runs before changing a planner's rule. Each setting's plan is printed
 * with its time; settings that cannot serve the call are reported and skipped. Outputs are compared
 * with the planner's own choice, so a setting that computes something else is flagged.
 *
 * Ops: gdn-fwd, gdn-fwdbwd (the forward saving its states), gdn-bwd-recompute, attn-fwd, attn-bwd.
 * Shapes: B<b>_T<t>_H<h>_D<d> (linear) or B<b>_S<s>_H<h>[_KV<hkv>]_D<d>[_causal] (attention); bf16.
 *
 * @example
 * ```sh
 * deno run -A tools/tune_sweep.ts --op gdn-fwd --shape B2_T16384_H16_D128 \
 *   --keys linear.fwd.state,linear.fwd.state.tile
 * deno run -A tools/tune_sweep.ts --op attn-bwd --shape B8_S2048_H16_D64_causal --keys attention.bwd
 * ```
 *
 * @module
 */
import { parseArgs } from "node:util";
import {
  attention,
  attentionBackward,
  chunkGatedDeltaRule,
  chunkGatedDeltaRuleBackward,
  compare,
  GroupedQueryAttentionDenseFwdOp,
  lastPlan,
  Tensor,
  timeIt,
  tuning,
  withTuning,
} from "../mod.ts";

const device = "cuda";

function parseShape(shape: string): Record<string, number | boolean> {
  const out: Record<string, number | boolean> = {};
  for (const part of shape.split("_")) {
    if (part === "causal") out.causal = true;
    const m = /^([A-Z]+)(\d+)$/.exec(part);
    if (m) out[m[1].toLowerCase()] = Number(m[2]);
  }
  return out;
}

/** The op's call on fresh inputs, and its output (for the comparison). */
function makeOp(op: string, s: Record<string, number | boolean>): { run: () => Tensor; dispose: () => void } {
  const own: Tensor[] = [];
  const t = (x: Tensor) => (own.push(x), x);
  const opt = { dtype: "bfloat16" as const, device };
  const dispose = () => own.forEach((x) => x.dispose());
  if (op.startsWith("gdn")) {
    const B = s.b as number, T = s.t as number, H = s.h as number, D = s.d as number;
    const q = t(Tensor.randn([B, T, H, D], { ...opt, seed: 1 }));
    const k = t(Tensor.randn([B, T, H, D], { ...opt, seed: 2 }));
    const v = t(Tensor.randn([B, T, H, D], { ...opt, seed: 3 }));
    const g = t(Tensor.rand([B, T, H], { device, seed: 4, low: -0.1, high: 0 }));
    const beta = t(Tensor.rand([B, T, H], { device, seed: 5 }));
    const dO = t(Tensor.randn([B, T, H, D], { ...opt, seed: 6 }));
    const o = { layout: "bshd", useQkL2norm: true } as const;
    if (op === "gdn-fwd") return { run: () => chunkGatedDeltaRule(q, k, v, g, beta, o).output, dispose };
    return {
      run: () => {
        using r = op === "gdn-fwdbwd"
          ? chunkGatedDeltaRule(q, k, v, g, beta, { ...o, saveForBackward: true })
          : undefined;
        const grads = chunkGatedDeltaRuleBackward(dO, q, k, v, g, beta, { ...o, saved: r?.saved });
        for (const x of [grads.dk, grads.dv, grads.dbeta, grads.dg]) x?.dispose();
        return grads.dq;
      },
      dispose,
    };
  }
  const B = s.b as number,
    S = s.s as number,
    H = s.h as number,
    D = s.d as number,
    KV = (s.kv as number) ?? H;
  const isCausal = s.causal === true;
  const q = t(Tensor.randn([B, S, H, D], { ...opt, seed: 1 }));
  const k = t(Tensor.randn([B, S, KV, D], { ...opt, seed: 2 }));
  const v = t(Tensor.randn([B, S, KV, D], { ...opt, seed: 3 }));
  const options = { layout: "bshd", isCausal } as const;
  if (op === "attn-fwd") {
    const forward = new GroupedQueryAttentionDenseFwdOp(options); // the output alone, no LSE
    return { run: () => forward.forward(q, k, v), dispose };
  }
  const dO = t(Tensor.randn([B, S, H, D], { ...opt, seed: 4 }));
  const y = attention(q, k, v, { ...options, returnLse: true });
  own.push(y.output, y.lse);
  return {
    run: () => {
      const r = attentionBackward(dO, q, k, v, y.output, y.lse, options);
      r.dk.dispose();
      r.dv.dispose();
      return r.dq;
    },
    dispose,
  };
}

function settings(keys: string[]): Record<string, string>[] {
  const all = Object.fromEntries(tuning().keys.map((k) => [k.name, ["auto", ...k.values]]));
  let out: Record<string, string>[] = [{}];
  for (const key of keys) {
    if (!all[key]) throw new Error(`unknown tuning key ${key}; the keys: ${Object.keys(all).join(", ")}`);
    out = out.flatMap((s) => all[key].map((v) => ({ ...s, [key]: v })));
  }
  return out;
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      op: { type: "string", default: "gdn-fwd" },
      shape: { type: "string", default: "B2_T16384_H16_D128" },
      keys: { type: "string", default: "" },
      iterations: { type: "string", default: "20" },
    },
  });
  const { run, dispose } = makeOp(values.op!, parseShape(values.shape!));
  using flush = Tensor.empty([64 << 20], { dtype: "float32", device });
  using reference = run();
  for (const s of settings(values.keys!.split(",").filter(Boolean))) {
    try {
      const ms = withTuning(s, () => {
        using out = run();
        const plan = lastPlan();
        const d = compare(out, reference);
        if (d.relRms > 1e-2 || d.nanCount > 0) console.log(`  ! output differs from auto's: ${d.relRms}`);
        console.log(`${JSON.stringify(s)}: ${plan?.kernels.map((k) => k.name).join(" + ")}`);
        return timeIt(() => run().dispose(), {
          device,
          iterations: Number(values.iterations),
          before: () => void flush.fill(0),
        }).medianMs;
      });
      console.log(`  ${ms.toFixed(3)} ms`);
    } catch (e) {
      console.log(`${JSON.stringify(s)}: cannot serve: ${(e as Error).message.split("\n")[0]}`);
    }
  }
  dispose();
}
