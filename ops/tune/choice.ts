/**
 * Per-call kernel choice for the op classes: a `kernelMap` override (tuning keys and values applied over
 * the table in force for one call), and `tune: true`, which on the first call of a shape class times every
 * candidate that can serve it against the planner's choice (outputs compared, a disagreeing candidate never
 * chosen), keeps the winner in the on-disk cache (cache.ts) and uses it from then on.
 *
 * @module
 */
import { AttnkitError, invalidArgument } from "../../ffi/errors.ts";
import { VERSION } from "../../ffi/version.ts";
import { compare } from "../compare.ts";
import { type Device, deviceInfo } from "../device.ts";
import { insideCapture } from "../graph.ts";
import { tuning, withTuningOver } from "../kernels.ts";
import { Tensor } from "../tensor.ts";
import { timeIt } from "../timing.ts";
import { binary, unary } from "../tensor_math/elementwise.ts";
import { reduce } from "../tensor_math/reduce.ts";
import { readTuneRecord, type TuneCandidate, type TuneRecord, writeTuneRecord } from "./cache.ts";

/** Settings of tuning keys for one call: e.g. `{ "attention.fwd": "general" }`. */
export type KernelMap = Readonly<Record<string, string | number>>;

/** Where the kernels of an op's last call came from. */
export type ChoiceSource = "planner" | "override" | "cache" | "tune";

/** The kernel choice of the last op call that offers `tune` / `kernelMap`. */
export interface KernelChoice {
  /** The op class. */
  readonly op: string;
  /** The planner's own rules, a `kernelMap`, a cached tuning result or a tuning run of this call. */
  readonly source: ChoiceSource;
  /** The settings applied over the tuning table (empty: none). */
  readonly spec: Readonly<Record<string, string>>;
  /** The cache key (cache and tune). */
  readonly key?: string;
}

let last: KernelChoice | undefined;

/**
 * Where the kernel choice of the last call of an op with `tune` / `kernelMap` options came from.
 *
 * @example
 * ```ts
 * import { GroupedQueryAttentionFwdOp, lastChoice, Tensor } from "@attnkit/attnkit";
 * const op = new GroupedQueryAttentionFwdOp({
 *   layout: "bshd", batch: 1, heads: 2, headsKv: 2, seqLen: 16, dim: 64,
 *   kernelMap: { "attention.fwd": "general" },
 * });
 * using q = Tensor.randn([1, 16, 2, 64], { dtype: "bfloat16", seed: 1 });
 * using r = op.forward(q, q, q);
 * console.log(lastChoice()?.source); // "override"
 * ```
 */
export function lastChoice(): KernelChoice | undefined {
  return last;
}

/**
 * Checks a `kernelMap` option: tuning keys among `prefixes` (e.g. `attention.fwd` takes
 * `attention.fwd` and `attention.fwd.*`), each with one of its values.
 */
export function checkKernelMap(
  op: string,
  value: unknown,
  prefixes: readonly string[],
): KernelMap | undefined {
  if (value === undefined) return undefined;
  const where = "options.kernelMap";
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw invalidArgument(
      op,
      `${where}: expected an object of tuning keys and values, got ${JSON.stringify(value)}`,
    );
  }
  const keys = tuning().keys.filter((k) => prefixes.some((p) => k.name === p || k.name.startsWith(`${p}.`)));
  for (const [name, v] of Object.entries(value)) {
    const key = keys.find((k) => k.name === name);
    if (!key) {
      throw invalidArgument(
        op,
        `${where}: unknown key ${name}; this op takes ${keys.map((k) => k.name).join(", ")}`,
      );
    }
    if ((typeof v !== "string" && typeof v !== "number") || ![...key.values, "auto"].includes(String(v))) {
      throw invalidArgument(
        op,
        `${where}.${name}: expected one of ${["auto", ...key.values].join(", ")}, got ${JSON.stringify(v)}`,
      );
    }
  }
  return Object.freeze({ ...value as Record<string, string | number> });
}

/** One call of an op, for the tuner: the outputs it compares, disposed with the result. */
export type TuneRun = () => { readonly tensors: readonly Tensor[] } & Disposable;

