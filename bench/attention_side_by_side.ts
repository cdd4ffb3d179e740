/**
 * Side-by-side benchmark of attnkit's softmax attention against PyTorch's
 * `scaled_dot_product_attention` (FlashAttention-2 and cuDNN backends) on the same inputs.
 *
 * It runs `bench/sdpa_attention.py` (PyTorch, on this GPU machine) through `Deno.Command`: that
 * script draws bf16 inputs for each shape of ANCHORS.md, saves them with SDPA's outputs and
 * gradients as .safetensors, and times SDPA (triton's do_bench medians). This script loads the same
 * inputs, times attnkit (CUDA events, median, with a 256 MB L2 flush before each call as do_bench
 * does), prints ms, TFLOP/s (FlashAttention's convention: forward 4 B Hq Sq Skv D, halved when
 * causal; backward 2.5x; forward + backward 3.5x), the ratio to each backend and the max difference
 * from SDPA's output, and writes `<results>/<date>_attention.json` (records `{op, shape, dtype, mode,
 * ms, ref, ref_ms, speedup, tflops}`; op "attention-deterministic" for the backward in the deterministic
 * order, against the same references) and `.md`.
 *
 * @example
 * ```sh
 * ATTNKIT_LIB=lib/libattnkit.so deno run -A bench/attention_side_by_side.ts --results $OUT --commit abc1234
 * ```
 *
 * @module
 */
import { attentionForwardFlops, modeFactor } from "../cli/flops.ts";
import { gitCommit } from "./records.ts";
import { numberOption, scriptArgs } from "../tools/script_args.ts";
import {
  attention,
  attentionBackward,
  compare,
  cudaAvailable,
  deviceInfo,
  GroupedQueryAttentionDenseFwdOp,
  loadSafetensors,
  type SafetensorsContents,
  Tensor,
  timeIt,
} from "../mod.ts";

/** One result row, as recorded in the JSON. */
export interface BenchRecord {
  op: string;
  shape: string;
  dtype: string;
  mode: "fwd" | "bwd" | "fwdbwd";
  /** attnkit's median ms (null when attnkit has no such kernel yet). */
  ms: number | null;
  /** The reference backend. */
  ref: string;
  ref_ms: number | null;
  /** ref_ms / ms (above 1: attnkit is faster). */
  speedup: number | null;
  /** attnkit's TFLOP/s. */
  tflops: number | null;
  /** The reference's TFLOP/s. */
  ref_tflops: number | null;
  /** Max |attnkit - reference| of the output (fwd) or of dq, dk, dv (bwd). */
  max_diff: number | null;
}

interface SdpaShape {
  batch: number;
  seq: number;
  heads: number;
  heads_kv: number;
  dim: number;
  causal: boolean;
  backends: Record<
    string,
    { fwd_ms?: number; bwd_ms?: number; fwdbwd_ms?: number; error?: string; gqa?: string }
  >;
}

interface SdpaTimings {
  gpu: string;
  torch: string;
  shapes: Record<string, SdpaShape>;
}

const MODES = ["fwd", "bwd", "fwdbwd"] as const;

async function runPython(python: string, dir: string, only: string | undefined): Promise<void> {
  const args = ["bench/sdpa_attention.py", "--out", dir];
  if (only) args.push("--only", only);
  const out = await new Deno.Command(python, { args, stdout: "inherit", stderr: "inherit" }).output();
  if (!out.success) throw new Error(`${python} bench/sdpa_attention.py failed (exit ${out.code})`);
}

function fixed(x: number | null, digits = 3): string {
  return x === null ? "n/a" : x.toFixed(digits);
}

