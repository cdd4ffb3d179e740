/**
 * FLOP and byte counts behind the TFLOP/s and GB/s the command line prints: the conventions of
 * attnkit's side-by-side benchmarks (and of FLA and FlashAttention), so numbers compare across tables.
 *
 * @module
 */
import type { Tensor } from "../mod.ts";

/** The chunk length of the chunked linear forward. */
export const LINEAR_CHUNK = 64;

/** FLOPs of a chunked linear forward over B T H tokens and value heads, with chunk C (default 64). */
export type ChunkedForwardFlops = (
  B: number,
  T: number,
  H: number,
  K: number,
  V: number,
  C?: number,
) => number;

// The chunked forwards' count `B T H (kv K V + ck C K + cv C V)`, given its coefficients.
function chunkedForwardFlops(kv: number, ck: number, cv: number): ChunkedForwardFlops {
  return (B, T, H, K, V, C = LINEAR_CHUNK) => B * T * H * (kv * K * V + ck * C * K + cv * C * V);
}

/**
 * FLOPs of the chunked delta-rule forward (DeltaNet, Gated DeltaNet, and KDA as
 * bench/kda_side_by_side.ts counts it), per token and value head with chunk C (each matrix product
 * counted in full, 2 m n k): K K^T 2CK, w = Aw K 2CK, u = Au V 2CV, W S 2KV, Q S 2KV, Q K^T 2CK,
 * P U 2CV, K^T U 2KV; in all `B T H (6 K V + 6 C K + 4 C V)`.
 */
export const linearForwardFlops: ChunkedForwardFlops = chunkedForwardFlops(6, 6, 4);

/**
 * FLOPs of the gated linear family's chunked forward (GLA, simple GLA, retention, linear attention), as
 * bench/gla_side_by_side.ts counts them per token and value head with chunk C (each product in full,
 * 2 m n k): scores Q K^T 2CK, inter-chunk output Q S 2KV, intra-chunk output P V 2CV, state update
 * K^T V 2KV; in all `B T H (4 K V + 2 C K + 2 C V)`. The kind of decay does not change the count.
 */
export const glaForwardFlops: ChunkedForwardFlops = chunkedForwardFlops(4, 2, 2);

/**
 * FLOPs of feature-map linear attention's forward, as bench/gla_side_by_side.ts counts its "feature"
 * rows: the chunked linear forward without decay it runs on, `B T H (4 K V + 2 C K + 2 C V)` with chunk
 * C, causal or bidirectional alike (the bidirectional form's two passes count once); the feature map
 * and the normaliser, element-wise, count nothing. Forward + backward 3x, as every linear op.
 */
export const featureMapForwardFlops: ChunkedForwardFlops = glaForwardFlops;

/**
 * FLOPs of softmax attention's forward, FlashAttention's convention: `4 B Hq Sq Skv D`, halved when
 * causal.
 */
export function attentionForwardFlops(
  B: number,
  heads: number,
  seqQ: number,
  seqKv: number,
  dim: number,
  causal: boolean,
): number {
  return 4 * B * heads * seqQ * seqKv * dim / (causal ? 2 : 1);
}

/**
 * The multiple of the forward's FLOPs a mode counts: attention's backward 2.5x and forward + backward
 * 3.5x (FlashAttention); the linear forward + backward 3x (the usual convention for
 * matrix-product-bound training), so its backward alone 2x.
 */
export function modeFactor(family: "linear" | "attention", mode: "fwd" | "bwd" | "fwdbwd"): number {
  if (mode === "fwd") return 1;
  if (family === "attention") return mode === "bwd" ? 2.5 : 3.5;
  return mode === "bwd" ? 2 : 3;
}

/**
 * The least bytes one call moves, the benchmarks' GB/s convention: each tensor in `read` read once, each
 * in `written` written once, none twice (caches and re-reads not counted). The command line counts
 * the state decode steps' fp32 state read and written (bench/linear_side_by_side.ts's `2 B H K V 4`)
 * plus the token's inputs (q, k, v and the gates) and o; the pool decode steps' token inputs (the
 * packed row, raw gate and beta, aLog, dtBias, indices and flags) and o, plus each resumed slot read
 * and each named slot written (bench/paged_decode_side_by_side.ts counts the slots alone);
 * attention-decode's K and V cache rows (bench/decode_side_by_side.ts's `2 B Skv Hkv D 2` in bf16) plus
 * q and o; and the forward of the linear ops and fmap as bench/gla_side_by_side.ts states it, q, k, v, o
 * once and the float32 side inputs (gates, beta) once.
 */
export function leastBytes(read: readonly Tensor[], written: readonly Tensor[]): number {
  return [...read, ...written].reduce((sum, t) => sum + t.nbytes, 0);
}
