/**
 * `deno bench` for DeltaNet and Gated DeltaNet (`deno task bench`): forward, forward + backward and
 * decode. On the CPU backend small shapes; on CUDA (when present) flash-linear-attention's six
 * benchmark shapes (../shared/ANCHORS.md), bfloat16, with FLA's inputs: q and k L2-normalised (here
 * inside the kernel, `useQkL2norm`), g = logsigmoid(randn), beta = sigmoid(randn). Each call waits
 * for the device, so times are wall times per call. After the run a table gives TFLOP/s (GFLOP/s
 * below 1 TFLOP/s) and GB/s for decode.
 *
 * FLOPs counted as everywhere in attnkit (cli/flops.ts): the chunked forward's matrix products, chunk
 * C = 64, B T H (6 K V + 6 C K + 4 C V). Forward + backward counts 3x the forward. Decode counts the
 * state's bytes (read + written).
 *
 * @module
 */
import { linearForwardFlops } from "../cli/flops.ts";
import {
  chunkDeltaRule,
  chunkDeltaRuleBackward,
  chunkGatedDeltaRule,
  chunkGatedDeltaRuleBackward,
  cudaAvailable,
  type Device,
  type DType,
  GatedDeltaNetDecodeFwdOp,
  Tensor,
} from "../mod.ts";
import { benchWallTimes, byteRate, flopRate, type WallCase } from "./wall_time.ts";

interface Shape {
  B: number;
  T: number;
  H: number;
  D: number;
}

interface Case extends WallCase {
  flops?: number;
  bytes?: number;
}

const FLA_SHAPES: Shape[] = [
  { B: 1, T: 8192, H: 96, D: 128 },
  { B: 2, T: 16384, H: 16, D: 128 },
  { B: 4, T: 2048, H: 16, D: 128 },
  { B: 4, T: 4096, H: 64, D: 128 },
  { B: 8, T: 2048, H: 32, D: 256 },
  { B: 8, T: 1024, H: 8, D: 64 },
];

const shapeName = (s: Shape) => `B${s.B}_T${s.T}_H${s.H}_D${s.D}`;

/** Forward FLOPs of the chunked algorithm (see the module doc). */
function forwardFlops(s: Shape): number {
  return linearForwardFlops(s.B, s.T, s.H, s.D, s.D);
}

// Standard normals on the host (Box-Muller), for gates shaped like FLA's.
function normals(n: number, seed: number): Float32Array {
  let state = seed >>> 0;
  const uniform = () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return (state + 0.5) / 4294967296;
  };
  const out = new Float32Array(n);
  for (let i = 0; i < n; i += 2) {
    const r = Math.sqrt(-2 * Math.log(uniform())), a = 2 * Math.PI * uniform();
    out[i] = r * Math.cos(a);
    if (i + 1 < n) out[i + 1] = r * Math.sin(a);
  }
  return out;
}

interface Inputs {
  q: Tensor;
  k: Tensor;
  v: Tensor;
  g: Tensor;
  beta: Tensor;
  dO: Tensor;
}

const inputCache = new Map<string, Inputs>();

function inputsFor(s: Shape, dtype: DType, device: Device): Inputs {
  const key = `${shapeName(s)} ${dtype} ${device}`;
  let x = inputCache.get(key);
  if (x) return x;
  const { B, T, H, D } = s;
  const logsigmoid = normals(B * T * H, 3).map((z) => -Math.log1p(Math.exp(-z)));
  const sigmoid = normals(B * T * H, 4).map((z) => 1 / (1 + Math.exp(-z)));
  x = {
    q: Tensor.randn([B, T, H, D], { dtype, device, seed: 1 }),
    k: Tensor.randn([B, T, H, D], { dtype, device, seed: 2 }),
    v: Tensor.randn([B, T, H, D], { dtype, device, seed: 5 }),
    g: Tensor.from(logsigmoid, { shape: [B, T, H], device }),
    beta: Tensor.from(sigmoid, { shape: [B, T, H], device }),
    dO: Tensor.randn([B, T, H, D], { dtype, device, seed: 6 }),
  };
  inputCache.set(key, x);
  return x;
}