if (import.meta.main) {
  const { values } = scriptArgs({
    args: Deno.args,
    options: {
      python: { type: "string", default: "python3" },
      dir: { type: "string", default: "/tmp/attnkit_sdpa" },
      results: { type: "string", default: "bench/results" },
      commit: { type: "string" },
      only: { type: "string" },
      "skip-python": { type: "boolean", default: false },
      iterations: { type: "string", default: "30" },
      // "cpu" checks this script's plumbing on small saved inputs (with --skip-python).
      device: { type: "string", default: "cuda" },
    },
  });
  const device = values.device === "cpu" ? "cpu" : "cuda";
  if (device === "cuda" && !cudaAvailable()) {
    console.error("attention_side_by_side: no CUDA device");
    Deno.exit(1);
  }
  const iterations = numberOption("--iterations", values.iterations);
  if (!values["skip-python"]) await runPython(values.python!, values.dir!, values.only);
  const sdpa: SdpaTimings = JSON.parse(await Deno.readTextFile(`${values.dir}/sdpa_timings.json`));
  const gpu = device === "cuda" ? deviceInfo("cuda").name : "cpu";
  const commit = values.commit ?? gitCommit();
  const date = new Date().toISOString().slice(0, 10);
  // do_bench clears the L2 before every call; so do we (outside the timed region).
  using flush = Tensor.empty([device === "cuda" ? 64 << 20 : 1], { dtype: "float32", device });
  const before = () => void flush.fill(0);

  const records: BenchRecord[] = [];
  const lines: string[] = [];
  for (const [shape, s] of Object.entries(sdpa.shapes)) {
    using file: SafetensorsContents = await loadSafetensors(`${values.dir}/${shape}.safetensors`, {
      device,
    });
    const t = file.tensors;
    const opts = { layout: "bshd", isCausal: s.causal } as const;
    // The inference forward (output only, no LSE), as SDPA's forward is timed.
    const inference = new GroupedQueryAttentionDenseFwdOp(opts);
    const fwdFlops = attentionForwardFlops(s.batch, s.heads, s.seq, s.seq, s.dim, s.causal);

    // Forward: time, then compare with each backend's output.
    using output = Tensor.empty(t.q.shape, { dtype: "bfloat16", device }).fill(NaN);
    using lse = Tensor.empty([s.batch, s.heads, s.seq], { dtype: "float32", device });
    const ours: Record<(typeof MODES)[number], number | null> = { fwd: null, bwd: null, fwdbwd: null };
    const diffs: Record<(typeof MODES)[number], Record<string, number | null>> = {
      fwd: {},
      bwd: {},
      fwdbwd: {},
    };
    attention(t.q, t.k, t.v, { ...opts, out: { output, lse } })[Symbol.dispose]();
    ours.fwd = timeIt(() => inference.forward(t.q, t.k, t.v, { output }), {
      device,
      warmup: 5,
      iterations,
      before,
    }).medianMs;
    for (const backend of Object.keys(s.backends)) {
      const ref = t[`o_${backend}`];
      diffs.fwd[backend] = ref ? compare(output, ref).maxAbs : null;
    }

    // Backward (n/a until attnkit's CUDA backward exists); also in the deterministic order, recorded as
    // op "attention-deterministic" against the same (non-deterministic) references.
    let deterministicMs: number | null = null;
    try {
      using grads = attentionBackward(t.do, t.q, t.k, t.v, output, lse, opts);
      ours.bwd = timeIt(() => attentionBackward(t.do, t.q, t.k, t.v, output, lse, opts)[Symbol.dispose](), {
        device,
        warmup: 3,
        iterations,
        before,
      }).medianMs;
      ours.fwdbwd = timeIt(() => {
        using o = attention(t.q, t.k, t.v, opts);
        o.backward(t.do)[Symbol.dispose]();
      }, { device, warmup: 3, iterations, before }).medianMs;
      const ordered = { ...opts, deterministic: true } as const;
      deterministicMs = timeIt(
        () => attentionBackward(t.do, t.q, t.k, t.v, output, lse, ordered)[Symbol.dispose](),
        { device, warmup: 3, iterations, before },
      ).medianMs;
      const ref = ["dq", "dk", "dv"].map((g) => t[`${g}_sdpa_flash2`]);
      if (ref.every((r) => r !== undefined)) {
        diffs.bwd.sdpa_flash2 = Math.max(
          compare(grads.dq, ref[0]).maxAbs,
          compare(grads.dk, ref[1]).maxAbs,
          compare(grads.dv, ref[2]).maxAbs,
        );
      }
    } catch (e) {
      console.log(
        `${shape}: attnkit backward not run (${e instanceof Error ? e.message.split("\n")[0] : e})`,
      );
    }

    for (const mode of MODES) {
      const flops = fwdFlops * modeFactor("attention", mode);
      for (const [backend, b] of Object.entries(s.backends)) {
        const refMs = b[`${mode}_ms`] ?? null;
        const ms = ours[mode];
        records.push({
          op: "attention",
          shape,
          dtype: "bfloat16",
          mode,
          ms,
          ref: backend,
          ref_ms: refMs,
          speedup: ms !== null && refMs !== null ? refMs / ms : null,
          tflops: ms !== null ? flops / ms / 1e9 : null,
          ref_tflops: refMs !== null ? flops / refMs / 1e9 : null,
          max_diff: diffs[mode][backend] ?? null,
        });
      }
    }
    const bwdFlops = fwdFlops * modeFactor("attention", "bwd");
    for (const [backend, b] of Object.entries(s.backends)) {
      const refMs = b.bwd_ms ?? null;
      records.push({
        op: "attention-deterministic",
        shape,
        dtype: "bfloat16",
        mode: "bwd",
        ms: deterministicMs,
        ref: backend,
        ref_ms: refMs,
        speedup: deterministicMs !== null && refMs !== null ? refMs / deterministicMs : null,
        tflops: deterministicMs !== null ? bwdFlops / deterministicMs / 1e9 : null,
        ref_tflops: refMs !== null ? bwdFlops / refMs / 1e9 : null,
        max_diff: null,
      });
    }
  }

  const header = "| shape | mode | attnkit ms | TFLOP/s | ref | ref ms | ref TFLOP/s | speedup | max diff |";
  lines.push(header, "| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
  for (const r of records) {
    const mode = r.op === "attention" ? r.mode : `${r.mode} (deterministic)`;
    lines.push(
      `| ${r.shape} | ${mode} | ${fixed(r.ms)} | ${fixed(r.tflops, 0)} | ${r.ref} | ${fixed(r.ref_ms)} | ${
        fixed(r.ref_tflops, 0)
      } | ${fixed(r.speedup, 2)} | ${r.max_diff === null ? "n/a" : r.max_diff.toExponential(2)} |`,
    );
  }
  const title =
    `# Softmax attention vs PyTorch SDPA (${date}, ${gpu}, commit ${commit}, torch ${sdpa.torch})`;
  const markdown = [title, "", ...lines, ""].join("\n");
  console.log(markdown);
  await Deno.mkdir(values.results!, { recursive: true });
  const base = `${values.results}/${date}_attention`;
  await Deno.writeTextFile(
    `${base}.json`,
    JSON.stringify({ date, gpu, commit, torch: sdpa.torch, records }, null, 2) + "\n",
  );
  await Deno.writeTextFile(`${base}.md`, markdown);
  console.log(`wrote ${base}.json and ${base}.md`);
}
