/**
 * `GroupedQueryAttentionDenseFwdOp`: shape-agnostic dense GQA for prefill and contiguous decode
 * (Sq != Skv allowed, bottom-right aligned), with causal, windows, softcap and scale. Shapes arrive
 * with each call; the layout is fixed at construction.
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { expectDType, expectSameDevice, expectShape, expectTensor } from "../checks.ts";
import type { DType } from "../dtype.ts";
import type { Layout } from "../layout.ts";
import { Tensor } from "../tensor.ts";
import {
  type MaskOptions,
  type ResolvedMask,
  type ResolvedScore,
  resolveMask,
  resolveScore,
  type ScoreOptions,
} from "./options.ts";
import { fp8Forward } from "./fp8_forward.ts";
import { denseLayout, expectOptions } from "./op_support.ts";
import { type ForwardBuffers, runForward } from "./run.ts";
import { denseSources } from "./sources.ts";
import { batchRows, dequantizeRows, type RopeLayout, rotate } from "./transforms.ts";

/** Options of {@link GroupedQueryAttentionDenseFwdOp}: the layout (required), mask and score options. */
export interface GroupedQueryAttentionDenseFwdOptions extends MaskOptions, ScoreOptions {
  /** Layout of q, k, v and the output: `"bshd"` or `"bhsd"` (required). */
  layout: Extract<Layout, "bshd" | "bhsd">;
  /**
   * Output dtype: for float16 / bfloat16 inputs it must equal theirs (the default); float8_e4m3 inputs
   * need it (float16 or bfloat16).
   */
  dtype?: DType;
  /** `"none"` (default), or `"rope"`: q and k rotated by the RoPE tables each call passes. */
  posEncodingMode?: "none" | "rope";
  /** Rotated width of each head: even, at most D (default D); only with `posEncodingMode: "rope"`. */
  rotaryDim?: number;
  /** `"neox"` (default: dim i pairs with i + rotaryDim / 2) or `"interleaved"` (2i with 2i + 1). */
  ropeLayout?: RopeLayout;
}

/**
 * Dense GQA forward: q `[B, Sq, H, D]`, k and v `[B, Skv, Hkv, D]` (`"bshd"`; `"bhsd"` puts heads
 * before the sequence), float16 or bfloat16, any Sq and Skv. `isCausal` defaults to false. Query row i
 * sits at key position `i + Skv - Sq`; causal admits keys `j <= i + Skv - Sq`, so with Sq > Skv the
 * first `Sq - Skv` rows admit none and return 0. Returns the output, shaped like q (an inference op:
 * no LSE unless `out.lse` is given, no backward).
 *
 * @example
 * ```ts
 * import { GroupedQueryAttentionDenseFwdOp, Tensor } from "@attnkit/attnkit";
 * const op = new GroupedQueryAttentionDenseFwdOp({ layout: "bshd", isCausal: true, softcap: 30 });
 * using q = Tensor.randn([1, 16, 8, 128], { dtype: "bfloat16", seed: 1 }); // 16 new tokens
 * using k = Tensor.randn([1, 200, 2, 128], { dtype: "bfloat16", seed: 2 }); // 200 in context
 * using v = Tensor.randn([1, 200, 2, 128], { dtype: "bfloat16", seed: 3 });
 * using o = op.forward(q, k, v);
 * ```
 */
export class GroupedQueryAttentionDenseFwdOp {
  /** Layout of every call's tensors. */
  readonly layout: Extract<Layout, "bshd" | "bhsd">;
  /** The mask. */
  readonly mask: ResolvedMask;
  /** Scale (undefined: 1 / sqrt(D) of each call) and softcap. */
  readonly score: ResolvedScore;
  /** The requested output dtype, if any. */
  readonly dtype: DType | undefined;
  /** Whether q and k are rotated (RoPE). */
  readonly rope: boolean;
  /** Rotated width (undefined: each call's D). */
  readonly rotaryDim: number | undefined;
  /** The RoPE pairing. */
  readonly ropeLayout: RopeLayout;

