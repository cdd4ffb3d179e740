/**
 * The dense forward of float8_e4m3 inputs as one native call: q, k and v stay in e4m3 with their
 * per-(batch, KV head) scales and the output comes back in 16 bits. On Hopper at head dim 128 both
 * products run on 8-bit tensor cores (`lastPlan().path` = `wgmma_persistent`); elsewhere the native side
 * widens the inputs to the output dtype first (`dequantized`).
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { native, unwrap } from "../../ffi/library.ts";
import { expectDType, expectSameDevice, expectShape, expectTensor } from "../checks.ts";
import type { DType } from "../dtype.ts";
import type { Layout } from "../layout.ts";
import type { Tensor } from "../tensor.ts";
import type { ResolvedMask, ResolvedScore } from "./options.ts";
import { flagsOf, scaleOf } from "./run.ts";
import { bshdDescriptor, outputTensor } from "./sources.ts";

/** What {@link fp8Forward} reads besides the tensors. */
export interface Fp8ForwardCall {
  /** The op's name, for messages. */
  op: string;
  /** Layout of q, k, v and the output. */
  layout: Extract<Layout, "bshd" | "bhsd">;
  /** The mask and score options. */
  mask: ResolvedMask;
  score: ResolvedScore;
  /** The output dtype. */
  dtype: DType;
}

/**
 * Runs the forward of e4m3 `q` `[B, Sq, H, D]`, `k`, `v` `[B, Skv, Hkv, D]` (or bhsd) with float32
 * `[B, Hkv]` scales `[qScale, kScale, vScale]`; returns the output (`output` when given).
 *
 * @example
 * ```ts
 * import { Tensor } from "@attnkit/attnkit";
 * import { fp8Forward } from "./fp8_forward.ts";
 * using q = Tensor.randn([1, 8, 2, 64], { dtype: "float8_e4m3" });
 * using s = Tensor.ones([1, 2]);
 * const mask = { causal: true, windowLeft: -1, windowRight: 0 };
 * using o = fp8Forward(
 *   { op: "demo", layout: "bshd", mask, score: { scale: undefined, softcap: 0 }, dtype: "bfloat16" },
 *   q, q, q, [s, s, s],
 * );
 * console.log(o.dtype); // "bfloat16"
 * ```
 */
export function fp8Forward(
  call: Fp8ForwardCall,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  scales: readonly Tensor[],
  output?: Tensor,
): Tensor {
  const { op, layout } = call;
  const dims = (t: Tensor, name: string) => {
    expectTensor(op, name, t);
    if (t.ndim !== 4) throw invalidArgument(op, `${name}: expected 4 dims (${layout}), got ${t.ndim}`);
    if (t.dtype !== "float8_e4m3") {
      throw invalidArgument(op, `${name}: expected float8_e4m3 like q, got ${t.dtype}`);
    }
    return layout === "bshd" ? t.shape : [t.shape[0], t.shape[2], t.shape[1], t.shape[3]];
  };
  const [B, , H, D] = dims(q, "q"), kd = dims(k, "k"), vd = dims(v, "v");
  const [Bk, , Hkv] = kd;
  if (Bk !== B || vd.some((n, i) => n !== kd[i]) || kd[3] !== D || H % Hkv !== 0) {
    throw invalidArgument(
      op,
      `q, k, v: expected q [B, Sq, H, D] and k, v [B, Skv, Hkv, D] with Hkv dividing H`,
    );
  }
  for (const [name, t] of [["k", k], ["v", v]] as const) expectSameDevice(op, name, t, q, "q");
  ["qScale", "kScale", "vScale"].forEach((name, i) => {
    expectTensor(op, name, scales[i]);
    expectDType(op, name, scales[i], ["float32"]);
    expectShape(op, name, scales[i], [B, Hkv]);
    expectSameDevice(op, name, scales[i], q, "q");
  });
  const out = outputTensor(op, "out.output", output, q.shape, call.dtype, q.device);
  try {
    unwrap(
      native().ak_attention_fwd_fp8(
        bshdDescriptor(q, call, op),
        bshdDescriptor(k, call, op),
        bshdDescriptor(v, call, op),
        scales[0].descriptor(op),
        scales[1].descriptor(op),
        scales[2].descriptor(op),
        scaleOf(call.score, { dim: D }),
        call.score.softcap,
        flagsOf(call.mask),
        call.mask.windowLeft,
        call.mask.windowRight,
        bshdDescriptor(out.tensor, call, op),
      ),
      op,
    );
  } catch (e) {
    if (out.owned) out.tensor.dispose();
    throw e;
  }
  return out.tensor;
}
