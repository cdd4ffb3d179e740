// What the sparse-attention tests share (tests/sparse_nsa.test.ts, sparse_dsa_indexer.test.ts,
// sparse_errors.test.ts): the tolerance rule, the output checks and small helpers.
//
// DSA decode, the lightning indexer) against the float64 oracles of reference/sparse_attention.ts, written
// from the spec, on fresh random inputs (withSeed prints the seed of a failure). Outputs are poisoned
// (NaN, or -7 for int32 block lists) through `out`, and some calls go without it.
//
// Tolerance rule. The ops compute in float32 (double on the CPU) from the exact input values and round
// once to the output dtype, so the bound is that one rounding plus float32 arithmetic: elementwise
// |actual - oracle| <= atol + rtol |oracle|, and a relative RMS error (assertClose's relRms):
//   float32 outputs: rtol 2e-5, atol 1e-5, relRms 1e-5;
//   bfloat16 outputs: rtol 8e-3 (one rounding is <= 2^-8 = 3.9e-3 relative), atol max(1e-4, 1.6e-2 RMS),
//     relRms 5e-3;
//   float16 outputs: rtol 1.5e-3 (one rounding is <= 2^-11 = 4.9e-4 relative), atol max(2e-5, 2e-3 RMS),
//     relRms 1e-3;
//   (RMS: of the oracle's outputs. The absolute part covers the tensor-core block, which rounds P to 16 bits
//   before P V as FlashAttention does: errors of about 2^-9 of the output's scale on small elements);
//   lse (float32, any input dtype): |error| <= 2e-5 (1 + |lse|);
//   indexer logits (float32 sums of signed terms): |error| <= 2e-5 |oracle| + (D + H) 2^-23 A, with A
//     the same sum over absolute values (the float32 accumulation bound), and relRms 1e-5;
//   NSA block importance (sums of at most `group` probabilities): 1e-4 absolute.
// Measured on the CPU build over 65 seeds (max |error| / |oracle| over elements above 1e-3 of the
// largest, then the largest relRms): float32 outputs 8.8e-6 / 3.5e-8 (max |error| 1.6e-7, measured
// while the native code still held the scale in float32), bfloat16 3.9e-3 / 2.3e-3, float16 4.9e-4 /
// 2.3e-4, lse 3.1e-7 absolute, logits (bfloat16 and float8_e4m3 inputs) 6e-8 / 4.5e-8; no element used
// more than half of its elementwise bound. The float32 bounds leave room for float32 accumulation on the
// GPU. Where the oracle is exactly 0 (a query that sees nothing) the op must give exactly 0 (and lse 0 for
// the compressed branch); -inf logits exactly -inf.
//
// NSA selection is checked robustly (not against one exact list): each row holds min(S, b + 1) distinct
// blocks <= b then -1; the forced blocks (0, b - 1, b, importance `group`) come first in index order; the
// chosen set is a top-S of the oracle's importance within the tolerance, in nonincreasing order.
import assert from "node:assert/strict";
import {
  assertClose,
  type Device,
  nsaChunkOffsets,
  nsaTokenIndices,
  NSATopkVarlenOp,
  type NSATopkVarlenOptions,
  Tensor,
} from "../mod.ts";
import { nsaBlockImportance, nsaCompressionReference } from "../reference/sparse_attention.ts";

export type FloatDType = "float32" | "bfloat16" | "float16";

export const OUTPUT_TOL: Record<FloatDType, { rtol: number; atol: number; relRms: number }> = {
  float32: { rtol: 2e-5, atol: 1e-5, relRms: 1e-5 },
  bfloat16: { rtol: 8e-3, atol: 1e-4, relRms: 5e-3 },
  float16: { rtol: 1.5e-3, atol: 2e-5, relRms: 1e-3 },
};
export const LSE_TOL = { rtol: 2e-5, atol: 2e-5 };
export const IMPORTANCE_TOL = 1e-4;
export const LOGITS_TOL = { rtol: 2e-5, relRms: 1e-5 };

export const host = (t: Tensor) => Float64Array.from(t.toArray() as Float32Array);
export const ints = (t: Tensor) => Int32Array.from(t.toArray() as Int32Array);
export const offsetsOf = (lengths: number[]) => lengths.reduce((o, l) => [...o, o[o.length - 1] + l], [0]);

/** Asserts the output's elementwise and relative RMS bounds of its dtype against the oracle. */
export function expectOutput(
  name: string,
  actual: Tensor,
  oracle: ArrayLike<number>,
  dtype: FloatDType,
): void {
  const t = OUTPUT_TOL[dtype];
  // 16-bit: the tensor-core block rounds P to 16 bits before P V (as FlashAttention does), an error of
  // that size against the output's scale, so the absolute part follows the oracle's RMS.
  let sum = 0;
  for (let i = 0; i < oracle.length; i++) sum += oracle[i] * oracle[i];
  const rms = oracle.length > 0 ? Math.sqrt(sum / oracle.length) : 0;
  const atol = dtype === "float32" ? t.atol : Math.max(t.atol, P_ROUNDING[dtype] * rms);
  assertClose(actual, oracle, { ...t, atol, name });
}

/** 16-bit outputs: the absolute error allowed per unit of the oracle's RMS (see expectOutput). */
export const P_ROUNDING = { bfloat16: 1.6e-2, float16: 2e-3 };

/** Asserts that every element of `values` in the listed rows (each `width` long) is exactly `want`. */
export function expectRowsExactly(
  name: string,
  values: ArrayLike<number>,
  rows: number[],
  width: number,
  want = 0,
) {
  for (const r of rows) {
    for (let d = 0; d < width; d++) {
      const x = values[r * width + d];
      assert.ok(x === want, `${name}: row ${r} element ${d} is ${x}, not ${want}`);
    }
  }
}

