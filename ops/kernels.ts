/**
 * The kernel layer: which kernels the library holds (its registry), which ones a call runs (the
 * planner's plans: for a call just made, or for a described call on this GPU or a named one), and
 * the tuning table that pins a choice for benchmarks and tests.
 *
 * @example
 * ```ts
 * import { explain } from "@attnkit/attnkit";
 * const plan = explain({ op: "linear.fwd", gpu: "h200", dtype: "bfloat16", b: 2, t: 16384, h: 16, k: 128 });
 * console.log(plan.path, plan.kernels.map((k) => k.name));
 * ```
 *
 * @module
 */
import { AttnkitError, invalidArgument } from "../ffi/errors.ts";
import { native, readCString, unwrap } from "../ffi/library.ts";
import { type Device, parseDevice } from "./device.ts";
import type { DType } from "./dtype.ts";

/** A kernel of the registry (one instance: stage, variant, dtype, head dim, tile). */
export interface KernelInfo {
  /** Its row in the library's table. */
  readonly index: number;
  /** As plans write it, e.g. `linear.fwd.state.split<bfloat16, D128, tile 64>`. */
  readonly name: string;
  /** The stage it serves, e.g. `linear.fwd.state`. */
  readonly stage: string;
  /** Its name among the stage's kernels (a value of the stage's tuning key), e.g. `split`. */
  readonly variant: string;
  /** The lowest architecture its code needs. */
  readonly arch: "sm80" | "sm90a";
  /** The inputs' dtype. */
  readonly dtype: DType;
  /** Head dim (0: any). */
  readonly d: number;
  /** Tile (0: none). */
  readonly tile: number;
  /** Whether it was built for, and runs on, the GPU asked about. */
  readonly runnable: boolean;
}

/** A kernel a plan launches. */
export interface PlanKernel {
  /** As {@link KernelInfo.name}. */
  readonly name: string;
  /** The stage it serves. */
  readonly stage: string;
  /** Its name among the stage's kernels. */
  readonly variant: string;
  /** The inputs' dtype. */
  readonly dtype: DType;
  /** Head dim (0: any). */
  readonly d: number;
  /** Tile (0: none). */
  readonly tile: number;
}

/** What a planner chose for a call. */
export interface Plan {
  /** The op, e.g. `"linear.fwd"`. */
  readonly op: string;
  /** The path taken, e.g. `"fast"`, `"general"`, `"wgmma_persistent"`, `"empty"`. */
  readonly path: string;
  /** The registry kernels it launches, in order. */
  readonly kernels: readonly PlanKernel[];
  /** Its other decisions (tiles, segments, loads, what is saved, why a path was refused). */
  readonly details: Readonly<Record<string, string | number>>;
}

/** The ops a plan can be asked for. */
export type PlanOp =
  | "linear.fwd"
  | "linear.bwd"
  | "linear.decode"
  | "linear.gla.fwd"
  | "linear.gla.bwd"
  | "linear.gla.decode"
  | "linear.kda.fwd"
  | "linear.kda.bwd"
  | "linear.paged_decode"
  | "attention.fwd"
  | "attention.bwd"
  | "attention.decode"
  | "sparse.nsa.compression"
  | "sparse.nsa.selection"
  | "sparse.nsa.topk"
  | "sparse.dsa.decode"
  | "sparse.indexer";

/** GPUs a plan can be asked for by name, without the GPU. */
export type GpuName = "h200" | "h100" | "a100" | "l40s";

/**
 * A described call for {@link explain}: the op, the GPU (`gpu` by name, or `device`, this machine's;
 * by default its first GPU) and the call's sizes and flags. Omitted sizes take defaults.
 */
export interface PlanQuery {
  /** The op. */
  op: PlanOp;
  /** A GPU by name. */
  gpu?: GpuName;
  /** This machine's GPU. */
  device?: Device;
  /** The inputs' dtype (default bfloat16). */
  dtype?: "bfloat16" | "float16" | "float32" | "float8_e4m3";
  /** Batch (linear and attention). */
  b?: number;
  /** Linear: tokens per sequence. */
  t?: number;
  /** Linear: value heads, q/k heads (default h). */
  h?: number;
  /** Linear: q/k heads (default h). */
  hk?: number;
  /** Linear: head dims of q/k and v (default v = k). */
  k?: number;
  /** Linear: head dim of v. */
  v?: number;
  /** Linear: packed sequence lengths (then b is ignored). */
  seqlens?: readonly number[];
  /** Linear: the chunk size asked for. */
  chunkSize?: number;
  /** Linear: the recurrent algorithm. */
  recurrent?: boolean;
  /** Linear forward: chunk states asked for. */
  chunkStates?: boolean;
  /** Linear forward: the WY factors asked for. */
  factors?: boolean;
  /** Linear forward: a saved-states buffer offered. */
  save?: boolean;
  /** Linear backward: the forward's saved states given. */
  saved?: boolean;
  /** Linear backward: L2-normalised q and k. */
  l2norm?: boolean;
  /** 16-byte aligned rows (default true). */
  aligned?: boolean;
  /** Gated linear family: a decay per key channel (GLA; default true), else per token or none. */
  channel?: boolean;
  /** Gated linear family forward: linear attention's normaliser asked for. */
  normalize?: boolean;
  /** KDA: the fast-math variant asked for. */
  fastmath?: boolean;
  /** Attention: query and key lengths (default skv = sq). DSA decode: queries per sequence, list length. */
  sq?: number;
  /** Attention: key length. */
  skv?: number;
  /** Attention: query heads and KV heads (default hkv = hq). */
  hq?: number;
  /** Attention: KV heads. */
  hkv?: number;
  /** Attention: head dim (DSA decode: the key's columns, dim + dimTail; `v` then the value's). */
  d?: number;
  /** Attention forward: key rows in all (0: no keys). */
  totalKv?: number;
  /** Attention forward of float8_e4m3 inputs: the output dtype (default bfloat16). */
  outDtype?: "float16" | "bfloat16";
  /** Attention backward: the deterministic order. */
  deterministic?: boolean;
  /** Attention backward: no zero (broadcast) strides (default true). */
  tmaOk?: boolean;
  /** NSA block selection: blocks each query selects (default 16). */
  selected?: number;
}

