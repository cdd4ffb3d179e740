/**
 * A tour of attnkit in one screen: the device, one tensor moved through every dtype, and (on a GPU)
 * device copy bandwidth on a 1 GiB tensor. Run it with `deno task demo`.
 *
 * @module
 */
import {
  cudaAvailable,
  defaultDevice,
  deviceInfo,
  DTYPES,
  nativeVersion,
  synchronize,
  Tensor,
  timeIt,
} from "./mod.ts";

/** The device-to-device copy ceiling measured on an H200 (bytes read + written), /work/shared/ANCHORS.md. */
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

// One float64 tensor, cast on the device to every dtype: floats round to nearest even, integers
// truncate and saturate, bool is value != 0.
console.log(`\none tensor through every dtype, on ${device}:`);
using source = Tensor.from([1 / 3, -2.5, 65519, 3e-6, 1e10], { dtype: "float64", device });
const show = (v: number | bigint) => {
  if (typeof v === "bigint" || Number.isInteger(v) || !Number.isFinite(v)) return String(v);
  const rounded = Number(v.toPrecision(8));
  return Math.abs(rounded) < 1e-3 ? rounded.toExponential() : String(rounded);
};
const order = ["float64", ...DTYPES.filter((d) => d !== "float64")] as const;
for (const dtype of order) {
  using t = source.cast(dtype);
  console.log(
    `  ${dtype.padEnd(9)} [${Array.from(t.toArray() as ArrayLike<number | bigint>, show).join(", ")}]`,
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
