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
import { assertClose, type Tensor } from "../mod.ts";

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
