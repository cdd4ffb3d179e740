/**
 * A tour of attnkit in one screen: the device, one tensor moved through every dtype, Gated DeltaNet (its
 * forward, and the gate gradient of the backward its result runs), GLA and causal softmax attention checked
 * against float64 references written here in a few lines, and (on a GPU) device copy bandwidth and the
 * two ops' speed at benchmark shapes. Run it with `deno task demo`.
 *
 * @module
 */
import {
  attention,
  chunkGatedDeltaRule,
  chunkGla,
  compare,
  cudaAvailable,
  defaultDevice,
  deviceInfo,
  DTYPES,
  nativeVersion,
  synchronize,
  Tensor,
  timeIt,
} from "./mod.ts";
import { gatedLinearReference } from "./reference/mod.ts";

/** The device-to-device copy ceiling measured on an H200 (bytes read + written). */
const COPY_CEILING_GBS = 4252;

const device = defaultDevice();
console.log(`attnkit ${nativeVersion()}`);
if (cudaAvailable()) {
  const gpu = deviceInfo(device);
  const [major, minor] = gpu.computeCapability;
  console.log(
    `device: ${gpu.device} ${gpu.name} (sm_${major}${minor}, ${gpu.smCount} SMs, ` +
      `${(gpu.totalMemory / 2 ** 30).toFixed(0)} GiB)`,
  );
} else {
  console.log("device: CPU backend (no CUDA device found)");
}

// One float64 tensor, cast on the device to every dtype: floats round to nearest even (float8_e4m3 has
// no infinities: past 448 it gives NaN), integers truncate and saturate, bool is value != 0.
console.log(`\none tensor through every dtype, on ${device}:`);
using source = Tensor.from([1 / 3, -2.5, 65519, 3e-6, 1e10], { dtype: "float64", device });
const show = (v: number | bigint) => {
  if (typeof v === "bigint" || Number.isInteger(v) || !Number.isFinite(v)) return String(v);
  const rounded = Number(v.toPrecision(8));
  return Math.abs(rounded) < 1e-3 ? rounded.toExponential() : String(rounded);
};
const order = ["float64", ...DTYPES.filter((d) => d !== "float64")] as const;
const width = Math.max(...order.map((d) => d.length));
for (const dtype of order) {
  using t = source.cast(dtype);
  console.log(
    `  ${dtype.padEnd(width)} [${Array.from(t.toArray() as ArrayLike<number | bigint>, show).join(", ")}]`,
  );
}

if (cudaAvailable()) {
  const bytes = 2 ** 30;
  using a = Tensor.full([bytes / 4], 1, { device });
  using b = Tensor.empty([bytes / 4], { device });
  const t = timeIt(() => b.copyFrom(a), { device, warmup: 3, iterations: 20 });
  synchronize(device);
  const gbs = (2 * bytes) / (t.medianMs * 1e6); // bytes read + written
  console.log(
    `\ndevice copy of 1 GiB: ${t.medianMs.toFixed(3)} ms, ${gbs.toFixed(0)} GB/s ` +
      `(${((100 * gbs) / COPY_CEILING_GBS).toFixed(0)}% of the ${COPY_CEILING_GBS} GB/s H200 ceiling)`,
  );
} else {
  console.log("\n(no GPU: skipping the device copy bandwidth measurement)");
}

// ---- Gated DeltaNet against the plain recurrence in float64 ----
// Per head, state S [K, V]: S <- e^g S; u = beta (v - S^T k); S <- S + k u^T; o = S^T (scale q).
function gatedDeltaReference(
  q: Float64Array,
  k: Float64Array,
  v: Float64Array,
  g: Float64Array,
  beta: Float64Array,
  [B, T, H, D]: number[],
): Float64Array {
  const out = new Float64Array(B * T * H * D);
  const scale = 1 / Math.sqrt(D);
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < H; h++) {
      const S = new Float64Array(D * D); // S[i * D + j], i over keys, j over values
      for (let t = 0; t < T; t++) {
        const row = ((b * T + t) * H + h) * D, gate = (b * T + t) * H + h;
        const decay = Math.exp(g[gate]);
        for (let x = 0; x < D * D; x++) S[x] *= decay;
        for (let j = 0; j < D; j++) {
          let kS = 0;
          for (let i = 0; i < D; i++) kS += k[row + i] * S[i * D + j];
          const u = beta[gate] * (v[row + j] - kS);
          let o = 0;
          for (let i = 0; i < D; i++) {
            S[i * D + j] += k[row + i] * u;
            o += S[i * D + j] * scale * q[row + i];
          }
          out[row + j] = o;
        }
      }
    }
  }
  return out;
}

