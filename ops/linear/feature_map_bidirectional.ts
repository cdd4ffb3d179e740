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
import type { Temporaries } from "./feature_map_features.ts";

/** The phi codes of the native entry (`AK_FMAP_*`); softmax_free maps like the identity. */
const PHI_CODE = { identity: 0, softmax_free: 0, "elu+1": 1, relu: 2 } as const;

/** Whether {@link writeBidirectionalOutput} serves the call. */
export function fusedBidirectionalServes(c: FeatureMapCall): boolean {
  if (c.isCausal) return false;
  if (c.q.device === "cpu") return true;
  const features = c.cosWeight ? 2 * c.q.shape[3] : c.q.shape[3];
  return (c.q.dtype === "bfloat16" || c.q.dtype === "float16") && features % 64 === 0 &&
    c.v.shape[3] % 64 === 0;
}

/** A `[T]` weight as the entry reads it: float32 (tensors are contiguous). */
function weight(scope: Temporaries, t: Tensor | undefined): Tensor | undefined {
  if (!t || t.dtype === "float32") return t;
  return scope.temp(t.cast("float32"));
}

/** Writes the bidirectional output of the call into `out` (shaped like v, the dtype of q). */
export function writeBidirectionalOutput(
  scope: Temporaries,
  c: FeatureMapCall,
  out: Tensor,
  op: string,
): void {
  const tokenDim = c.layout === "bshd" ? 1 : 2;
  const [B, H] = [c.v.shape[0], c.v.shape[3 - tokenDim]];
  const features = c.cosWeight ? 2 * c.q.shape[3] : c.q.shape[3];
  const sums = scope.temp(
    Tensor.empty([B, H, features, c.v.shape[3] + 1], { dtype: "float32", device: c.q.device }),
  );
  const [cos, sin] = [weight(scope, c.cosWeight), weight(scope, c.sinWeight)];
  unwrap(
    native().ak_fmap_bidirectional(
      out.descriptor(op),
      c.q.descriptor(op),
      c.k.descriptor(op),
      c.v.descriptor(op),
      cos ? cos.descriptor(op) : null,
      sin ? sin.descriptor(op) : null,
      sums.descriptor(op),
      PHI_CODE[c.phi],
      c.phi === "softmax_free" ? 0 : 1,
      c.eps,
      tokenDim,
    ),
    op,
  );
}

/** Whether {@link writeBidirectionalGradients} serves the call (the CUDA kernels' backward also needs K a multiple of 64 and V of 64 or 128). */
export function fusedBidirectionalGradServes(c: FeatureMapCall): boolean {
  if (!fusedBidirectionalServes(c)) return false;
  if (c.q.device === "cpu") return true;
  return c.q.shape[3] % 64 === 0 && (c.v.shape[3] === 64 || c.v.shape[3] === 128);
}

/** Writes the gradients of the bidirectional call into `into` from the output's gradient `dO` (cast to the dtype of q). */
export function writeBidirectionalGradients(
  scope: Temporaries,
  c: FeatureMapCall,
  dO: Tensor,
  into: { dq: Tensor; dk: Tensor; dv: Tensor },
  op: string,
): void {
  const tokenDim = c.layout === "bshd" ? 1 : 2;
  const [B, T, H, V] = [c.v.shape[0], c.v.shape[tokenDim], c.v.shape[3 - tokenDim], c.v.shape[3]];
  const features = c.cosWeight ? 2 * c.q.shape[3] : c.q.shape[3];
  const device = c.q.device;
  const f32 = (shape: number[]) => scope.temp(Tensor.empty(shape, { dtype: "float32", device }));
  const sums = f32([B, H, features, V + 1]), dSums = f32([B, H, features, V + 1]);
  const rRows = scope.temp(Tensor.empty([B, H, T, V], { dtype: c.q.dtype, device }));
  const dd = f32([B, H, T]);
  const g = dO.dtype === c.q.dtype ? dO : scope.temp(dO.cast(c.q.dtype));
  const [cos, sin] = [weight(scope, c.cosWeight), weight(scope, c.sinWeight)];
  unwrap(
    native().ak_fmap_bidirectional_grad(
      into.dq.descriptor(op),
      into.dk.descriptor(op),
      into.dv.descriptor(op),
      g.descriptor(op),
      c.q.descriptor(op),
      c.k.descriptor(op),
      c.v.descriptor(op),
      cos ? cos.descriptor(op) : null,
      sin ? sin.descriptor(op) : null,
      sums.descriptor(op),
      dSums.descriptor(op),
      rRows.descriptor(op),
      dd.descriptor(op),
      PHI_CODE[c.phi],
      c.phi === "softmax_free" ? 0 : 1,
      c.eps,
      tokenDim,
    ),
    op,
  );
}
