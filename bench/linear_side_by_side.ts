/**
 * Side-by-side benchmark of attnkit's DeltaNet / Gated DeltaNet against flash-linear-attention (FLA)
 * on the same inputs, over FLA's benchmark shapes (ANCHORS.md), bf16.
 *
 * It runs `bench/fla_linear.py` (PyTorch + FLA, on this GPU machine, FLA's source at `./fla`) through
 * `Deno.Command`: that script draws FLA's benchmark inputs per shape, saves them with FLA's outputs as
 * .safetensors and times `chunk_gated_delta_rule`, `chunk_delta_rule` (forward, forward + backward)
 * and `fused_recurrent_gated_delta_rule` decode (do_bench medians). This script loads the same inputs,
 * times attnkit (CUDA events, median, the L2 flushed before each call as do_bench does), compares the
 * outputs and final states with FLA's, prints a table and writes `<results>/<date>_linear.json`
 * (records `{op, shape, dtype, mode, ms, ref, ref_ms, speedup, tflops, gbps, ...}`) and `.md`.
 *
 * FLOP count of the chunked forward, per token and value head, chunk C = 64 (each product counted in
 * full, 2 m n k):
 *   K K^T 2CK, w = Aw K 2CK, u = Au V 2CV, W S 2KV, Q S 2KV, Q K^T 2CK, P U 2CV, K^T U 2KV
 *   => flops = B T H (6 K V + 6 C K + 4 C V).
 * Forward + backward counts 3x the forward (the usual convention for matrix-product-bound training).
 * GB/s counts the fewest bytes (bf16 rows, fp32 gate vectors g and beta, or beta alone): the forward reads
 * q, k, v and the gate vectors once and writes o, B T H (2 (2 K + 2 V) + 4 a gate vector); forward +
 * backward reads q, k, v, dO and the gate vectors once and writes o, dq, dk, dv and the vectors' gradients,
 * B T H (2 (4 K + 4 V) + 8 a gate vector). Decode is bound by the state: GB/s counts the fp32 state read
 * once and written once, 2 B H K V 4 bytes.
 *
 * With `--skip-fla`, FLA is not run (the Python side only makes the inputs) and `ref_ms` comes from
 * FLA's times on this H200 recorded in ANCHORS.md (`ref` then ends in "(ANCHORS.md)").
 *
 * @example
 * ```sh
 * ATTNKIT_LIB=lib/libattnkit.so deno run -A bench/linear_side_by_side.ts --results $OUT
 * deno run -A bench/linear_side_by_side.ts --ops gdn --only B1_T8192 --skip-fla --no-fwdbwd
 * ```
 *
 * @module
 */
import { linearForwardFlops } from "../cli/flops.ts";
import { numberOption, scriptArgs } from "../tools/script_args.ts";
import { BF16_CEILING_TFLOPS, COPY_CEILING_GBPS } from "./ceilings.ts";
import { gitCommit, plannedKernels } from "./records.ts";
import {
  chunkDeltaRule,
  chunkDeltaRuleBackward,
  chunkGatedDeltaRule,
  chunkGatedDeltaRuleBackward,
  cudaAvailable,
  deviceInfo,
  GatedDeltaNetDecodeFwdOp,
  loadSafetensors,
  Tensor,
  timeIt,
} from "../mod.ts";

/** One result row, as recorded in the JSON. */
export interface LinearRecord {
  /** attnkit's function or op. */
  op: string;
  /** FLA's shape name, e.g. `B4_T2048_H16_D128` (decode: `B256_T1_H32_D128`). */
  shape: string;
  dtype: string;
  mode: "fwd" | "fwdbwd" | "decode" | `decode, ${string} pinned`;
  /** attnkit's median ms (null when not run, e.g. no CUDA backward yet). */
  ms: number | null;
  /** The reference, e.g. `fla.chunk_gated_delta_rule`. */
  ref: string;
  ref_ms: number | null;
  /** ref_ms / ms (above 1: attnkit is faster). */
  speedup: number | null;
  /** attnkit's TFLOP/s (chunked modes). */
  tflops: number | null;
  /** attnkit's GB/s of state read + written (decode). */
  gbps: number | null;
  /** max |ours - FLA| / max |FLA| of the output. */
  max_rel_diff: number | null;
  /** RMS(ours - FLA) / RMS(FLA) of the output. */
  rel_rms: number | null;
  /** Same, of the final (decode: new) state. */
  state_rel_rms: number | null;
  /** Why a row has no attnkit or FLA time. */
  note?: string;
}

