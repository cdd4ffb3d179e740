/**
 * `attnkit info`: the devices, the loaded native library and the kernels it holds.
 *
 * @module
 */
import { parseArgs } from "node:util";
import {
  builtWithCuda,
  cudaDeviceCount,
  deviceInfo,
  type KernelInfo,
  kernels,
  nativeVersion,
} from "../mod.ts";
import { libraryPath } from "../ffi/library.ts";
import { VERSION } from "../ffi/version.ts";

/** The usage of `attnkit info`. */
export const INFO_USAGE = `Usage: attnkit info [--kernels]

Prints the devices, the native library (version, CUDA or not, path) and its kernels per stage.

Options:
  --kernels    list every kernel (stage, variant, dtype, head dim, tile, architecture, runnable)
  -h, --help   this text`;

const GiB = 1024 ** 3, MiB = 1024 ** 2;

function unique<T>(xs: T[]): T[] {
  return [...new Set(xs)];
}

/** Runs `attnkit info`; returns the exit status. */
export function infoCommand(args: string[]): number {
  const { values } = parseArgs({
    args,
    options: {
      kernels: { type: "boolean", default: false },
      help: { type: "boolean", short: "h", default: false },
    },
  });
  if (values.help) {
    console.log(INFO_USAGE);
    return 0;
  }
  const cuda = builtWithCuda();
  console.log(`attnkit ${VERSION}`);
  console.log(`library   ${libraryPath()}`);
  console.log(
    `          version ${nativeVersion()}, ${cuda ? "built with CUDA" : "CPU only (built without CUDA)"}`,
  );
  const count = cudaDeviceCount();
  console.log(`devices   cpu`);
  for (let i = 0; i < count; i++) {
    const d = deviceInfo(`cuda:${i}`);
    const [major, minor] = d.computeCapability;
    console.log(
      `          ${d.device}  ${d.name}  sm_${major}${minor}  ${d.smCount} SMs  ` +
        `${(d.totalMemory / GiB).toFixed(1)} GiB (${(d.freeMemory / GiB).toFixed(1)} free)  ` +
        `L2 ${(d.l2CacheBytes / MiB).toFixed(0)} MiB`,
    );
  }
  if (cuda && count === 0) console.log("          no CUDA device visible");

  const rows: KernelInfo[] = kernels(count > 0 ? "cuda:0" : undefined);
  const runnable = rows.filter((k) => k.runnable).length;
  console.log(
    `kernels   ${rows.length} in the registry${count > 0 ? `, ${runnable} runnable on cuda:0` : ""}; ` +
      "the CPU backend runs every op",
  );
  if (values.kernels) {
    for (const k of rows) {
      console.log(
        `  ${k.name.padEnd(56)} ${k.arch.padEnd(6)} ${
          count > 0 ? (k.runnable ? "runnable" : "not runnable") : ""
        }`
          .trimEnd(),
      );
    }
    return 0;
  }
  for (const stage of unique(rows.map((k) => k.stage))) {
    const of = rows.filter((k) => k.stage === stage);
    const dims = unique(of.map((k) => k.d)).sort((a, b) => a - b).map((d) => (d === 0 ? "any" : String(d)));
    console.log(
      `  ${stage.padEnd(24)} ${unique(of.map((k) => k.variant)).join(", ")}; ` +
        `${unique(of.map((k) => k.dtype)).join(", ")}; head dims ${dims.join(", ")}` +
        (count > 0 ? `; ${of.filter((k) => k.runnable).length}/${of.length} runnable` : ""),
    );
  }
  return 0;
}