const QUERY_KEYS: Record<string, string> = {
  op: "op",
  gpu: "gpu",
  device: "device",
  dtype: "dtype",
  b: "b",
  t: "t",
  h: "h",
  hk: "hk",
  k: "k",
  v: "v",
  seqlens: "seqlens",
  chunkSize: "chunk_size",
  recurrent: "recurrent",
  chunkStates: "chunk_states",
  normalize: "normalize",
  factors: "factors",
  save: "save",
  saved: "saved",
  l2norm: "l2norm",
  aligned: "aligned",
  channel: "channel",
  fastmath: "fastmath",
  sq: "sq",
  skv: "skv",
  hq: "hq",
  hkv: "hkv",
  d: "d",
  totalKv: "total_kv",
  outDtype: "out_dtype",
  deterministic: "deterministic",
  tmaOk: "tma_ok",
  selected: "selected",
};

function encode(text: string): Uint8Array<ArrayBuffer> {
  return new TextEncoder().encode(`${text}\0`);
}

// The text a C entry returned through a `const char**`.
function outString(call: (out: Uint8Array<ArrayBuffer>) => number, op: string): string {
  const out = new BigUint64Array(1);
  unwrap(call(new Uint8Array(out.buffer)), op);
  return readCString(Deno.UnsafePointer.create(out[0]));
}

function queryText(q: PlanQuery): string {
  if (q === null || typeof q !== "object") throw invalidArgument("explain", "query: expected an object");
  const parts: string[] = [];
  for (const [key, value] of Object.entries(q)) {
    if (value === undefined) continue;
    const name = QUERY_KEYS[key];
    if (name === undefined) {
      throw invalidArgument(
        "explain",
        `query: unknown key ${key} (keys: ${Object.keys(QUERY_KEYS).join(", ")})`,
      );
    }
    if (key === "device") {
      const d = parseDevice(String(value), "explain");
      if (d.type !== 1) {
        throw invalidArgument("explain", `device: expected a CUDA device, got ${String(value)}`);
      }
      parts.push(`device=${d.index}`);
    } else if (key === "seqlens") {
      if (!Array.isArray(value) || value.length === 0 || !value.every((x) => Number.isInteger(x) && x >= 0)) {
        throw invalidArgument("explain", "seqlens: expected a non-empty array of non-negative integers");
      }
      parts.push(`seqlens=${value.join("/")}`);
    } else if (typeof value === "boolean" || typeof value === "string") {
      parts.push(`${name}=${value}`);
    } else if (typeof value === "number" && Number.isInteger(value) && value >= 0) {
      parts.push(`${name}=${value}`);
    } else {
      throw invalidArgument(
        "explain",
        `${key}: expected a non-negative integer, a boolean or a name, got ${value}`,
      );
    }
  }
  return parts.join(",");
}

/**
 * What the planner would run for a described call, without running it; on this machine's GPU
 * (`device`) or any GPU by name (`gpu`), so plans can be checked anywhere. Settings of the tuning
 * table apply.
 *
 * @example
 * ```ts
 * import { explain } from "@attnkit/attnkit";
 * const plan = explain({ op: "attention.fwd", gpu: "h200", d: 64, sq: 2048, hq: 16 });
 * console.log(plan.kernels[0].variant); // "wgmma_persistent"
 * ```
 */
export function explain(query: PlanQuery): Plan {
  const text = queryText(query);
  return JSON.parse(outString((out) => native().ak_plan(encode(text), out), "explain")) as Plan;
}

/**
 * The plan of this thread's last CUDA op (what it ran), or undefined before any.
 *
 * @example
 * ```ts
 * import { lastPlan } from "@attnkit/attnkit";
 * console.log(lastPlan()?.kernels.map((k) => k.name) ?? "no CUDA op yet");
 * ```
 */
export function lastPlan(): Plan | undefined {
  const text = readCString(native().ak_last_plan());
  return text === "" ? undefined : JSON.parse(text) as Plan;
}

