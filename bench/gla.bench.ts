/**
 * `deno bench` for the gated linear family and feature-map linear attention (`deno task bench`):
 * `chunkGla`, `chunkSimpleGla`, `chunkRetention`, `chunkLinearAttn` and `featureMapLinearAttention`
 * (elu+1, causal), forward and forward + backward, and GLA's decode step (`GLADecodeFwdOp`).
 *
 * Shapes: on the CPU backend B1_T256_H4_D64, decode B8_T1_H4_D64. On CUDA (when present) those of
 * bench/gla_side_by_side.ts: `chunkGla` on flash-linear-attention's six benchmark shapes
 * (../shared/ANCHORS.md), the other four on B4_T4096_H64_D128 and B8_T1024_H8_D64, decode B256_T1_H32_D128.
 *
 * Inputs as that script (and FLA's benchmarks) draw them: bfloat16 BSHD `randn` q, k, v; float32 gates
 * `logsigmoid(randn)`, GLA's per-channel gk clamped at -5, simple GLA's per-head g not; retention's decay
 * is its fixed one, linear attention has none (`normalize` false); decode's fp32 state `randn`, advanced in
 * place. Outputs and gradients go into buffers made once, and each call waits for the device, so a time is
 * the wall time per call. A CUDA case the planner would send to the general path (host copies, minutes a
 * call at these shapes) is listed as ignored instead of run.
 *
 * After the run a table gives TFLOP/s (GFLOP/s below 1 TFLOP/s) with the FLOPs of cli/flops.ts
 * (`glaForwardFlops`, `featureMapForwardFlops`: the side-by-side script's count), chunk C = 64,
 * `B T H (4 K V + 2 C K + 2 C V)`, forward + backward 3x the forward; and for decode GB/s of the fp32
 * state read and written once, `2 B H K V 4` bytes.
 *
 * @module
 */
import { type ChunkedForwardFlops, featureMapForwardFlops, glaForwardFlops } from "../cli/flops.ts";
import {
  chunkGla,
  chunkLinearAttn,
  chunkRetention,
  chunkSimpleGla,
  type Device,
  type DType,
  featureMapLinearAttention,
  type FeatureMapResult,
  GLADecodeFwdOp,
  type GlaResult,
  Tensor,
} from "../mod.ts";
import {
  benchRates,
  type LinearShape,
  linearShapeName,
  type LinearSite,
  linearSites,
  once,
  type RatedCase,
  trainingCases,
} from "./wall_time.ts";

/** The shapes the side-by-side script times the ops other than `chunkGla` on. */
const SCALAR_DECAY_SHAPES = ["B4_T4096_H64_D128", "B8_T1024_H8_D64"];

/** `logsigmoid(randn)` in float32, floored at `floor` where given: the gates of FLA's benchmarks. */
function logsigmoidGate(shape: number[], device: Device, seed: number, floor?: number): Tensor {
  using x = Tensor.randn(shape, { device, seed });
  using s = x.sigmoid();
  if (floor === undefined) return s.log();
  using l = s.log();
  return l.maximum(floor);
}

interface Inputs {
  q: Tensor;
  k: Tensor;
  v: Tensor;
  /** GLA's gate, `[B, T, H, D]`. */
  gk: Tensor;
  /** Simple GLA's gate, `[B, T, H]`. */
  g: Tensor;
  dO: Tensor;
  output: Tensor;
  dq: Tensor;
  dk: Tensor;
  dv: Tensor;
  dgk: Tensor;
  dg: Tensor;
}

function lazyInputs(s: LinearShape, dtype: DType, device: Device): () => Inputs {
  return once(() => {
    const { B, T, H, D } = s;
    const shape = [B, T, H, D];
    const empty = () => Tensor.empty(shape, { dtype, device });
    return {
      q: Tensor.randn(shape, { dtype, device, seed: 1 }),
      k: Tensor.randn(shape, { dtype, device, seed: 2 }),
      v: Tensor.randn(shape, { dtype, device, seed: 3 }),
      gk: logsigmoidGate(shape, device, 4, -5),
      g: logsigmoidGate([B, T, H], device, 5),
      dO: Tensor.randn(shape, { dtype, device, seed: 6 }),
      output: empty(),
      dq: empty(),
      dk: empty(),
      dv: empty(),
      dgk: Tensor.empty(shape, { device }),
      dg: Tensor.empty([B, T, H], { device }),
    };
  });
}

