/**
 * Where the Gated DeltaNet replay leaves the training op's bits (bench/NOTES_serving.md, seed
 * 770831304 on CUDA): token 102's output of the training op on the whole 150-token sequence, against
 * the chunked forward over tokens 64..102 only, from the training op's state after token 64, run
 * dense (B = 2, T = 39), packed (two sequences of 39 tokens, as the replay runs it), and dense with the
 * rest of the chunk present (tokens 64..127, the row read at 38). Prints the differing elements of
 * each. On a GPU host:
 *
 * ```sh
 * deno run -A tools/probes/replay_drift.ts --seed 770831304 --device cuda
 * ```
 *
 * @module
 */
import { scriptArgs } from "../script_args.ts";
import { chunkGatedDeltaRule, Tensor } from "../../mod.ts";

const args = scriptArgs({
  args: Deno.args,
  options: { seed: { type: "string", default: "770831304" }, device: { type: "string", default: "cuda" } },
}).values;
const seed = Number(args.seed), device = args.device!;
const [B, L, H, HK, K] = [2, 150, 2, 1, 64];
// The inputs of tests/paged_replay.test.ts for this seed.
using q = Tensor.randn([B, L, HK, K], { dtype: "bfloat16", device, seed });
using k = Tensor.randn([B, L, HK, K], { dtype: "bfloat16", device, seed: seed + 1 });
using v = Tensor.randn([B, L, H, K], { dtype: "bfloat16", device, seed: seed + 2 });
using g = Tensor.rand([B, L, H], { device, seed: seed + 3, low: -0.3, high: 0 });
using beta = Tensor.rand([B, L, H], { device, seed: seed + 4 });
using start = Tensor.randn([4, H, K, K], { device, seed: seed + 9, std: 0.1 });
using initialVk = start.indexSelect(0, [3, 1]);
using initial = initialVk.transpose(2, 3).clone();
const o = { layout: "bshd" as const, useQkL2norm: true };

using whole = chunkGatedDeltaRule(q, k, v, g, beta, { ...o, initialState: initial, outputFinalState: true });
// The state after token 64: the training op on the first chunk.
const head = (t: Tensor, a: number, b: number) => t.slice(1, a, b).clone();
using q64 = head(q, 0, 64), k64 = head(k, 0, 64), v64 = head(v, 0, 64), g64 = head(g, 0, 64);
using b64 = head(beta, 0, 64);
using first = chunkGatedDeltaRule(q64, k64, v64, g64, b64, {
  ...o,
  initialState: initial,
  outputFinalState: true,
});
const token = (t: Tensor, row: number) =>
  Array.from(t.slice(1, row, row + 1).clone().toArray() as Float32Array);
const want = token(whole.output, 102);

function report(name: string, got: number[]): void {
  if (got.length !== want.length) throw new Error(`${name}: ${got.length} values, expected ${want.length}`);
  const diff = got.flatMap((x, i) => (Object.is(x, want[i]) ? [] : [`${i}: ${x} vs ${want[i]}`]));
  console.log(
    `${name}: ${diff.length} of ${want.length} differ${
      diff.length ? ` (${diff.slice(0, 4).join("; ")})` : ""
    }`,
  );
}

for (const end of [103, 128]) {
  using qs = head(q, 64, end), ks = head(k, 64, end), vs = head(v, 64, end), gs = head(g, 64, end);
  using bs = head(beta, 64, end);
  using dense = chunkGatedDeltaRule(qs, ks, vs, gs, bs, { ...o, initialState: first.finalState });
  report(`dense tokens 64..${end - 1}`, token(dense.output, 38));
  if (end !== 103) continue;
  // Packed as the replay runs it: the two sequences one after the other in a batch of 1.
  // [2, 39, ...] contiguous is [1, 78, ...] with the second sequence after the first.
  const pack = (t: Tensor) => t.reshape([1, 2 * t.shape[1], ...t.shape.slice(2)]);
  using pq = pack(qs), pk = pack(ks), pv = pack(vs), pg = pack(gs), pb = pack(bs);
  using packed = chunkGatedDeltaRule(pq, pk, pv, pg, pb, {
    ...o,
    initialState: first.finalState,
    cuSeqlens: [0, 39, 78],
  });
  report("packed [39, 39]", [...token(packed.output, 38), ...token(packed.output, 77)]);
}
