// Shared by the test files: which devices to run on, fresh seeds, poisoning, memory checks, refusals.
import assert from "node:assert/strict";
import { AttnkitError, cudaAvailable, type Device, deviceInfo, memoryStats, type Tensor } from "../mod.ts";

/** True when a CUDA device is present: CUDA variants of the tests run, else they are reported as ignored. */
export const HAS_CUDA: boolean = cudaAvailable();

/** True when `device` is a Hopper GPU (compute capability 9.0), where the sm_90a kernels run. */
export function isHopper(device: Device): boolean {
  return device !== "cpu" && deviceInfo(device).computeCapability.join(".") === "9.0";
}

let noticed = false;
function noticeSkip() {
  if (!HAS_CUDA && !noticed) {
    noticed = true;
    console.log("attnkit tests: no CUDA device here; the [cuda] variants are reported as ignored");
  }
}

/**
 * `ATTNKIT_TEST_DEVICES=cuda` registers only the `[cuda]` variants as runnable (the sanitizer's runs,
 * where the CPU backend's half is time spent outside the tool's view); unset, both run.
 */
const ONLY_CUDA = Deno.env.get("ATTNKIT_TEST_DEVICES") === "cuda";

/**
 * Registers one test per device: `[cpu]` always, `[cuda]` when a GPU is present (otherwise it is
 * registered as ignored, so the skip is visible in the summary).
 */
export function deviceTest(name: string, fn: (device: Device) => void | Promise<void>): void {
  noticeSkip();
  for (const device of ["cpu", "cuda"] as const) {
    const ignore = (device === "cuda" && !HAS_CUDA) || (device === "cpu" && ONLY_CUDA);
    Deno.test({
      name: `${name} [${device}]${device === "cuda" && ignore ? " (no GPU: skipped)" : ""}`,
      ignore,
      fn: () => fn(device),
    });
  }
}

/** A fresh random seed; tests print it when they fail so a failure can be replayed. */
export function freshSeed(): number {
  return crypto.getRandomValues(new Uint32Array(1))[0];
}

/** Runs fn with a fresh seed, adding the seed to any failure's message. */
export async function withSeed(fn: (seed: number) => void | Promise<void>): Promise<void> {
  const seed = Number(Deno.env.get("ATTNKIT_TEST_SEED") ?? freshSeed());
  try {
    await fn(seed);
  } catch (e) {
    if (e instanceof Error) {
      e.message = `${e.message}\n  (seed ${seed}; replay with ATTNKIT_TEST_SEED=${seed})`;
    }
    throw e;
  }
}

/** Fills an output with NaN before a kernel writes it, so an unwritten element fails. */
export function poison<T extends Tensor>(t: T): T {
  return t.fill(NaN);
}

/**
 * Runs fn and checks that the bytes this thread holds on the device return to where they were (this
 * thread's: test files run side by side in Workers under `deno test --parallel`).
 */
export async function expectNoLeak(device: Device, fn: () => void | Promise<void>): Promise<void> {
  const before = memoryStats(device).threadBytesInUse;
  await fn();
  const after = memoryStats(device).threadBytesInUse;
  if (after !== before) throw new Error(`memory leak on ${device}: ${after - before} bytes still in use`);
}

/**
 * Registers a deviceTest whose body runs under withSeed inside expectNoLeak: a fresh seed (named on
 * failure), and the device's memory back where it was afterwards.
 */
export function seededDeviceTest(
  name: string,
  fn: (device: Device, seed: number) => void | Promise<void>,
): void {
  deviceTest(name, (device) => expectNoLeak(device, () => withSeed((seed) => fn(device, seed))));
}

/** Registers a deviceTest that runs check on every spec in turn, each under a fresh seed. */
export function specsTest<S>(
  name: string,
  check: (device: Device, spec: S, seed: number) => void,
  specs: readonly NoInfer<S>[],
): void {
  deviceTest(name, async (device) => {
    for (const spec of specs) await withSeed((seed) => check(device, spec, seed));
  });
}

/** Asserts that fn throws an AttnkitError whose message matches pattern (the argument it names). */
export function refuses(fn: () => unknown, pattern: RegExp): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof AttnkitError, `threw ${e} instead of an AttnkitError`);
    assert.match(e.message, pattern);
    return true;
  });
}