  /** Checks the options once. */
  constructor(options: GroupedQueryAttentionDenseFwdOptions) {
    const op = "GroupedQueryAttentionDenseFwdOp";
    options = expectOptions(op, options);
    this.layout = denseLayout(op, options.layout);
    this.mask = resolveMask(op, options);
    this.score = resolveScore(op, options);
    if (options.dtype !== undefined && options.dtype !== "float16" && options.dtype !== "bfloat16") {
      throw invalidArgument(op, `dtype: expected float16 or bfloat16 (the output's), got ${options.dtype}`);
    }
    this.dtype = options.dtype;
    const mode = options.posEncodingMode ?? "none";
    if (mode !== "none" && mode !== "rope") {
      throw invalidArgument(op, `posEncodingMode: expected "none" or "rope", got ${JSON.stringify(mode)}`);
    }
    this.rope = mode === "rope";
    if (!this.rope && (options.rotaryDim !== undefined || options.ropeLayout !== undefined)) {
      throw invalidArgument(
        op,
        `${options.rotaryDim !== undefined ? "rotaryDim" : "ropeLayout"}: only with posEncodingMode: "rope"`,
      );
    }
    const rotary = options.rotaryDim;
    if (rotary !== undefined && !(Number.isInteger(rotary) && rotary >= 2 && rotary % 2 === 0)) {
      throw invalidArgument(op, `rotaryDim: expected an even integer >= 2, got ${String(rotary)}`);
    }
    this.rotaryDim = rotary;
    const ropeLayout = options.ropeLayout ?? "neox";
    if (ropeLayout !== "neox" && ropeLayout !== "interleaved") {
      throw invalidArgument(
        op,
        `ropeLayout: expected "neox" or "interleaved", got ${JSON.stringify(ropeLayout)}`,
      );
    }
    this.ropeLayout = ropeLayout;
  }