/** What an op hands over to choose its kernels for one call. */
export interface ChoiceRequest {
  /** The op class. */
  readonly op: string;
  /** Where the call runs. */
  readonly device: Device;
  /** The op's `kernelMap`, if any (wins over tuning). */
  readonly kernelMap?: KernelMap;
  /** Whether the op was built with `tune: true`. */
  readonly tune: boolean;
  /** The tuning keys the op's kernels depend on (their values are the candidates). */
  readonly keys: readonly string[];
  /** The call's shape class: every size and option the kernels' choice depends on. */
  readonly shapeClass: string;
  /** Agreement a candidate's outputs must reach with the planner's (relative RMS). */
  readonly relRms: number;
  /** One call, for timing and comparing (not the user's call: no `out` buffers). */
  readonly run: TuneRun;
}

/** Runs `fn` (the user's call of `op`) on the planner's own choice, recording it. */
export function withPlanner<T>(op: string, fn: () => T): T {
  last = { op, source: "planner", spec: {} };
  return fn();
}

/** Runs `fn` (the user's call of `op`) under the op's `kernelMap` over the tuning table, recording it. */
export function withKernelMap<T>(op: string, kernelMap: KernelMap, fn: () => T): T {
  last = { op, source: "override", spec: stringSpec(kernelMap) };
  return withTuningOver(kernelMap, fn);
}

/** Runs `fn` (the user's call) under the kernels chosen for `request`, recording the choice. */
export function withChoice<T>(request: ChoiceRequest, fn: () => T): T {
  if (request.kernelMap) return withKernelMap(request.op, request.kernelMap, fn);
  if (!request.tune) return withPlanner(request.op, fn);
  const key = cacheKey(request);
  const cached = readTuneRecord(key);
  if (cached) {
    last = { op: request.op, source: "cache", spec: cached.spec, key };
    return withTuningOver(cached.spec, fn);
  }
  // Never tune inside a graph capture: the planner's choice, until an uncaptured call tunes.
  if (insideCapture()) return withPlanner(request.op, fn);
  const record = measure(request);
  writeTuneRecord(key, record);
  last = { op: request.op, source: "tune", spec: record.spec, key };
  return withTuningOver(record.spec, fn);
}

function stringSpec(spec: KernelMap): Record<string, string> {
  return Object.fromEntries(Object.entries(spec).map(([k, v]) => [k, String(v)]));
}

// The device part of the cache keys (a device's name and compute capability never change in a process:
// asked once, not on every tuned call).
const devicePart = new Map<Device, string>([["cpu", "cpu"]]);

/** The cache key: the GPU (name and compute capability) or the CPU, the version, the op and the shape class. */
function cacheKey(r: ChoiceRequest): string {
  let where = devicePart.get(r.device);
  if (where === undefined) {
    const info = deviceInfo(r.device);
    where = `${info.name} sm${info.computeCapability.join("")}`;
    devicePart.set(r.device, where);
  }
  return `${where} | ${VERSION} | ${r.op} | ${r.shapeClass}`;
}