interface FlaRecord {
  fwd_ms?: number;
  fwdbwd_ms?: number;
  decode_ms?: number;
  error?: string;
  fwdbwd_error?: string;
}

interface FlaTimings {
  gpu: string;
  torch: string;
  triton: string;
  fla: string;
  shapes: Record<
    string,
    { batch: number; seq: number; heads: number; dim: number; ops: Record<string, FlaRecord> }
  >;
  decode: Record<string, FlaRecord & { batch: number; heads: number; dim: number }>;
}

/** FLA's times on this H200 (ANCHORS.md, 2026-11-29), used with --skip-fla. */
const ANCHOR_MS: Record<string, Record<string, { fwd?: number; fwdbwd?: number }>> = {
  gdn: {
    B1_T8192_H96_D128: { fwd: 1.403 },
    B2_T16384_H16_D128: { fwd: 0.949 },
    B4_T4096_H64_D128: { fwd: 1.714 },
    B8_T2048_H32_D256: { fwd: 2.104 },
    B8_T1024_H8_D64: { fwd: 0.468 },
  },
  delta: {
    B1_T8192_H96_D128: { fwd: 1.575, fwdbwd: 4.524 },
    B2_T16384_H16_D128: { fwd: 1.066, fwdbwd: 3.018 },
    B4_T4096_H64_D128: { fwd: 1.993, fwdbwd: 5.563 },
    B8_T1024_H8_D64: { fwd: 0.624, fwdbwd: 2.209 },
  },
};
const ANCHOR_DECODE_MS: Record<string, number> = { B256_T1_H32_D128: 0.374 };

const CHUNK = 64;
const FLA_NAME = {
  gdn: "fla.chunk_gated_delta_rule",
  delta: "fla.chunk_delta_rule",
  decode: "fla.fused_recurrent_gated_delta_rule",
};
const OUR_NAME = { gdn: "chunkGatedDeltaRule", delta: "chunkDeltaRule", decode: "GatedDeltaNetDecodeFwdOp" };

interface Diff {
  maxRel: number;
  relRms: number;
  nonFinite: number;
}

// Differences of two host arrays (actual vs reference) over their first `count` elements.
function diff(actual: ArrayLike<number>, expected: ArrayLike<number>, count = expected.length): Diff {
  let maxAbs = 0, refMax = 0, sq = 0, refSq = 0, nonFinite = 0;
  for (let i = 0; i < count; i++) {
    const a = actual[i], e = expected[i];
    if (!Number.isFinite(a) || !Number.isFinite(e)) {
      if (!(Number.isNaN(a) && Number.isNaN(e)) && a !== e) nonFinite++;
      continue;
    }
    const d = Math.abs(a - e);
    if (d > maxAbs) maxAbs = d;
    if (Math.abs(e) > refMax) refMax = Math.abs(e);
    sq += d * d;
    refSq += e * e;
  }
  return {
    maxRel: refMax > 0 ? maxAbs / refMax : maxAbs,
    relRms: refSq > 0 ? Math.sqrt(sq / refSq) : Math.sqrt(sq),
    nonFinite,
  };
}

function tensorDiff(actual: Tensor, expected: Tensor | undefined): Diff | null {
  if (!expected) return null;
  return diff(actual.toArray() as Float32Array, expected.toArray() as Float32Array);
}

async function runPython(
  python: string,
  dir: string,
  opts: { ops: string; only?: string; skipFla: boolean; noFwdbwd: boolean },
): Promise<void> {
  const args = ["bench/fla_linear.py", "--out", dir, "--ops", opts.ops];
  if (opts.only) args.push("--only", opts.only);
  if (opts.skipFla) args.push("--skip-fla");
  if (opts.noFwdbwd) args.push("--no-fwdbwd");
  const env = { PYTHONPATH: [Deno.cwd(), Deno.env.get("PYTHONPATH") ?? ""].filter((s) => s).join(":") };
  const out = await new Deno.Command(python, { args, env, stdout: "inherit", stderr: "inherit" }).output();
  if (!out.success) throw new Error(`${python} bench/fla_linear.py failed (exit ${out.code})`);
}