/** A random permutation of 0 .. n - 1. */
export function shuffled(rnd: () => number, n: number): number[] {
  const a = Array.from({ length: n }, (_, i) => i);
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(rnd() * (i + 1));
    [a[i], a[j]] = [a[j], a[i]];
  }
  return a;
}

// The refusals of bad index values (read back by the native code) are checked here for the refusal
// itself; whether their message names the argument as the caller passed it (blockIndices, blockCounts,
// cuSeqlenKs / cuSeqlenKe, chunkOffsets) is the separate test "value refusals name the argument".
export const LIST_REFUSED = /blockIndices|block_indices/;
export const COUNT_REFUSED = /blockCounts|block_counts/;
export const RANGE_REFUSED = /cuSeqlenK[se]|ks, ke/;
export const CHUNKS_REFUSED = /chunkOffsets|chunk_offsets/;

// ---- NSA, block selection ----

/** A block-selection case: packed lengths, heads in groups, head dim, block size, blocks selected. */
export interface TopkCase {
  lengths: number[];
  heads: number;
  group: number;
  dim: number;
  bs: number;
  selected: number;
  dtype: FloatDType;
  out: boolean;
}

/** Runs the compressed branch's oracle for the lse, then the selection op; checks each list robustly. */
export function checkTopk(
  device: Device,
  c: TopkCase,
  seed: number,
  kernelMap?: NSATopkVarlenOptions["kernelMap"],
): void {
  const { heads: H, group: G, dim: K, bs, selected: S, dtype } = c;
  const Hkv = H / G, offsets = offsetsOf(c.lengths), T = offsets[offsets.length - 1];
  using chunkTensor = nsaChunkOffsets(offsets, bs, { device });
  const chunkOffsets = Array.from(ints(chunkTensor)), C = chunkOffsets[chunkOffsets.length - 1];
  using q = Tensor.randn([T, H, K], { dtype, device, seed });
  using kCmp = Tensor.randn([C, Hkv, K], { dtype, device, seed: seed + 1 });
  using tokens = nsaTokenIndices(offsets, { device });
  const qHost = host(q), kHost = host(kCmp);
  const sizes = { offsets, chunkOffsets, heads: H, headsKv: Hkv, blockSize: bs, scale: K ** -0.5 };
  const cmp = nsaCompressionReference({ ...sizes, q: qHost, kCmp: kHost, vCmp: kHost, dimK: K, dimV: K });
  using lseIn = Tensor.from(Float32Array.from(cmp.lse), { shape: [T, H], device });
  const op = new NSATopkVarlenOp({
    seqNum: c.lengths.length,
    cSeqLen: T,
    heads: H,
    dim: K,
    chunkNum: C,
    group: G,
    selectedBlockNum: S,
    bc: bs,
    bs,
    kernelMap,
  });
  using outBuf = c.out ? Tensor.full([T, Hkv, S], -7, { dtype: "int32", device }) : undefined;
  using got = op.forward(q, kCmp, lseIn, offsets, chunkTensor, tokens, outBuf);
  if (c.out) assert.ok(got === outBuf);
  assert.equal(got.dtype, "int32");
  assert.deepEqual(got.shape, [T, Hkv, S]);
  const list = ints(got);
  // The oracle reads the lse the op was given (float32).
  const importance = nsaBlockImportance({ ...sizes, q: qHost, kCmp: kHost, lse: host(lseIn), dim: K });
  const what = JSON.stringify(c);
  c.lengths.forEach((len, n) => {
    for (let i = 0; i < len; i++) {
      const t = offsets[n] + i, b = Math.floor(i / bs);
      for (let hk = 0; hk < Hkv; hk++) {
        const row = Array.from(list.subarray((t * Hkv + hk) * S, (t * Hkv + hk + 1) * S));
        const imp = importance[t * Hkv + hk],
          at = `${what} token ${t} (position ${i}) kv head ${hk}: [${row}]`;
        const m = Math.min(S, b + 1), chosen = row.slice(0, m);
        assert.ok(chosen.every((x) => x >= 0 && x <= b), `blocks outside 0..${b}: ${at}`);
        assert.equal(new Set(chosen).size, m, `repeated block: ${at}`);
        assert.ok(row.slice(m).every((x) => x === -1), `expected -1 after ${m} blocks: ${at}`);
        // Forced blocks (importance exactly G) first, in index order, when every other block is clearly below.
        const forced = [...new Set([0, b - 1, b])].filter((x) => x >= 0).sort((x, y) => x - y);
        const others = Array.from(imp).filter((_, x) => !forced.includes(x));
        if (others.every((v) => v < G - IMPORTANCE_TOL)) {
          const f = Math.min(m, forced.length);
          assert.deepEqual(chosen.slice(0, f), forced.slice(0, f), `forced blocks ${forced} first: ${at}`);
        }
        // A top-m set within the tolerance, in nonincreasing importance.
        const kth = Array.from(imp).sort((x, y) => y - x)[m - 1];
        for (const x of chosen) {
          assert.ok(
            imp[x] >= kth - IMPORTANCE_TOL,
            `block ${x} (${imp[x]}) is not in the top ${m} (${kth}): ${at}`,
          );
        }
        for (let j = 0; j + 1 < m; j++) {
          assert.ok(
            imp[chosen[j]] >= imp[chosen[j + 1]] - IMPORTANCE_TOL,
            `order: block ${chosen[j]} (${imp[chosen[j]]}) before ${chosen[j + 1]} (${
              imp[chosen[j + 1]]
            }): ${at}`,
          );
        }
      }
    }
  });
}
