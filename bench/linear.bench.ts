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
  type Device,
  type DType,
  GatedDeltaNetDecodeFwdOp,
  Tensor,
} from "../mod.ts";
import {
  benchRates,
  type LinearShape,
  linearShapeName,
  type LinearSite,
  linearSites,
  type RatedCase,
} from "./wall_time.ts";

/** Forward FLOPs of the chunked algorithm (see the module doc). */
function forwardFlops(s: LinearShape): number {
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

function inputsFor(s: LinearShape, dtype: DType, device: Device): Inputs {
  const key = `${linearShapeName(s)} ${dtype} ${device}`;
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

function defineCases(device: Device, shapes: readonly LinearShape[], dtype: DType): RatedCase[] {
  const cases: RatedCase[] = [];
  for (const s of shapes) {
    const name = linearShapeName(s);
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

function decodeCase(site: LinearSite): RatedCase {
  const { device, dtype, decode: { B, H, D } } = site;
  let x: { q: Tensor; k: Tensor; v: Tensor; g: Tensor; beta: Tensor; state: Tensor } | undefined;
  const op = new GatedDeltaNetDecodeFwdOp({ useQkL2norm: true, inPlace: true });
  return {
    // fp32 state [B, H, D, D], advanced in place
    name: `GatedDeltaNetDecodeFwdOp decode B${B}_T1_H${H}_D${D} ${dtype} [${device}]`,
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

benchRates(linearSites().flatMap((s) => [...defineCases(s.device, s.shapes, s.dtype), decodeCase(s)]));
