/**
 * The fused bidirectional feature map: the forward is one native call, two passes over the sequence
 * (every key's features times `[v | 1]` summed into a float32 workspace, then every query's features
 * against those sums, divided in the same pass); the backward one call of five passes over small
 * float32 sums (`ak_fmap_bidirectional_grad`). They serve every bidirectional call on the CPU and, on
 * CUDA, 16-bit data whose feature dim (K, or 2K with cosformer weights) and value dim are multiples
 * of 64 (the backward: K a multiple of 64, V of 64 or 128); other calls take the chunked path.
 *
 * @module
 */
import { native, unwrap } from "../../ffi/library.ts";
import { Tensor } from "../tensor.ts";
import type { FeatureMapCall } from "./feature_map_paths.ts";
import { PHI_CODES, type Temporaries, weightAsRead } from "./feature_map_features.ts";

/** The feature dim the kernels see: K, or 2K with cosformer weights. */
export function featureDim(c: FeatureMapCall): number {
  return c.cosWeight ? 2 * c.q.shape[3] : c.q.shape[3];
}

/** Whether {@link writeBidirectionalOutput} serves the call. */
export function fusedBidirectionalServes(c: FeatureMapCall): boolean {
  if (c.isCausal) return false;
  if (c.q.device === "cpu") return true;
  return (c.q.dtype === "bfloat16" || c.q.dtype === "float16") && featureDim(c) % 64 === 0 &&
    c.v.shape[3] % 64 === 0;
}

/** Whether {@link writeBidirectionalGradients} serves the call (the CUDA kernels' backward also needs K a multiple of 64 and V of 64 or 128). */
export function fusedBidirectionalGradServes(c: FeatureMapCall): boolean {
  if (!fusedBidirectionalServes(c)) return false;
  if (c.q.device === "cpu") return true;
  return c.q.shape[3] % 64 === 0 && (c.v.shape[3] === 64 || c.v.shape[3] === 128);
}

/** The call's sizes in its layout: batch, tokens, heads, value dim, and the dim holding the token. */
function sizesOf(c: FeatureMapCall): { B: number; T: number; H: number; V: number; tokenDim: 1 | 2 } {
  const tokenDim = c.layout === "bshd" ? 1 : 2;
  return { B: c.v.shape[0], T: c.v.shape[tokenDim], H: c.v.shape[3 - tokenDim], V: c.v.shape[3], tokenDim };
}

/** What both entries take beside the gradients' buffers: the inputs, the sums workspace and the settings. */
function entryArgs(scope: Temporaries, c: FeatureMapCall, op: string) {
  const { B, H, V, tokenDim } = sizesOf(c);
  const view = (t: Tensor | undefined) => (t ? weightAsRead(scope, t).descriptor(op) : null);
  const sums = scope.temp(
    Tensor.empty([B, H, featureDim(c), V + 1], { dtype: "float32", device: c.q.device }),
  );
  return {
    q: c.q.descriptor(op),
    k: c.k.descriptor(op),
    v: c.v.descriptor(op),
    cos: view(c.cosWeight),
    sin: view(c.sinWeight),
    sums,
    phi: PHI_CODES[c.phi],
    normalised: c.phi === "softmax_free" ? 0 : 1,
    tokenDim,
  };
}

/** Writes the bidirectional output of the call into `out` (shaped like v, the dtype of q). */
export function writeBidirectionalOutput(
  scope: Temporaries,
  c: FeatureMapCall,
  out: Tensor,
  op: string,
): void {
  const a = entryArgs(scope, c, op);
  const sums = a.sums.descriptor(op);
  unwrap(
    native().ak_fmap_bidirectional(
      out.descriptor(op),
      a.q,
      a.k,
      a.v,
      a.cos,
      a.sin,
      sums,
      a.phi,
      a.normalised,
      c.eps,
      a.tokenDim,
    ),
    op,
  );
}

/** Writes the gradients of the bidirectional call into `into` from the output's gradient `dO` (cast to the dtype of q). */
export function writeBidirectionalGradients(
  scope: Temporaries,
  c: FeatureMapCall,
  dO: Tensor,
  into: { dq: Tensor; dk: Tensor; dv: Tensor },
  op: string,
): void {
  const { B, T, H, V } = sizesOf(c);
  const a = entryArgs(scope, c, op);
  const device = c.q.device;
  const dSums = scope.temp(Tensor.empty(a.sums.shape, { dtype: "float32", device }));
  const rRows = scope.temp(Tensor.empty([B, H, T, V], { dtype: c.q.dtype, device }));
  const dd = scope.temp(Tensor.empty([B, H, T], { dtype: "float32", device }));
  const g = dO.dtype === c.q.dtype ? dO : scope.temp(dO.cast(c.q.dtype));
  unwrap(
    native().ak_fmap_bidirectional_grad(
      into.dq.descriptor(op),
      into.dk.descriptor(op),
      into.dv.descriptor(op),
      g.descriptor(op),
      a.q,
      a.k,
      a.v,
      a.cos,
      a.sin,
      a.sums.descriptor(op),
      dSums.descriptor(op),
      rRows.descriptor(op),
      dd.descriptor(op),
      a.phi,
      a.normalised,
      c.eps,
      a.tokenDim,
    ),
    op,
  );
}
