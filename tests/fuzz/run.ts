/**
 * The fuzz runner: draws `--calls` cases from the catalog (cases.ts) with `--seed`, runs each on
 * `--device`, and classifies what happened. Run in a child process by tests/fuzz.test.ts (so that a
 * crash is seen as one, with the case it happened in, from `--progress`), or by hand:
 *
 * ```sh
 * deno run -A tests/fuzz/run.ts --device cuda --calls 4000 --seed 7
 * ```
 *
 * @module
 */
import { checkedOptions, scriptArgs, ScriptUsageError, wholeNumber } from "../../tools/script_args.ts";
import * as ak from "../../mod.ts";
import { type Case, GENERATORS, Rng, Scope } from "./cases.ts";

/** How each call ended. */
export type Outcome =
  | "ok" // a valid call that succeeded (finite outputs where expected)
  | "refused" // an invalid call refused with an AttnkitError
  | "refused valid" // a valid call refused
  | "accepted invalid" // an invalid call that returned
  | "non-finite" // a valid call whose float output holds NaN or infinity
  | "other throw"; // anything thrown that is not an AttnkitError

/** The runner's report. */
export interface FuzzReport {
  device: string;
  seed: number;
  calls: number;
  seconds: number;
  counts: Record<Outcome, number>;
  /** Bytes in use on the device after the last case, minus before the first. */
  leakedBytes: number;
  /** Host bytes held by the library after, minus before. */
  leakedHostBytes: number;
  /** Up to five examples of every outcome but "ok" and "refused". */
  examples: { outcome: Outcome; index: number; name: string; message: string }[];
}

function finiteOutput(result: unknown): boolean {
  if (!(result instanceof ak.Tensor) || result.disposed || !ak.isFloating(result.dtype)) return true;
  for (const x of result.toArray() as Float32Array) if (!Number.isFinite(x)) return false;
  return true;
}

// A case may return a promise (the file functions): its settled value is the outcome.
async function classify(c: Case, run: () => unknown): Promise<{ outcome: Outcome; message: string }> {
  try {
    let result = run();
    if (result instanceof Promise) result = await result;
    if (c.expect === "error") return { outcome: "accepted invalid", message: "returned without an error" };
    if (c.finite && !finiteOutput(result)) {
      return { outcome: "non-finite", message: "NaN or infinity in the output" };
    }
    return { outcome: "ok", message: "" };
  } catch (e) {
    const message = e instanceof Error ? e.message.split("\n")[0] : String(e);
    if (!(e instanceof ak.AttnkitError)) {
      return { outcome: "other throw", message: `${(e as Error)?.name}: ${message}` };
    }
    return c.expect === "error" || c.refusal?.test(message)
      ? { outcome: "refused", message }
      : { outcome: "refused valid", message };
  }
}

/** Runs the fuzz and returns its report; `progress` (a file) gets the index and name of each case first. */
export async function fuzz(
  device: ak.Device,
  seed: number,
  calls: number,
  progress?: Deno.FsFile,
): Promise<FuzzReport> {
  const started = performance.now();
  const rng = new Rng(seed);
  const total = GENERATORS.reduce((a, g) => a + g[2], 0);
  const counts: Record<Outcome, number> = {
    "ok": 0,
    "refused": 0,
    "refused valid": 0,
    "accepted invalid": 0,
    "non-finite": 0,
    "other throw": 0,
  };
  const examples: FuzzReport["examples"] = [];
  const encoder = new TextEncoder();
  const before = ak.memoryStats(device).bytesInUse;
  const hostBefore = ak.memoryStats("cpu").bytesInUse;
  for (let i = 0; i < calls; ++i) {
    let r = rng.next() * total;
    const [, gen] = GENERATORS.find((g) => (r -= g[2]) < 0) ?? GENERATORS[0];
    const scope = new Scope(device);
    try {
      const c = gen(rng, scope, rng.chance(0.5));
      progress?.writeSync(encoder.encode(`${i} ${c.name}\n`));
      const { outcome, message } = await classify(c, () => c.run());
      counts[outcome]++;
      if (
        outcome !== "ok" && outcome !== "refused" && examples.filter((e) => e.outcome === outcome).length < 5
      ) {
        examples.push({ outcome, index: i, name: c.name, message });
      }
    } finally {
      scope.dispose();
    }
  }
  if (device !== "cpu") ak.synchronize(device);
  return {
    device,
    seed,
    calls,
    seconds: (performance.now() - started) / 1000,
    counts,
    leakedBytes: ak.memoryStats(device).bytesInUse - before,
    leakedHostBytes: device === "cpu" ? 0 : ak.memoryStats("cpu").bytesInUse - hostBefore,
    examples,
  };
}

if (import.meta.main) {
  const { values } = scriptArgs({
    args: Deno.args,
    options: {
      device: { type: "string", default: "cpu" },
      seed: { type: "string", default: "1" },
      calls: { type: "string", default: "1000" },
      out: { type: "string" },
      progress: { type: "string" },
    },
  });
  const { device, seed, calls } = checkedOptions(() => {
    if (values.device !== "cpu" && values.device !== "cuda") {
      throw new ScriptUsageError(`--device: expected "cpu" or "cuda", got "${values.device}"`);
    }
    return {
      device: values.device as ak.Device,
      seed: wholeNumber("--seed", values.seed, 0),
      calls: wholeNumber("--calls", values.calls),
    };
  });
  const progress = values.progress
    ? Deno.openSync(values.progress, { write: true, create: true, truncate: true })
    : undefined;
  const report = await fuzz(device, seed, calls, progress);
  progress?.close();
  const text = JSON.stringify(report, null, 1);
  if (values.out) Deno.writeTextFileSync(values.out, text);
  else console.log(text);
}
