/**
 * Whether a build compiles the CUDA kernels. Compiling them takes minutes and they only run where an
 * NVIDIA driver is, so by default the build compiles them only when a driver is present here, when
 * asked (`--cuda`, `ATTNKIT_CUDA=1`), or when the output folder already holds a CUDA build (a choice
 * made once stays until `--cpu-only`).
 *
 * @example
 * ```ts
 * import { decideBackend } from "./backend.ts";
 * const d = decideBackend({ nvcc: true, driver: false });
 * console.log(d.cuda, d.note); // false no GPU driver found: ...
 * ```
 *
 * @module
 */

/** The facts {@link decideBackend} decides from. */
export interface BackendFacts {
  /** A usable CUDA toolkit (nvcc and its runtime library) was found. */
  nvcc: boolean;
  /** An NVIDIA GPU driver is present on this machine. */
  driver: boolean;
  /** `--cuda` or `ATTNKIT_CUDA=1`. */
  askedCuda?: boolean;
  /** `--cpu-only` or `ATTNKIT_CUDA=0`. */
  cpuOnly?: boolean;
  /** The output folder's current library was built with the CUDA kernels. */
  previousCuda?: boolean;
}

/** What {@link decideBackend} chose, with the line to print when the choice may surprise. */
export interface BackendDecision {
  /** Compile the CUDA kernels. */
  cuda: boolean;
  /** One line for the user, when CUDA is left out although nvcc is here. */
  note?: string;
}

/** The line printed when nvcc is here but no driver is, and CUDA was not asked for. */
export const NO_DRIVER_NOTE =
  "no GPU driver found: building the CPU library only (--cuda to compile the CUDA kernels too)";

/**
 * Decides whether to compile the CUDA kernels. Throws when CUDA is asked for but no toolkit is found,
 * or when it is asked for and refused at once.
 *
 * @example
 * ```ts
 * import { decideBackend } from "./backend.ts";
 * console.log(decideBackend({ nvcc: true, driver: true }).cuda); // true
 * console.log(decideBackend({ nvcc: true, driver: false, askedCuda: true }).cuda); // true
 * console.log(decideBackend({ nvcc: false, driver: true }).cuda); // false
 * ```
 */
export function decideBackend(facts: BackendFacts): BackendDecision {
  if (facts.askedCuda && facts.cpuOnly) throw new Error("attnkit build: CUDA both asked for and refused");
  if (facts.cpuOnly) return { cuda: false };
  if (!facts.nvcc) {
    if (facts.askedCuda) {
      throw new Error(
        "attnkit build: the CUDA kernels were asked for (--cuda or ATTNKIT_CUDA=1) but no CUDA toolkit was " +
          "found: put nvcc on PATH (or set ATTNKIT_NVCC, and CUDA_HOME if the toolkit is elsewhere)",
      );
    }
    return { cuda: false };
  }
  if (facts.askedCuda || facts.driver || facts.previousCuda) return { cuda: true };
  return { cuda: false, note: NO_DRIVER_NOTE };
}

/**
 * Reads `ATTNKIT_CUDA`: `"1"` asks for the CUDA kernels, `"0"` for the CPU backend only, unset or
 * empty leaves the choice to the build. Throws for any other value.
 *
 * @example
 * ```ts
 * import { cudaRequestFromEnv } from "./backend.ts";
 * console.log(cudaRequestFromEnv("1"), cudaRequestFromEnv(undefined)); // true undefined
 * ```
 */
export function cudaRequestFromEnv(value: string | undefined): boolean | undefined {
  if (value === undefined || value === "") return undefined;
  if (value === "1") return true;
  if (value === "0") return false;
  throw new Error(`ATTNKIT_CUDA: expected 1 (compile the CUDA kernels) or 0 (CPU only), got "${value}"`);
}

// Device files and libraries an NVIDIA driver installs: native Linux (and containers given a GPU),
// and WSL2, whose driver lives in the Windows host.
const DRIVER_FILES = [
  "/dev/nvidiactl",
  "/dev/nvidia0",
  "/proc/driver/nvidia/version",
  "/usr/lib/wsl/lib/libcuda.so.1",
];

/**
 * Whether an NVIDIA GPU driver is present: one of its device files exists, or `nvidia-smi -L` lists a
 * GPU. Cheap (a few file checks; nvidia-smi only when they find nothing) and never throws.
 *
 * @example
 * ```ts
 * import { probeGpuDriver } from "./backend.ts";
 * console.log(typeof (await probeGpuDriver())); // "boolean"
 * ```
 */
export async function probeGpuDriver(): Promise<boolean> {
  for (const path of DRIVER_FILES) {
    try {
      await Deno.stat(path);
      return true;
    } catch {
      // absent, or not readable: try the next sign
    }
  }
  try {
    const out = await new Deno.Command("nvidia-smi", { args: ["-L"], stdout: "piped", stderr: "null" })
      .output();
    return out.success && /GPU \d+/.test(new TextDecoder().decode(out.stdout));
  } catch {
    return false; // not installed, or not allowed to run
  }
}