function fixed(x: number | null, digits = 3): string {
  return x === null ? "n/a" : x.toFixed(digits);
}
function sci(x: number | null): string {
  return x === null ? "n/a" : x.toExponential(2);
}
function firstLine(e: unknown): string {
  return (e instanceof Error ? e.message : String(e)).split("\n")[0].slice(0, 200);
}

if (import.meta.main) {
  const { values } = scriptArgs({
    args: Deno.args,
    options: {
      python: { type: "string", default: "python3" },
      dir: { type: "string", default: "/tmp/attnkit_fla" },
      results: { type: "string", default: "bench/results" },
      commit: { type: "string" },
      ops: { type: "string", default: "gdn,delta,decode" },
      only: { type: "string" },
      "skip-python": { type: "boolean", default: false },
      "skip-fla": { type: "boolean", default: false },
      "no-fwdbwd": { type: "boolean", default: false },
      // Forward + backward without the forward's saved states (the backward recomputes them).
      "no-save": { type: "boolean", default: false },
      iterations: { type: "string", default: "20" },
      // "cpu" checks this script's plumbing on small saved inputs (with --skip-python).
      device: { type: "string", default: "cuda" },
    },
  });
  const device = values.device === "cpu" ? "cpu" : "cuda";
  if (device === "cuda" && !cudaAvailable()) {
    console.error("linear_side_by_side: no CUDA device");
    Deno.exit(1);
  }
  const ops = new Set(values.ops!.split(","));
  const iterations = numberOption("--iterations", values.iterations);
  const skipFla = values["skip-fla"]!;
  const noFwdbwd = values["no-fwdbwd"]!;
  const save = !values["no-save"];
  if (!values["skip-python"]) {
    await runPython(values.python!, values.dir!, { ops: values.ops!, only: values.only, skipFla, noFwdbwd });
  }
  const fla: FlaTimings = JSON.parse(await Deno.readTextFile(`${values.dir}/fla_timings.json`));
  const flaRan = fla.fla !== "skipped";
  const gpu = device === "cuda" ? deviceInfo("cuda").name : "cpu";
  const commit = values.commit ?? gitCommit();
  const date = new Date().toISOString().slice(0, 10);
  // do_bench clears the L2 (256 MB) before every call; so do we, outside the timed region.
  using flush = Tensor.empty([device === "cuda" ? 64 << 20 : 1], { dtype: "float32", device });
  const before = () => void flush.fill(0);
  const time = (fn: () => void) => timeIt(fn, { device, warmup: 3, iterations, before }).medianMs;

  const records: LinearRecord[] = [];
  const refOf = (op: "gdn" | "delta", shape: string, mode: "fwd" | "fwdbwd") => {
    if (flaRan) {
      const r = fla.shapes[shape]?.ops[op];
      const ms = mode === "fwd" ? r?.fwd_ms : r?.fwdbwd_ms;
      const error = mode === "fwd" ? r?.error : (r?.fwdbwd_error ?? r?.error);
      return { ref: FLA_NAME[op], ms: ms ?? null, note: error ? `FLA: ${error}` : undefined };
    }
    const ms = ANCHOR_MS[op][shape]?.[mode] ?? null;
    return { ref: `${FLA_NAME[op]} (ANCHORS.md)`, ms, note: undefined };
  };

  for (const shape of Object.keys(fla.shapes)) {
    using file = await loadSafetensors(`${values.dir}/${shape}.safetensors`, { device });
    const t = file.tensors;
    const [B, T, H, D] = t.q.shape;
    const flops = linearForwardFlops(B, T, H, D, D, CHUNK);
    // The fewest bytes (see the header); K = V = D.
    const gateBytes = (op: "gdn" | "delta") => (op === "gdn" ? 8 : 4);
    const fwdBytes = (op: "gdn" | "delta") => B * T * H * (2 * 4 * D + gateBytes(op));
    const fwdbwdBytes = (op: "gdn" | "delta") => B * T * H * (2 * 8 * D + 2 * gateBytes(op));
    for (const op of ["gdn", "delta"] as const) {
      if (!ops.has(op)) continue;
      const gated = op === "gdn";
      const forward = (
        opts: { out?: { output: Tensor }; outputFinalState?: boolean; saveForBackward?: boolean },
      ) =>
        gated
          ? chunkGatedDeltaRule(t.q, t.k, t.v, t.g, t.beta, { layout: "bshd", ...opts })
          : chunkDeltaRule(t.q, t.k, t.v, t.beta, { layout: "bshd", ...opts });
      // Correctness against FLA's output and final state (one call that keeps the final state).
      let outDiff: Diff | null = null, stateDiff: Diff | null = null, ourFwd: number | null = null;
      let note: string | undefined;
      try {
        using r = forward({ outputFinalState: true });
        outDiff = tensorDiff(r.output, t[`o_${op}`]);
        stateDiff = r.finalState ? tensorDiff(r.finalState, t[`ht_${op}`]) : null;
        using output = Tensor.empty(t.v.shape, { dtype: "bfloat16", device });
        ourFwd = time(() => void forward({ out: { output } }));
      } catch (e) {
        note = `attnkit: ${firstLine(e)}`;
      }
      const fwdRef = refOf(op, shape, "fwd");
      records.push({
        op: OUR_NAME[op],
        shape,
        dtype: "bfloat16",
        mode: "fwd",
        ms: ourFwd,
        ref: fwdRef.ref,
        ref_ms: fwdRef.ms,
        speedup: ourFwd !== null && fwdRef.ms !== null ? fwdRef.ms / ourFwd : null,
        tflops: ourFwd !== null ? flops / ourFwd / 1e9 : null,
        gbps: ourFwd !== null ? fwdBytes(op) / ourFwd / 1e6 : null,
        max_rel_diff: outDiff?.maxRel ?? null,
        rel_rms: outDiff?.relRms ?? null,
        state_rel_rms: stateDiff?.relRms ?? null,
        note: note ?? fwdRef.note,
      });
      if (noFwdbwd) continue;
      // Forward + backward as a training step runs them: the forward keeps its per-chunk states for the
      // backward (where it stores them; --no-save: the backward recomputes them from the inputs).
      let ourFb: number | null = null;
      let fbNote: string | undefined;
      try {
        const step = () => {
          using r = forward({ saveForBackward: save });
          const saved = r.saved;
          using grads = gated
            ? chunkGatedDeltaRuleBackward(t.do, t.q, t.k, t.v, t.g, t.beta, { layout: "bshd", saved })
            : chunkDeltaRuleBackward(t.do, t.q, t.k, t.v, t.beta, { layout: "bshd", saved });
          void r, grads;
        };
        step();
        ourFb = time(step);
      } catch (e) {
        fbNote = `attnkit: ${firstLine(e)}`;
      }
      // FLA refuses the gated backward on Hopper: compare with its delta-rule forward + backward.
      let fbRef = refOf(op, shape, "fwdbwd");
      if (gated && fbRef.ms === null) {
        const alt = refOf("delta", shape, "fwdbwd");
        fbRef = { ref: alt.ref, ms: alt.ms, note: fbRef.note ?? alt.note };
      }
      records.push({
        op: OUR_NAME[op],
        shape,
        dtype: "bfloat16",
        mode: "fwdbwd",
        ms: ourFb,
        ref: fbRef.ref,
        ref_ms: fbRef.ms,
        speedup: ourFb !== null && fbRef.ms !== null ? fbRef.ms / ourFb : null,
        tflops: ourFb !== null ? 3 * flops / ourFb / 1e9 : null,
        gbps: ourFb !== null ? fwdbwdBytes(op) / ourFb / 1e6 : null,
        max_rel_diff: null,
        rel_rms: null,
        state_rel_rms: null,
        note: fbNote ?? fbRef.note,
      });
    }
  }

  // Decode: the planner's kernel, then each decode kernel pinned (same inputs, same call).
  for (const [shape, s] of Object.entries(fla.decode)) {
    if (!ops.has("decode")) break;
    using file = await loadSafetensors(`${values.dir}/decode_${shape}.safetensors`, { device });
    const t = file.tensors;
    const [B, H, K, V] = t.state.shape;
    const bytes = 2 * B * H * K * V * 4;
    for (const pin of [undefined, "simt", "tile"]) {
      let ms: number | null = null, outDiff: Diff | null = null, stateDiff: Diff | null = null;
      let note: string | undefined, path = "?";
      try {
        const op = new GatedDeltaNetDecodeFwdOp({ kernelMap: pin ? { "linear.decode": pin } : undefined });
        using output = Tensor.empty([B, H, V], { dtype: "bfloat16", device });
        using newState = Tensor.empty([B, H, K, V], { dtype: "float32", device }).fill(NaN);
        op.forward(t.q, t.k, t.v, t.g, t.beta, t.state, { output, newState });
        path = plannedKernels();
        outDiff = tensorDiff(output, t.o_fla);
        if (t.ht_fla_head) {
          const head = t.ht_fla_head.toArray() as Float32Array;
          stateDiff = diff(newState.toArray() as Float32Array, head, head.length);
        }
        ms = time(() => void op.forward(t.q, t.k, t.v, t.g, t.beta, t.state, { output, newState }));
      } catch (e) {
        note = `attnkit: ${firstLine(e)}`;
      }
      const refMs = flaRan ? (s.decode_ms ?? null) : (ANCHOR_DECODE_MS[shape] ?? null);
      records.push({
        op: OUR_NAME.decode,
        shape,
        dtype: "bfloat16 (fp32 state)",
        mode: pin ? `decode, ${pin} pinned` : "decode",
        ms,
        ref: flaRan ? FLA_NAME.decode : `${FLA_NAME.decode} (ANCHORS.md)`,
        ref_ms: refMs,
        speedup: ms !== null && refMs !== null ? refMs / ms : null,
        tflops: null,
        gbps: ms !== null ? bytes / ms / 1e6 : null,
        max_rel_diff: outDiff?.maxRel ?? null,
        rel_rms: outDiff?.relRms ?? null,
        state_rel_rms: stateDiff?.relRms ?? null,
        note: note ?? (s.error ? `FLA: ${s.error}` : path),
      });
    }
  }

  const lines = [
    "| op | shape | mode | attnkit ms | TFLOP/s | GB/s | ref | ref ms | speedup | max rel diff | rel RMS | state rel RMS | note |",
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
  ];
  for (const r of records) {
    lines.push(
      `| ${r.op} | ${r.shape} | ${r.mode} | ${fixed(r.ms)} | ${fixed(r.tflops, 1)} | ${
        fixed(r.gbps, 0)
      } | ${r.ref} | ${fixed(r.ref_ms)} | ${fixed(r.speedup, 2)} | ${sci(r.max_rel_diff)} | ${
        sci(r.rel_rms)
      } | ${sci(r.state_rel_rms)} | ${r.note ?? ""} |`,
    );
  }
  const title =
    `# DeltaNet / Gated DeltaNet vs FLA (${date}, ${gpu}, commit ${commit}, torch ${fla.torch}, ` +
    `triton ${fla.triton}, fla ${fla.fla})`;
  const markdown = [
    title,
    "",
    "FLOPs of the chunked forward: B T H (6 K V + 6 C K + 4 C V), C = 64; forward + backward: 3x that. " +
    `Decode GB/s: fp32 state read + written. Ceilings (ANCHORS.md): ${BF16_CEILING_TFLOPS} TFLOP/s, ${COPY_CEILING_GBPS} GB/s.`,
    `Forward + backward: ${
      save
        ? "the forward keeps its per-chunk states for the backward (saveForBackward)"
        : "the backward recomputes the per-chunk states (--no-save)"
    }.`,
    "",
    ...lines,
    "",
  ].join("\n");
  console.log(markdown);
  await Deno.mkdir(values.results!, { recursive: true });
  const base = `${values.results}/${date}_linear`;
  await Deno.writeTextFile(
    `${base}.json`,
    JSON.stringify(
      { date, gpu, commit, torch: fla.torch, triton: fla.triton, fla: fla.fla, records },
      null,
      2,
    ) +
      "\n",
  );
  await Deno.writeTextFile(`${base}.md`, markdown);
  console.log(`wrote ${base}.json and ${base}.md`);
}