function defineCases(device: Device, shapes: Shape[], dtype: DType): Case[] {
  const cases: Case[] = [];
  for (const s of shapes) {
    const name = shapeName(s);
    const o = { layout: "bshd", useQkL2norm: true } as const;
    cases.push({
      name: `chunkGatedDeltaRule fwd ${name} ${dtype} [${device}]`,
      device,
      flops: forwardFlops(s),
      run: () => {
        const x = inputsFor(s, dtype, device);
        chunkGatedDeltaRule(x.q, x.k, x.v, x.g, x.beta, o).output.dispose();
      },
    });
    cases.push({
      name: `chunkDeltaRule fwd ${name} ${dtype} [${device}]`,
      device,
      flops: forwardFlops(s),
      run: () => {
        const x = inputsFor(s, dtype, device);
        chunkDeltaRule(x.q, x.k, x.v, x.beta, o).output.dispose();
      },
    });
    cases.push({
      name: `chunkGatedDeltaRule fwd+bwd ${name} ${dtype} [${device}]`,
      device,
      flops: 3 * forwardFlops(s),
      run: () => {
        const x = inputsFor(s, dtype, device);
        // As a training step runs them: the forward keeps its per-chunk states for the backward.
        using r = chunkGatedDeltaRule(x.q, x.k, x.v, x.g, x.beta, { ...o, saveForBackward: true });
        chunkGatedDeltaRuleBackward(x.dO, x.q, x.k, x.v, x.g, x.beta, { ...o, saved: r.saved })
          [Symbol.dispose]();
      },
    });
    cases.push({
      name: `chunkDeltaRule fwd+bwd ${name} ${dtype} [${device}]`,
      device,
      flops: 3 * forwardFlops(s),
      run: () => {
        const x = inputsFor(s, dtype, device);
        using r = chunkDeltaRule(x.q, x.k, x.v, x.beta, { ...o, saveForBackward: true });
        chunkDeltaRuleBackward(x.dO, x.q, x.k, x.v, x.beta, { ...o, saved: r.saved })[Symbol.dispose]();
      },
    });
  }
  return cases;
}

function decodeCase(device: Device, B: number, H: number, D: number, dtype: DType): Case {
  let x: { q: Tensor; k: Tensor; v: Tensor; g: Tensor; beta: Tensor; state: Tensor } | undefined;
  const op = new GatedDeltaNetDecodeFwdOp({ useQkL2norm: true, inPlace: true });
  return {
    name: `GatedDeltaNetDecodeFwdOp [${B}, ${H}, ${D}, ${D}] fp32 state, ${dtype} in place [${device}]`,
    device,
    bytes: B * H * D * D * 4 * 2,
    run: () => {
      x ??= {
        q: Tensor.randn([B, H, D], { dtype, device, seed: 1 }),
        k: Tensor.randn([B, H, D], { dtype, device, seed: 2 }),
        v: Tensor.randn([B, H, D], { dtype, device, seed: 3 }),
        g: Tensor.rand([B, H], { device, seed: 4, low: -0.1, high: 0 }),
        beta: Tensor.rand([B, H], { device, seed: 5 }),
        state: Tensor.zeros([B, H, D, D], { device }),
      };
      op.forward(x.q, x.k, x.v, x.g, x.beta, x.state).output.dispose();
    },
  };
}

const cases = [
  ...defineCases("cpu", [{ B: 1, T: 256, H: 4, D: 64 }], "bfloat16"),
  decodeCase("cpu", 8, 4, 64, "bfloat16"),
];
if (cudaAvailable()) {
  cases.push(...defineCases("cuda", FLA_SHAPES, "bfloat16"), decodeCase("cuda", 256, 32, 128, "bfloat16"));
}

benchWallTimes(cases, {
  group: (name) => name.replace(/^(\S+ \S+).*\[(\w+)\]$/, "$1 [$2]"),
  heading: "\nmedian wall time per call (including the wait for the device):",
  row: (c, ms) => {
    const rate = c.flops === undefined ? byteRate(c.bytes ?? 0, ms) : flopRate(c.flops, ms);
    return `  ${c.name.padEnd(78)} ${ms.toFixed(3).padStart(10)} ms ${rate}`;
  },
});
