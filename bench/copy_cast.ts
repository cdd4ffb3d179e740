/**
 * Device copy and cast bandwidth on 1 GiB tensors, for the GPU run: device-to-device copy, casts
 * f32 -> bf16, bf16 -> f32, f32 -> f16, and a BTHD -> BHTD permute. Each op is timed with CUDA
 * events (median of 30 after 5 warm-ups) into preallocated outputs, and reported as GB/s of bytes
 * read + written against the 4252 GB/s copy ceiling measured on the H200. Writes
 * `<out>/<date>_copy_cast.json` and `.md` (default out: bench/results).
 *
 * ```sh
 * deno run -A bench/copy_cast.ts [--out DIR] [--gib 1] [--iterations 30] [--commit SHA] [--device cpu]
 * ```
 *
 * @module
 */
import { numberOption, scriptArgs } from "../tools/script_args.ts";
import { COPY_CEILING_GBPS, gitCommit } from "./records.ts";
import { native, unwrap } from "../ffi/library.ts";
import { cudaAvailable, deviceInfo, dtypeSize, nativeVersion, synchronize, Tensor, timeIt } from "../mod.ts";

/** The H200's device-to-device copy ceiling, bytes read + written (/work/shared/ANCHORS.md). */
/** The bar for copies and casts. */
const BAR = 0.85;

const { values: args } = scriptArgs({
  args: Deno.args,
  options: {
    out: { type: "string", default: new URL("./results", import.meta.url).pathname },
    gib: { type: "string", default: "1" },
    iterations: { type: "string", default: "30" },
    commit: { type: "string" }, // for copies of the tree without .git
    device: { type: "string", default: "cuda" }, // "cpu" for a dry run of the script itself
  },
});

const device = args.device;
if (device !== "cpu" && !cudaAvailable()) {
  console.error(
    "bench/copy_cast.ts needs a CUDA device (this library sees none); --device cpu for a dry run",
  );
  Deno.exit(1);
}

const sourceBytes = Number(args.gib) * 2 ** 30;
const iterations = numberOption("--iterations", args.iterations);

interface Row {
  op: string;
  shape: number[];
  bytesMoved: number;
  medianMs: number;
  minMs: number;
  gbs: number;
  ofCeiling: number;
  bar: "copy/cast" | "report";
}

const rows: Row[] = [];

function measure(op: string, shape: number[], bytesMoved: number, bar: Row["bar"], fn: () => void): void {
  const t = timeIt(fn, { device, warmup: 5, iterations });
  const gbs = bytesMoved / (t.medianMs * 1e6);
  rows.push({
    op,
    shape,
    bytesMoved,
    medianMs: t.medianMs,
    minMs: t.minMs,
    gbs,
    ofCeiling: gbs / COPY_CEILING_GBPS,
    bar,
  });
  console.log(
    `  ${op.padEnd(28)} ${t.medianMs.toFixed(3).padStart(8)} ms ${gbs.toFixed(0).padStart(6)} GB/s`,
  );
}

const gpu = device === "cpu" ? { name: "CPU backend", smCount: 0 } : deviceInfo(device);
console.log(`${gpu.name}, ${gpu.smCount} SMs; ${sourceBytes / 2 ** 30} GiB sources; median of ${iterations}`);

for (
  const [from, to] of [["float32", "float32"], ["float32", "bfloat16"], ["bfloat16", "float32"], [
    "float32",
    "float16",
  ]] as const
) {
  const n = sourceBytes / dtypeSize(from);
  using src = Tensor.randn([n], { dtype: from, device, seed: 1 });
  using dst = Tensor.empty([n], { dtype: to, device });
  const op = from === to ? `copy ${from}` : `cast ${from} -> ${to}`;
  measure(op, [n], n * (dtypeSize(from) + dtypeSize(to)), "copy/cast", () => dst.copyFrom(src));
}

{
  // BTHD -> BHTD of bf16 with D = 128: the layout change attention ops make; timed without the
  // output's allocation (a strided view of the source copied into a preallocated tensor).
  const [B, H, D] = [8, 32, 128];
  const T = sourceBytes / (2 * B * H * D);
  using bthd = Tensor.randn([B, T, H, D], { dtype: "bfloat16", device, seed: 2 });
  using bhtd = Tensor.empty([B, H, T, D], { dtype: "bfloat16", device });
  const view = bthd.viewDescriptor([B, H, T, D], [T * H * D, D, H * D, 1]);
  const out = bhtd.descriptor();
  measure("permute BTHD -> BHTD bf16", [B, T, H, D], 2 * sourceBytes, "report", () => {
    unwrap(native().ak_copy(out, view), "permute");
  });
}
synchronize(device);

const date = new Date().toISOString();
const commit = args.commit ?? gitCommit();
const meets = rows.filter((r) => r.bar === "copy/cast").every((r) => r.ofCeiling >= BAR);
const table = [
  `| op | shape | bytes moved | median ms | min ms | GB/s | % of ${COPY_CEILING_GBPS} GB/s |`,
  "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
  ...rows.map((r) =>
    `| ${r.op} | [${r.shape.join(", ")}] | ${(r.bytesMoved / 2 ** 30).toFixed(2)} GiB | ${
      r.medianMs.toFixed(3)
    } | ` +
    `${r.minMs.toFixed(3)} | ${r.gbs.toFixed(0)} | ${(100 * r.ofCeiling).toFixed(1)}% |`
  ),
].join("\n");
console.log(`\n${table}\n`);
console.log(`copy and casts ${meets ? "meet" : "MISS"} the bar of ${100 * BAR}% of the copy ceiling`);

const stamp = date.slice(0, 10);
await Deno.mkdir(args.out, { recursive: true });
const result = {
  date,
  gpu: gpu.name,
  smCount: gpu.smCount,
  commit,
  attnkit: nativeVersion(),
  deno: Deno.version.deno,
  sourceBytes,
  iterations,
  ceilingGBs: COPY_CEILING_GBPS,
  bar: BAR,
  meetsBar: meets,
  rows,
};
await Deno.writeTextFile(`${args.out}/${stamp}_copy_cast.json`, JSON.stringify(result, null, 2) + "\n");
await Deno.writeTextFile(
  `${args.out}/${stamp}_copy_cast.md`,
  `# Copy and cast bandwidth, ${stamp}\n\n${gpu.name} (${gpu.smCount} SMs), attnkit ${nativeVersion()} at ` +
    `${commit}, ${date}. ${
      device === "cpu" ? "Host clock" : "CUDA events"
    }, median of ${iterations} after 5 warm-ups; GB/s counts bytes read + ` +
    `written; the ceiling is the H200's measured device-to-device copy (${COPY_CEILING_GBPS} GB/s).\n\n${table}\n\n` +
    `Copy and casts ${meets ? "meet" : "miss"} the bar of ${100 * BAR}% of the ceiling.\n`,
);
console.log(`wrote ${args.out}/${stamp}_copy_cast.{json,md}`);