const f64 = (t: Tensor) => t.cast("float64").toArray() as Float64Array;
{
  const shape = [1, 200, 2, 64]; // T = 200: three full chunks of 64 and a partial one
  using q = Tensor.randn(shape, { dtype: "bfloat16", device, seed: 1 });
  using k = Tensor.randn(shape, { dtype: "bfloat16", device, seed: 2, std: 1 / 8 }); // |k|^2 beta < 2: stable
  using v = Tensor.randn(shape, { dtype: "bfloat16", device, seed: 3 });
  using g = Tensor.rand(shape.slice(0, 3), { low: -0.1, high: 0, device, seed: 4 });
  using beta = Tensor.rand(shape.slice(0, 3), { device, seed: 5 });
  using r = chunkGatedDeltaRule(q, k, v, g, beta, { layout: "bshd" });
  const expected = gatedDeltaReference(f64(q), f64(k), f64(v), f64(g), f64(beta), shape);
  const c = compare(r.output, expected);
  console.log(
    `\nGated DeltaNet, bf16 [1, 200, 2, 64] on ${device} vs a float64 recurrence: ` +
      `relative RMS error ${c.relRms.toExponential(2)}, NaNs ${c.nanCount}`,
  );
  // The result runs its own backward (the forward's inputs and options, as autograd does). Its gate
  // gradient dg (float32) along a random direction d of g, against a float64 central difference of
  // the loss sum(dO * o) along d.
  using dO = Tensor.randn(shape, { dtype: "bfloat16", device, seed: 6 });
  using grads = r.backward(dO);
  using direction = Tensor.randn(shape.slice(0, 3), { dtype: "float64", seed: 7 });
  const [d, g0, dOut, dg] = [direction, g, dO, grads.dg!].map(f64);
  const loss = (step: number) => {
    const moved = g0.map((x, i) => x + step * d[i]);
    const o = gatedDeltaReference(f64(q), f64(k), f64(v), moved, f64(beta), shape);
    return o.reduce((sum, x, i) => sum + x * dOut[i], 0);
  };
  const eps = 1e-4;
  const numeric = (loss(eps) - loss(-eps)) / (2 * eps);
  const analytic = dg.reduce((sum, x, i) => sum + x * d[i], 0);
  console.log(
    `  its backward: dg (${grads.dg!.dtype}) along a random direction ${analytic.toPrecision(6)}, ` +
      `float64 central difference ${numeric.toPrecision(6)} ` +
      `(relative error ${Math.abs(analytic / numeric - 1).toExponential(2)})`,
  );
}

// ---- GLA (a decay per key channel) against the shipped float64 oracle ----
{
  const [B, T, H, D] = [1, 200, 2, 64];
  using q = Tensor.randn([B, T, H, D], { dtype: "bfloat16", device, seed: 21 });
  using k = Tensor.randn([B, T, H, D], { dtype: "bfloat16", device, seed: 22, std: 1 / 8 });
  using v = Tensor.randn([B, T, H, D], { dtype: "bfloat16", device, seed: 23 });
  using gk = Tensor.rand([B, T, H, D], { low: -0.2, high: 0, device, seed: 24 }); // log decays
  using r = chunkGla(q, k, v, gk, { layout: "bshd" });
  const expected = gatedLinearReference({
    B,
    T,
    H,
    HK: H,
    K: D,
    V: D,
    q: f64(q),
    k: f64(k),
    v: f64(v),
    gk: f64(gk),
  }).output;
  const c = compare(r.output, expected);
  console.log(
    `GLA, bf16 [1, 200, 2, 64] on ${device} vs the float64 oracle (attnkit/reference): ` +
      `relative RMS error ${c.relRms.toExponential(2)}, NaNs ${c.nanCount}`,
  );
}

