/**
 * `deno bench` for softmax attention (`deno task bench`): forward (with LSE) and backward. On the CPU
 * backend small shapes; on CUDA (when present) the shapes of ../shared/ANCHORS.md, bfloat16, BSHD,
 * the inputs `randn`. Outputs go into buffers made once, and each call waits for the device, so a
 * time is the kernel's wall time per call. After the run a table gives TFLOP/s as FlashAttention
 * counts them: forward `4 B Hq Sq Skv D`, halved when causal; backward 2.5x the forward. (The
 * side-by-side comparison with PyTorch SDPA is bench/attention_side_by_side.ts.)
 *
 * @module
 */
import { attentionForwardFlops } from "../cli/flops.ts";
import {
  attention,
  attentionBackward,
  type AttentionOptions,
  cudaAvailable,
  type Device,
  type DType,
  Tensor,
} from "../mod.ts";
import { benchRates, type RatedCase } from "./wall_time.ts";

interface Shape {
  B: number;
  S: number;
  H: number;
  HKV: number;
  D: number;
  causal: boolean;
}

interface Case extends RatedCase {
  flops: number;
  /** Makes inputs and output buffers (once). */
  prepare: () => void;
}

const ANCHOR_SHAPES: Shape[] = [
  { B: 4, S: 4096, H: 32, HKV: 32, D: 128, causal: true },
  { B: 4, S: 4096, H: 32, HKV: 32, D: 128, causal: false },
  { B: 4, S: 4096, H: 32, HKV: 8, D: 128, causal: true },
  { B: 8, S: 2048, H: 16, HKV: 16, D: 64, causal: true },
];

const CPU_SHAPES: Shape[] = [
  { B: 1, S: 256, H: 4, HKV: 4, D: 64, causal: true },
  { B: 1, S: 256, H: 8, HKV: 2, D: 128, causal: false },
];

/** The name the side-by-side records use, e.g. `B4_S4096_H32_KV32_D128_causal`. */
const shapeName = (s: Shape) => `B${s.B}_S${s.S}_H${s.H}_KV${s.HKV}_D${s.D}${s.causal ? "_causal" : ""}`;

function forwardFlops(s: Shape): number {
  return attentionForwardFlops(s.B, s.H, s.S, s.S, s.D, s.causal);
}

interface Buffers {
  q: Tensor;
  k: Tensor;
  v: Tensor;
  dO: Tensor;
  output: Tensor;
  lse: Tensor;
  dq: Tensor;
  dk: Tensor;
  dv: Tensor;
}

// Inputs and outputs, made on first use (so only the benchmarks that run allocate).
function lazyBuffers(s: Shape, dtype: DType, device: Device): () => Buffers {
  let x: Buffers | undefined;
  return () => {
    if (x) return x;
    const qShape = [s.B, s.S, s.H, s.D], kvShape = [s.B, s.S, s.HKV, s.D];
    const q = Tensor.randn(qShape, { dtype, device, seed: 1 });
    const k = Tensor.randn(kvShape, { dtype, device, seed: 2 });
    const v = Tensor.randn(kvShape, { dtype, device, seed: 3 });
    const output = Tensor.empty(qShape, { dtype, device });
    const lse = Tensor.empty([s.B, s.H, s.S], { device });
    attention(q, k, v, { layout: "bshd", isCausal: s.causal, out: { output, lse } })[Symbol.dispose]();
    x = {
      q,
      k,
      v,
      dO: Tensor.randn(qShape, { dtype, device, seed: 4 }),
      output,
      lse,
      dq: Tensor.empty(qShape, { dtype, device }),
      dk: Tensor.empty(kvShape, { dtype, device }),
      dv: Tensor.empty(kvShape, { dtype, device }),
    };
    return x;
  };
}

function defineCases(device: Device, shapes: Shape[], dtype: DType): Case[] {
  const cases: Case[] = [];
  for (const s of shapes) {
    const buffers = lazyBuffers(s, dtype, device);
    const options: AttentionOptions = { layout: "bshd", isCausal: s.causal };
    cases.push({
      name: `attention fwd ${shapeName(s)} ${dtype} [${device}]`,
      device,
      flops: forwardFlops(s),
      prepare: buffers,
      run: () => {
        const x = buffers();
        attention(x.q, x.k, x.v, { ...options, out: { output: x.output, lse: x.lse } })[Symbol.dispose]();
      },
    });
    cases.push({
      name: `attention bwd ${shapeName(s)} ${dtype} [${device}]`,
      device,
      flops: 2.5 * forwardFlops(s),
      prepare: buffers,
      run: () => {
        const x = buffers();
        attentionBackward(x.dO, x.q, x.k, x.v, x.output, x.lse, {
          ...options,
          out: { dq: x.dq, dk: x.dk, dv: x.dv },
        })[Symbol.dispose]();
      },
    });
  }
  return cases;
}

const cases = defineCases("cpu", CPU_SHAPES, "bfloat16");
if (cudaAvailable()) cases.push(...defineCases("cuda", ANCHOR_SHAPES, "bfloat16"));

benchRates(cases);
