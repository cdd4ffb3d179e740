/**
 * `deno bench` for Kimi Delta Attention (`deno task bench`): `chunkKda` forward and forward + backward,
 * and the serving decode step `recurrentKdaDecode` on a paged state pool.
 *
 * Shapes: on the CPU backend B1_T256_H4_D64, decode a pool of 16 slots, B 8, H 4, K = V = 64. On CUDA
 * (when present) those of the recorded benchmarks: `chunkKda` on bench/kda_side_by_side.ts's three
 * (B4_T2048_H16_D128, B1_T8192_H96_D128, B2_T16384_H16_D128), decode on bench/paged_decode_side_by_side.ts's
 * (1024 slots, B 256, H 32, K = V = 128).
 *
 * Inputs as those scripts draw them, bfloat16: q, v `randn`, k `randn` with std `D^-0.5`, the gate
 * `boundGate(randn)` with aLog and dtBias zero (`-5 sigmoid(raw)`, float32), beta uniform in [0, 1)
 * (float32), BSHD. Decode: the packed `[q | k | v]` row, the raw gate and beta projections `randn`, aLog
 * and dtBias zero, the fp32 pool `randn` (std 0.1), sequence b on slot b + 1, advanced in place, indices
 * checked (the default call). Outputs and gradients go into buffers made once, and each call waits for the
 * device, so a time is the wall time per call. A CUDA case the planner would send to the general path
 * (host copies, minutes a call at these shapes) is listed as ignored instead of run.
 *
 * After the run a table gives TFLOP/s (GFLOP/s below 1 TFLOP/s) with the FLOPs of cli/flops.ts
 * (`linearForwardFlops`, the delta rule's count, as bench/kda_side_by_side.ts counts KDA), chunk C = 64,
 * `B T H (6 K V + 6 C K + 4 C V)`, forward + backward 3x the forward; and for decode GB/s of the fp32
 * state of each sequence's slot read and written once, `2 B H K V 4` bytes.
 *
 * @module
 */
import { linearForwardFlops } from "../cli/flops.ts";
import { boundGate, chunkKda, type Device, type DType, recurrentKdaDecode, Tensor } from "../mod.ts";
import {
  benchRates,
  FLA_SHAPES,
  type LinearShape,
  linearShapeName,
  type LinearSite,
  linearSites,
  once,
  type RatedCase,
  trainingCases,
} from "./wall_time.ts";

/** The shapes bench/kda_side_by_side.ts times `chunkKda` on. */
const KDA_SHAPES = ["B4_T2048_H16_D128", "B1_T8192_H96_D128", "B2_T16384_H16_D128"];

function lazyInputs(s: LinearShape, dtype: DType, device: Device) {
  return once(() => {
    const { B, T, H, D } = s;
    const shape = [B, T, H, D];
    using raw = Tensor.randn(shape, { dtype, device, seed: 9 });
    using aLog = Tensor.zeros([H], { device });
    using dtBias = Tensor.zeros([H, D], { device });
    const empty = () => Tensor.empty(shape, { dtype, device });
    return {
      q: Tensor.randn(shape, { dtype, device, seed: 6 }),
      k: Tensor.randn(shape, { dtype, device, seed: 7, std: D ** -0.5 }),
      v: Tensor.randn(shape, { dtype, device, seed: 8 }),
      // The gate alone outlives the transform's result (whose backward is not timed here).
      gate: boundGate(raw, aLog, dtBias).gate,
      beta: Tensor.rand([B, T, H], { device, seed: 10 }),
      dO: Tensor.randn(shape, { dtype, device, seed: 11 }),
      output: empty(),
      grads: {
        dq: empty(),
        dk: empty(),
        dv: empty(),
        dgate: Tensor.empty(shape, { device }),
        dbeta: Tensor.empty([B, T, H], { device }),
      },
    };
  });
}

function defineCases(site: LinearSite): RatedCase[] {
  const { device, dtype } = site;
  return site.shapes.flatMap((s) => {
    const inputs = lazyInputs(s, dtype, device);
    const plan = { k: s.D, v: s.D };
    const forward = (x: ReturnType<typeof inputs>) =>
      chunkKda(x.q, x.k, x.v, x.gate, x.beta, { layout: "bshd", out: { output: x.output } });
    return trainingCases({
      op: "chunkKda",
      shape: linearShapeName(s),
      device,
      dtype,
      flops: linearForwardFlops(s.B, s.T, s.H, s.D, s.D),
      plans: [{ op: "linear.kda.fwd", ...plan }, { op: "linear.kda.bwd", ...plan }],
      prepare: inputs,
      forward: () => forward(inputs())[Symbol.dispose](),
      forwardBackward: () => {
        const x = inputs();
        using r = forward(x);
        r.backward(x.dO, { out: x.grads })[Symbol.dispose]();
      },
    });
  });
}

function decodeCase(site: LinearSite): RatedCase {
  const { device, dtype, decode: { B, H, D } } = site;
  // The pools of the recorded benchmark (1024 slots for 256 sequences) and of the CPU's (16 for 8).
  const slots = device === "cpu" ? 16 : 1024;
  const inputs = once(() => ({
    packedQkv: Tensor.randn([B, H * 3 * D], { dtype, device, seed: 1 }),
    rawGate: Tensor.randn([1, B, H, D], { dtype, device, seed: 4 }),
    rawBeta: Tensor.randn([1, B, H], { dtype, device, seed: 2 }),
    aLog: Tensor.zeros([H], { device }),
    dtBias: Tensor.zeros([H, D], { device }),
    pool: Tensor.randn([slots, H, D, D], { device, seed: 3, std: 0.1 }),
    // Slot 0 is the padding index, so sequence b holds slot b + 1.
    indices: Tensor.from(Array.from({ length: B }, (_, b) => b + 1), { dtype: "int32", device }),
    out: Tensor.empty([1, B, H, D], { dtype, device }),
  }));
  return {
    name: `recurrentKdaDecode decode slots${slots}_B${B}_H${H}_K${D}_V${D} ${dtype} [${device}]`,
    device,
    bytes: 2 * B * H * D * D * 4,
    prepare: inputs,
    run: () => {
      const x = inputs();
      recurrentKdaDecode(x.packedQkv, x.rawGate, x.rawBeta, x.aLog, x.dtBias, x.pool, x.indices, {
        out: x.out,
      });
    },
  };
}

const shapes = FLA_SHAPES.filter((s) => KDA_SHAPES.includes(linearShapeName(s)));
benchRates(linearSites(shapes).flatMap((s) => [...defineCases(s), decodeCase(s)]));