// ---- causal softmax attention against plain attention in float64 ----
// o_i = sum_j softmax_j(scale q_i . k_j) v_j over keys j <= i; query head h reads KV head h / (H / Hkv).
function attentionReference(
  q: Float64Array,
  k: Float64Array,
  v: Float64Array,
  [B, S, H, D]: number[],
  Hkv: number,
): Float64Array {
  const out = new Float64Array(B * S * H * D);
  const scale = 1 / Math.sqrt(D);
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < H; h++) {
      const hk = Math.floor(h / (H / Hkv));
      for (let i = 0; i < S; i++) {
        const qi = ((b * S + i) * H + h) * D;
        const z = new Float64Array(i + 1);
        for (let j = 0; j <= i; j++) {
          const kj = ((b * S + j) * Hkv + hk) * D;
          for (let d = 0; d < D; d++) z[j] += scale * q[qi + d] * k[kj + d];
        }
        const top = Math.max(...z);
        let sum = 0;
        for (let j = 0; j <= i; j++) sum += z[j] = Math.exp(z[j] - top);
        for (let j = 0; j <= i; j++) {
          const vj = ((b * S + j) * Hkv + hk) * D;
          for (let d = 0; d < D; d++) out[qi + d] += (z[j] / sum) * v[vj + d];
        }
      }
    }
  }
  return out;
}

{
  const shape = [2, 300, 8, 128]; // GQA 8 / 2, S = 300: not a multiple of any tile
  using q = Tensor.randn(shape, { dtype: "bfloat16", device, seed: 6 });
  using k = Tensor.randn([2, 300, 2, 128], { dtype: "bfloat16", device, seed: 7 });
  using v = Tensor.randn([2, 300, 2, 128], { dtype: "bfloat16", device, seed: 8 });
  using r = attention(q, k, v, { layout: "bshd", isCausal: true });
  const c = compare(r.output, attentionReference(f64(q), f64(k), f64(v), shape, 2));
  console.log(
    `causal GQA attention, bf16 [2, 300, 8 / 2, 128] on ${device} vs float64 attention: ` +
      `relative RMS error ${c.relRms.toExponential(2)}, NaNs ${c.nanCount}`,
  );
}

// ---- speed at benchmark shapes (GPU only) ----
if (cudaAvailable()) {
  {
    // FLOPs of the chunked forward: B T H (6 K V + 6 C K + 4 C V) with chunks of C = 64 tokens.
    const [B, T, H, D] = [4, 2048, 16, 128];
    using q = Tensor.randn([B, T, H, D], { dtype: "bfloat16", device, seed: 11 });
    using k = Tensor.randn([B, T, H, D], { dtype: "bfloat16", device, seed: 12 });
    using v = Tensor.randn([B, T, H, D], { dtype: "bfloat16", device, seed: 13 });
    using g = Tensor.rand([B, T, H], { low: -0.1, high: 0, device, seed: 14 });
    using beta = Tensor.rand([B, T, H], { device, seed: 15 });
    const t = timeIt(() => {
      using _ = chunkGatedDeltaRule(q, k, v, g, beta, { layout: "bshd", useQkL2norm: true });
    }, { device, warmup: 3, iterations: 20 });
    const flops = B * T * H * (6 * D * D + 6 * 64 * D + 4 * 64 * D);
    console.log(
      `\nchunkGatedDeltaRule B4_T2048_H16_D128 bf16: ${t.medianMs.toFixed(3)} ms, ` +
        `${(flops / (t.medianMs * 1e9)).toFixed(0)} TFLOP/s`,
    );
  }
  {
    // FlashAttention's convention: 4 B H S^2 D, halved under a causal mask.
    const [B, S, H, D] = [4, 4096, 32, 128];
    using q = Tensor.randn([B, S, H, D], { dtype: "bfloat16", device, seed: 16 });
    using k = Tensor.randn([B, S, H, D], { dtype: "bfloat16", device, seed: 17 });
    using v = Tensor.randn([B, S, H, D], { dtype: "bfloat16", device, seed: 18 });
    const t = timeIt(() => {
      using _ = attention(q, k, v, { layout: "bshd", isCausal: true });
    }, { device, warmup: 3, iterations: 20 });
    const flops = (4 * B * H * S * S * D) / 2;
    console.log(
      `attention B4_S4096_H32_D128 causal bf16: ${t.medianMs.toFixed(3)} ms, ` +
        `${(flops / (t.medianMs * 1e9)).toFixed(0)} TFLOP/s`,
    );
  }
}