/** One op of the family: its forward into `x.output`, and the buffers its backward writes. */
interface Family {
  op: string;
  flops: ChunkedForwardFlops;
  /** Its decay is per key channel (the planner's `channel`). */
  channel: boolean;
  forward: (x: Inputs) => GlaResult | FeatureMapResult;
  /** The buffers of the gradients its backward returns (the gates' where it has them). */
  grads: (x: Inputs) => Record<string, Tensor>;
}

const layout = "bshd";
const qkvGrads = (x: Inputs) => ({ dq: x.dq, dk: x.dk, dv: x.dv });
const FAMILIES: Family[] = [
  {
    op: "chunkGla",
    flops: glaForwardFlops,
    channel: true,
    forward: (x) => chunkGla(x.q, x.k, x.v, x.gk, { layout, out: { output: x.output } }),
    grads: (x) => ({ ...qkvGrads(x), dgk: x.dgk }),
  },
  {
    op: "chunkSimpleGla",
    flops: glaForwardFlops,
    channel: false,
    forward: (x) => chunkSimpleGla(x.q, x.k, x.v, { layout, g: x.g, out: { output: x.output } }),
    grads: (x) => ({ ...qkvGrads(x), dg: x.dg }),
  },
  {
    op: "chunkRetention",
    flops: glaForwardFlops,
    channel: false,
    forward: (x) => chunkRetention(x.q, x.k, x.v, { layout, out: { output: x.output } }),
    grads: qkvGrads,
  },
  {
    op: "chunkLinearAttn",
    flops: glaForwardFlops,
    channel: false,
    forward: (x) => chunkLinearAttn(x.q, x.k, x.v, { layout, out: { output: x.output } }),
    grads: qkvGrads,
  },
  {
    op: "featureMapLinearAttention(elu+1,causal)",
    flops: featureMapForwardFlops,
    channel: false,
    forward: (x) =>
      featureMapLinearAttention(x.q, x.k, x.v, {
        layout,
        phi: "elu+1",
        isCausal: true,
        out: { output: x.output },
      }),
    grads: qkvGrads,
  },
];

function defineCases(site: LinearSite): RatedCase[] {
  const { device, dtype } = site;
  return site.shapes.flatMap((s) => {
    const shape = linearShapeName(s);
    const inputs = lazyInputs(s, dtype, device);
    // Every op on the CPU shape; on CUDA the side-by-side script's selection.
    const families = device === "cpu" || SCALAR_DECAY_SHAPES.includes(shape)
      ? FAMILIES
      : FAMILIES.filter((f) => f.op === "chunkGla");
    return families.flatMap((f) => {
      const plan = { k: s.D, v: s.D, channel: f.channel };
      return trainingCases({
        op: f.op,
        shape,
        device,
        dtype,
        flops: f.flops(s.B, s.T, s.H, s.D, s.D),
        plans: [{ op: "linear.gla.fwd", ...plan }, { op: "linear.gla.bwd", ...plan }],
        prepare: inputs,
        forward: () => f.forward(inputs())[Symbol.dispose](),
        forwardBackward: () => {
          const x = inputs();
          using r = f.forward(x);
          r.backward(x.dO, { out: f.grads(x) })[Symbol.dispose]();
        },
      });
    });
  });
}

function decodeCase(site: LinearSite): RatedCase {
  const { device, dtype, decode: { B, H, D } } = site;
  const op = new GLADecodeFwdOp({ inPlace: true });
  const inputs = once(() => ({
    q: Tensor.randn([B, H, D], { dtype, device, seed: 1 }),
    k: Tensor.randn([B, H, D], { dtype, device, seed: 2 }),
    v: Tensor.randn([B, H, D], { dtype, device, seed: 3 }),
    gk: logsigmoidGate([B, H, D], device, 4, -5),
    state: Tensor.randn([B, H, D, D], { device, seed: 5 }),
    output: Tensor.empty([B, H, D], { dtype, device }),
  }));
  return {
    name: `GLADecodeFwdOp decode B${B}_T1_H${H}_D${D} ${dtype} [${device}]`,
    device,
    bytes: 2 * B * H * D * D * 4,
    prepare: inputs,
    run: () => {
      const x = inputs();
      // In place: the new state is `state`, the output `output`; nothing to free.
      op.forward(x.q, x.k, x.v, x.gk, x.state, { output: x.output });
    },
  };
}

benchRates(linearSites().flatMap((s) => [...defineCases(s), decodeCase(s)]));