  /**
   * Runs the forward: `forward(q, k, v, out?)`, or the positional form of the inputs that float8 and RoPE
   * calls need, `forward(q, k, v, qScale, kScale, vScale, ropeCos, ropeSin, out?)` (pass undefined for
   * those a call does not use). `out.output` (and `out.lse`, which is then written too) may supply
   * buffers. The returned output is the caller's to dispose (it is `out.output` when that was given).
   */
  forward(q: Tensor, k: Tensor, v: Tensor, out?: ForwardBuffers): Tensor;
  /**
   * The forward of float8_e4m3 inputs (`qScale`, `kScale`, `vScale`: float32 `[B, Hkv]`) and of fused RoPE
   * (`ropeCos`, `ropeSin`: `[P, rotaryDim / 2]` in the output dtype, P >= Skv); undefined where unused.
   */
  forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    qScale: Tensor | undefined,
    kScale: Tensor | undefined,
    vScale: Tensor | undefined,
    ropeCos?: Tensor,
    ropeSin?: Tensor,
    out?: ForwardBuffers,
  ): Tensor;
  forward(q: Tensor, k: Tensor, v: Tensor, ...rest: unknown[]): Tensor {
    const op = "GroupedQueryAttentionDenseFwdOp";
    // The short form's fourth argument is a buffers object, the long form's a scale (or undefined).
    const long = rest.length > 1 || rest[0] instanceof Tensor;
    const [qScale, kScale, vScale, ropeCos, ropeSin] =
      (long ? rest.slice(0, 5) : []) as (Tensor | undefined)[];
    const out = (long ? rest[5] : rest[0]) as ForwardBuffers | undefined;
    const fp8 = q instanceof Tensor && q.dtype === "float8_e4m3";
    const outDtype = fp8 ? this.dtype : q?.dtype;
    if (fp8 && this.dtype === undefined) {
      throw invalidArgument(op, "dtype: float8_e4m3 inputs need the output dtype (float16 or bfloat16)");
    }
    if (!fp8 && this.dtype !== undefined && q?.dtype !== undefined && q.dtype !== this.dtype) {
      throw invalidArgument(
        op,
        `dtype: the output dtype ${this.dtype} must equal the input dtype ${q.dtype}`,
      );
    }
    const scales = [qScale, kScale, vScale];
    if (!fp8 && scales.some((s) => s !== undefined)) {
      throw invalidArgument(op, "qScale: the scales are for float8_e4m3 inputs only");
    }
    if (fp8 && scales.some((s) => s === undefined)) {
      throw invalidArgument(op, "qScale, kScale, vScale: all three are required for float8_e4m3 inputs");
    }
    if (!this.rope && (ropeCos !== undefined || ropeSin !== undefined)) {
      throw invalidArgument(op, 'ropeCos: the tables need posEncodingMode: "rope"');
    }
    if (this.rope && (ropeCos === undefined || ropeSin === undefined)) {
      throw invalidArgument(op, 'ropeCos, ropeSin: both are required with posEncodingMode: "rope"');
    }
    if (!fp8 && !this.rope) return this.#run(op, q, k, v, this.layout, out);
    if (out?.lse !== undefined) {
      throw invalidArgument(op, "out.lse: not available with float8 inputs or RoPE");
    }
    if (fp8 && !this.rope) {
      const call = { op, layout: this.layout, mask: this.mask, score: this.score, dtype: outDtype! };
      return fp8Forward(call, q, k, v, scales as Tensor[], out?.output);
    }
    return this.#transformed(op, q, k, v, scales as Tensor[], ropeCos, ropeSin, outDtype!, out, fp8);
  }

  // The forward of q, k, v in `layout`.
  #run(
    op: string,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    layout: Extract<Layout, "bshd" | "bhsd">,
    out?: ForwardBuffers,
  ): Tensor {
    return runForward({
      op,
      ...denseSources(q, k, v, layout),
      mask: this.mask,
      score: this.score,
      out,
    }, false).output;
  }

  // Dequantises (float8) and rotates (RoPE) q and k (v only dequantised) in bshd, then runs the forward.
  #transformed(
    op: string,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    scales: Tensor[],
    ropeCos: Tensor | undefined,
    ropeSin: Tensor | undefined,
    dtype: DType,
    out: ForwardBuffers | undefined,
    fp8: boolean,
  ): Tensor {
    for (const [name, t] of [["q", q], ["k", k], ["v", v]] as const) {
      expectTensor(op, name, t);
      if (t.ndim !== 4) throw invalidArgument(op, `${name}: expected 4 dims (${this.layout}), got ${t.ndim}`);
    }
    // Only the tensors made here are disposed: in bshd the caller's own tensors go straight through.
    const made: Tensor[] = [];
    using _made = { [Symbol.dispose]: () => made.forEach((t) => t.dispose()) };
    const own = (t: Tensor) => (made.push(t), t);
    const bshd = (t: Tensor) => (this.layout === "bshd" ? t : own(t.permute([0, 2, 1, 3])));
    const q4 = bshd(q), k4 = bshd(k), v4 = bshd(v);
    const [B, Sq, H, D] = q4.shape, [Bk, Skv, Hkv] = k4.shape;
    if (Bk !== B || v4.shape.some((n, i) => n !== k4.shape[i]) || k4.shape[3] !== D || H % Hkv !== 0) {
      throw invalidArgument(
        op,
        `q, k, v: expected q [B, Sq, H, D] and k, v [B, Skv, Hkv, D] with Hkv dividing H`,
      );
    }
    if (k.dtype !== q.dtype || v.dtype !== q.dtype) {
      throw invalidArgument(op, `k, v: expected ${q.dtype} like q, got ${k.dtype} and ${v.dtype}`);
    }
    const dequantized = (t: Tensor, scale: Tensor, name: string, S: number, heads: number) => {
      expectTensor(op, name, scale);
      expectDType(op, name, scale, ["float32"]);
      expectShape(op, name, scale, [B, Hkv]);
      expectSameDevice(op, name, scale, q, "q");
      using flat = t.reshape([B * S, heads, D]);
      using wide = dequantizeRows(op, flat, scale, batchRows(B, S), dtype);
      return own(wide.reshape([B, S, heads, D]));
    };
    const qd = fp8 ? dequantized(q4, scales[0], "qScale", Sq, H) : q4;
    const kd = fp8 ? dequantized(k4, scales[1], "kScale", Skv, Hkv) : k4;
    const vd = fp8 ? dequantized(v4, scales[2], "vScale", Skv, Hkv) : v4;
    let qr = qd, kr = kd;
    if (this.rope) {
      const rotary = this.rotaryDim ?? D;
      if (rotary > D) throw invalidArgument(op, `rotaryDim: ${rotary} is more than the head dim ${D}`);
      if (Sq > Skv) {
        throw invalidArgument(
          op,
          `q: RoPE needs Sq <= Skv (query row i sits at key position i + Skv - Sq), got ${Sq} > ${Skv}`,
        );
      }
      for (const [name, t] of [["ropeCos", ropeCos], ["ropeSin", ropeSin]] as const) {
        const table = expectTensor(op, name, t);
        expectShape(op, name, table, ["P", rotary / 2]);
        if (table.shape[0] < Skv) {
          throw invalidArgument(op, `${name}: ${table.shape[0]} positions, fewer than Skv (${Skv})`);
        }
        if (table.dtype !== dtype) {
          throw invalidArgument(op, `${name}: expected the output dtype ${dtype}, got ${table.dtype}`);
        }
        expectSameDevice(op, name, table, q, "q");
      }
      qr = own(rotate(op, qd, ropeCos!, ropeSin!, Skv - Sq, rotary, this.ropeLayout));
      kr = own(rotate(op, kd, ropeCos!, ropeSin!, 0, rotary, this.ropeLayout));
    }
    if (this.layout === "bshd") return this.#run(op, qr, kr, vd, "bshd", out);
    using o = this.#run(op, qr, kr, vd, "bshd");
    const result = o.permute([0, 2, 1, 3]);
    if (out?.output === undefined) return result;
    using _r = result;
    return out.output.copyFrom(result);
  }
}