/**
 * The library's kernels (its registry, as built), each with whether it runs on `device` (a CUDA
 * device; without one, none is runnable).
 *
 * @example
 * ```ts
 * import { kernels } from "@attnkit/attnkit";
 * console.log(kernels().filter((k) => k.stage === "attention.fwd").length);
 * ```
 */
export function kernels(device?: Device): KernelInfo[] {
  let index = -1;
  if (device !== undefined) {
    const d = parseDevice(device, "kernels");
    if (d.type !== 1) throw invalidArgument("kernels", `device: expected a CUDA device, got ${device}`);
    index = d.index;
  }
  return JSON.parse(outString((out) => native().ak_kernels(index, out), "kernels")) as KernelInfo[];
}

/** A key of the tuning table. */
export interface TuningKey {
  /** E.g. `linear.fwd.state`. */
  readonly name: string;
  /** Its values besides `auto`. */
  readonly values: readonly string[];
  /** What it chooses. */
  readonly doc: string;
}

/** The tuning table: the keys set to something other than `auto`, and every key. */
export interface TuningTable {
  /** The keys set, with their values. */
  readonly current: Readonly<Record<string, string>>;
  /** Every key and its values. */
  readonly keys: readonly TuningKey[];
}

/** Settings of the tuning table: `"key=value,..."` or an object of keys and values. */
export type TuningSpec = string | Readonly<Record<string, string | number>>;

function specText(spec: TuningSpec, op: string): string {
  if (typeof spec === "string") return spec;
  if (spec === null || typeof spec !== "object") {
    throw invalidArgument(op, `spec: expected "key=value,..." or an object of keys and values`);
  }
  return Object.entries(spec).map(([k, v]) => {
    if (typeof v !== "string" && typeof v !== "number") {
      throw invalidArgument(op, `${k}: expected a string or a number, got ${typeof v}`);
    }
    return `${k}=${v}`;
  }).join(",");
}

/**
 * Replaces this thread's tuning table (each Worker has its own): every run-time choice (the kernel of
 * a stage, its tile, a path, segments, loads). Keys not named go back to `auto` (the planner's choice); an empty spec
 * resets all. An unknown key or value throws an `AttnkitError` naming it; a setting that cannot
 * serve a later call makes that call throw (UNSUPPORTED) saying why. The environment variable
 * `ATTNKIT_TUNE` gives the table it starts with.
 *
 * @example
 * ```ts
 * import { setTuning, tuning } from "@attnkit/attnkit";
 * setTuning({ "linear.fwd.path": "general" });
 * console.log(tuning().current); // { "linear.fwd.path": "general" }
 * setTuning("");
 * ```
 */
export function setTuning(spec: TuningSpec): void {
  unwrap(native().ak_tune_set(encode(specText(spec, "setTuning"))), "setTuning");
}

/**
 * The tuning table in force, and every key with its allowed values.
 *
 * @example
 * ```ts
 * import { tuning } from "@attnkit/attnkit";
 * console.log(tuning().keys.map((k) => k.name));
 * ```
 */
export function tuning(): TuningTable {
  return JSON.parse(readCString(native().ak_tune_describe())) as TuningTable;
}

/** The table in force as `setTuning` takes it ("key=value,..."): cheap, unlike {@link tuning}. */
function currentSpec(op: string): string {
  return outString((out) => native().ak_tune_current(out), op);
}

/**
 * Runs `fn` (synchronous) with the table set to `spec` (computed from the table in force), then restores
 * that table exactly. A bad spec is reported as `setTuning`'s would be.
 */
function withTable<T>(op: string, spec: (before: string) => TuningSpec, fn: () => T): T {
  const before = currentSpec(op);
  setTuning(spec(before));
  try {
    const result = fn();
    if (result instanceof Promise) {
      throw new AttnkitError("INVALID_ARGUMENT", op, "fn: expected a synchronous function");
    }
    return result;
  } finally {
    unwrap(native().ak_tune_set(encode(before)), op);
  }
}

/**
 * Runs `fn` with the tuning table set to `spec`, then puts the previous table back (also when `fn`
 * throws). For synchronous work.
 *
 * @example
 * ```ts
 * import { Tensor, withTuning } from "@attnkit/attnkit";
 * withTuning({ "attention.fwd": "general" }, () => {
 *   using x = Tensor.zeros([2]);
 *   console.log(`${x}`);
 * });
 * ```
 */
export function withTuning<T>(spec: TuningSpec, fn: () => T): T {
  return withTable("withTuning", () => spec, fn);
}

/**
 * As {@link withTuning}, with `spec`'s keys set over the table in force instead of replacing it (the
 * op classes' `kernelMap` and tuning runs). Internal.
 */
export function withTuningOver<T>(spec: Readonly<Record<string, string | number>>, fn: () => T): T {
  if (Object.keys(spec).length === 0) return fn();
  return withTable("kernelMap", (before) => {
    const table: Record<string, string | number> = {};
    for (const item of before.split(",").filter(Boolean)) {
      const eq = item.indexOf("=");
      table[item.slice(0, eq)] = item.slice(eq + 1);
    }
    return { ...table, ...spec };
  }, fn);
}