/** Every combination of the keys' values (each key's values besides auto), the planner's choice first. */
function candidates(keys: readonly string[]): Record<string, string>[] {
  let out: Record<string, string>[] = [{}];
  for (const key of tuning().keys.filter((k) => keys.includes(k.name))) {
    const next: Record<string, string>[] = [];
    for (const partial of out) for (const value of key.values) next.push({ ...partial, [key.name]: value });
    out = next;
  }
  return [{}, ...out.filter((c) => Object.keys(c).length > 0)];
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

// Candidates are timed in rounds, each round running every candidate once, so that a transient load on
// the machine spreads over all of them instead of biasing the ones timed while it lasted.
// After PRUNE_AFTER timed rounds a candidate whose best sample is over PRUNE_FACTOR times the fastest
// candidate's best stops being timed: it cannot win, and the slow ones make most of a tuning run.
const WARMUP_ROUNDS = 2, TIMED_ROUNDS = 10, PRUNE_AFTER = 3, PRUNE_FACTOR = 1.5;

// A reduction gives each output one block, so the sum of a whole gradient (46 M elements at the tuned
// delta-rule shapes) would run on one block: the tensor is summed in rows first (a power of two of up to
// ROW elements that divides its size; a reshape, no copy), a block or a warp each, and so on down.
const ROW = 4096;

/** The sum of every element of a contiguous float32 tensor, computed on its device (exported for tests). */
export function sumOf(x: Tensor): number {
  const n = x.numel;
  let row = 1;
  while (row < ROW && n % (row * 2) === 0) row *= 2;
  if (row < 32 || n / row < 4) {
    using total = reduce(x, "sum");
    return (total.toArray() as Float32Array)[0];
  }
  using matrix = x.reshape([n / row, row]);
  using perRow = reduce(matrix, "sum", 1);
  return sumOf(perRow);
}

/**
 * Why `actual` disagrees with `reference` beyond `relRms` (undefined when it agrees). The sums run where
 * the tensors live (a large gradient is not copied to the host per candidate); only when they are not
 * finite (a NaN or infinity on either side) does the host comparison decide, element by element, so
 * that matching infinities agree and a NaN the reference does not have never does.
 */
function disagreementOf(actual: Tensor, reference: Tensor, relRms: number): string | undefined {
  using a = actual.cast("float32");
  using e = reference.cast("float32");
  using diff = binary(a, e, "sub");
  using diffSq = unary(diff, "square");
  using refSq = unary(e, "square");
  const num = sumOf(diffSq), den = sumOf(refSq);
  if (Number.isFinite(num) && Number.isFinite(den)) {
    const rel = den === 0 ? (num === 0 ? 0 : Infinity) : Math.sqrt(num / den);
    return rel <= relRms ? undefined : `relative RMS ${rel} against the planner's`;
  }
  const c = compare(actual, reference);
  if (c.nonFiniteMismatches > 0) {
    return `${c.nonFiniteMismatches} non-finite values where the planner's differ`;
  }
  return c.relRms <= relRms ? undefined : `relative RMS ${c.relRms} against the planner's`;
}

function measure(r: ChoiceRequest): TuneRecord {
  // The planner's outputs, kept where they were computed (copies: the call's own are disposed with it).
  const reference = (() => {
    using result = r.run();
    return result.tensors.map((t) => t.clone());
  })();
  try {
    return measureAgainst(r, reference);
  } finally {
    for (const t of reference) t.dispose();
  }
}

function measureAgainst(r: ChoiceRequest, reference: readonly Tensor[]): TuneRecord {
  const cuda = r.device.startsWith("cuda");
  using flush = cuda ? Tensor.empty([16 * 1024 * 1024], { dtype: "float32", device: r.device }) : undefined;
  const refused: TuneCandidate[] = [];
  const serving: { spec: Record<string, string>; samples: number[] }[] = [];
  for (const spec of candidates(r.keys)) {
    let disagreement: string | undefined;
    try {
      withTuningOver(spec, () => {
        using result = r.run();
        result.tensors.forEach((t, i) => {
          const why = disagreement === undefined ? disagreementOf(t, reference[i], r.relRms) : undefined;
          if (why !== undefined) disagreement = `output ${i}: ${why}`;
        });
      });
    } catch (e) {
      if (!(e instanceof AttnkitError)) throw e;
      refused.push({ spec, ms: null, note: e.message.slice(0, 200) });
      continue;
    }
    if (disagreement) refused.push({ spec, ms: null, note: disagreement });
    else serving.push({ spec, samples: [] });
  }
  if (serving.length === 0) {
    throw new AttnkitError(
      "UNSUPPORTED",
      r.op,
      `tune: no kernel serves this call (${refused[0]?.note ?? "?"})`,
    );
  }
  const once = (spec: Record<string, string>) => withTuningOver(spec, () => r.run()[Symbol.dispose]());
  for (let round = 0; round < WARMUP_ROUNDS; round++) for (const c of serving) once(c.spec);
  const dropped = new Set<(typeof serving)[number]>();
  for (let round = 0; round < TIMED_ROUNDS; round++) {
    for (const c of serving) {
      if (dropped.has(c)) continue;
      const t = timeIt(() => once(c.spec), {
        device: r.device,
        warmup: 0,
        iterations: 1,
        before: flush ? () => flush.fill(0) : undefined,
      });
      c.samples.push(t.medianMs);
    }
    if (round + 1 === PRUNE_AFTER) {
      const fastest = Math.min(...serving.map((c) => Math.min(...c.samples)));
      for (const c of serving) if (Math.min(...c.samples) > PRUNE_FACTOR * fastest) dropped.add(c);
    }
  }
  const timed: TuneCandidate[] = serving.map((c) => ({
    spec: c.spec,
    ms: median(c.samples),
    ...(dropped.has(c)
      ? { note: `timed ${PRUNE_AFTER} rounds only: over ${PRUNE_FACTOR}x the fastest` }
      : {}),
  }));
  const best = timed.filter((c) => c.note === undefined).reduce((a, b) => (b.ms! < a.ms! ? b : a));
  return { spec: best.spec, ms: best.ms!, candidates: [...timed, ...refused], at: new Date().toISOString() };
}
