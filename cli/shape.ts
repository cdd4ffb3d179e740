/**
 * The command line's vocabulary: ops (and the family each belongs to: which shape parts, flags and
 * modes it takes), shape names such as `B2_T1000_H4_D128` (the way FLA's and attnkit's benchmark tables
 * name shapes), dtype spellings, and the error that ends a command with a usage message.
 *
 * @module
 */
import type { DType } from "../mod.ts";
import { MAX_HEAD_DIM } from "../ops/linear/delta_native.ts";
import type { Mode } from "./problem.ts";
import { readWholeNumber } from "./whole_number.ts";

/** An error that ends a command with an exit status and a message (and the usage, when asked). */
export class CliError extends Error {
  /** The exit status. */
  readonly status: number;
  /** Whether the command's usage follows the message. */
  readonly showUsage: boolean;
  /** Makes the error. */
  constructor(message: string, status: number, showUsage: boolean) {
    super(message);
    this.name = "CliError";
    this.status = status;
    this.showUsage = showUsage;
  }
}

/** A mistake on the command line: printed with the command's usage, exit status 2. */
export class UsageError extends CliError {
  /** Makes the error. */
  constructor(message: string) {
    super(message, 2, true);
    this.name = "UsageError";
  }
}

/**
 * Refuses a flag given (a value, or true) to an op that does not take it, naming the ops that do.
 *
 * @example
 * ```ts
 * import { refuseForeignFlag } from "./shape.ts";
 * refuseForeignFlag("gdn", "ragged", false, "attention-decode"); // not given: nothing
 * try {
 *   refuseForeignFlag("gdn", "ragged", true, "attention-decode");
 * } catch (e) {
 *   console.log((e as Error).message); // --ragged: applies to attention-decode only, not gdn
 * }
 * ```
 */
export function refuseForeignFlag(
  op: string,
  flag: string,
  given: string | boolean | undefined,
  owners: string,
) {
  if (given !== undefined && given !== false) {
    throw new UsageError(`--${flag}: applies to ${owners} only, not ${op}`);
  }
}

/** The ops the command line checks and benchmarks. */
export const OPS = [
  "gdn",
  "deltanet",
  "kda",
  "gla",
  "simple-gla",
  "retention",
  "linear-attn",
  "fmap",
  "attention",
  "gdn-decode",
  "deltanet-decode",
  "gla-decode",
  "kda-decode",
  "gdn-pool-decode",
  "attention-decode",
] as const;

/** One of {@link OPS}. */
export type OpName = (typeof OPS)[number];

const OP_ALIASES: Record<string, OpName> = {
  gdn: "gdn",
  "gated-deltanet": "gdn",
  deltanet: "deltanet",
  delta: "deltanet",
  kda: "kda",
  gla: "gla",
  "simple-gla": "simple-gla",
  simple_gla: "simple-gla",
  retention: "retention",
  retnet: "retention",
  "linear-attn": "linear-attn",
  linear_attn: "linear-attn",
  fmap: "fmap",
  "feature-map": "fmap",
  feature_map: "fmap",
  attention: "attention",
  "gdn-decode": "gdn-decode",
  gdn_decode: "gdn-decode",
  "deltanet-decode": "deltanet-decode",
  deltanet_decode: "deltanet-decode",
  "delta-decode": "deltanet-decode",
  "gla-decode": "gla-decode",
  gla_decode: "gla-decode",
  "kda-decode": "kda-decode",
  kda_decode: "kda-decode",
  "gdn-pool-decode": "gdn-pool-decode",
  gdn_pool_decode: "gdn-pool-decode",
  "attention-decode": "attention-decode",
  attention_decode: "attention-decode",
};

/**
 * The op a name stands for (aliases: `gated-deltanet`, `delta`, `simple_gla`, `retnet`, `linear_attn`,
 * `feature-map`, `feature_map`, `gdn_decode`, `deltanet_decode`, `delta-decode`, `gla_decode`,
 * `kda_decode`, `gdn_pool_decode`, `attention_decode`), or a UsageError listing the ops.
 */
export function parseOp(name: string | undefined): OpName {
  if (name === undefined) throw new UsageError(`missing op; ops: ${OPS.join(", ")}`);
  const op = OP_ALIASES[name.toLowerCase()];
  if (!op) throw new UsageError(`unknown op "${name}"; ops: ${OPS.join(", ")}`);
  return op;
}

/** The library function an op runs, as result files name it. */
export const OP_FUNCTION: Readonly<Record<OpName, string>> = {
  gdn: "chunkGatedDeltaRule",
  deltanet: "chunkDeltaRule",
  kda: "chunkKda",
  gla: "chunkGla",
  "simple-gla": "chunkSimpleGla",
  retention: "chunkRetention",
  "linear-attn": "chunkLinearAttn",
  fmap: "featureMapLinearAttention",
  attention: "attention",
  "gdn-decode": "GatedDeltaNetDecodeFwdOp",
  "deltanet-decode": "DeltaNetDecodeFwdOp",
  "gla-decode": "GLADecodeFwdOp",
  "kda-decode": "recurrentKdaDecode",
  "gdn-pool-decode": "recurrentGdnDecode",
  "attention-decode": "GroupedQueryAttentionDecodeWithKVCacheFwdOp",
};

/**
 * What an op is, for its shape, flags and modes: a chunked linear op (`linear`), feature-map linear
 * attention, softmax attention, one decode step of a linear op against its state (`state-decode`: a
 * `[B, H, K, V]` state, or the slots of a state pool), or one query token per sequence against a KV
 * cache (`cache-decode`).
 */
export type OpFamily = "linear" | "feature-map" | "attention" | "state-decode" | "cache-decode";

/** The family of each op. */
export const OP_FAMILY: Readonly<Record<OpName, OpFamily>> = {
  gdn: "linear",
  deltanet: "linear",
  kda: "linear",
  gla: "linear",
  "simple-gla": "linear",
  retention: "linear",
  "linear-attn": "linear",
  fmap: "feature-map",
  attention: "attention",
  "gdn-decode": "state-decode",
  "deltanet-decode": "state-decode",
  "gla-decode": "state-decode",
  "kda-decode": "state-decode",
  "gdn-pool-decode": "state-decode",
  "attention-decode": "cache-decode",
};

/** Whether an op is a decode step (one token per sequence, forward only, timed in GB/s). */
export function isDecode(op: OpName): boolean {
  return OP_FAMILY[op] === "state-decode" || OP_FAMILY[op] === "cache-decode";
}

/**
 * The modes an op times: attention fwd, bwd and fwdbwd; a decode step fwd alone; the others fwd and
 * fwdbwd.
 */
export function opModes(op: OpName): readonly Mode[] {
  if (op === "attention") return ["fwd", "bwd", "fwdbwd"];
  return isDecode(op) ? ["fwd"] : ["fwd", "fwdbwd"];
}

/** An op as messages name it: with its function where that is named otherwise, `gla (chunkGla)`. */
export function opLabel(op: OpName): string {
  return OP_FUNCTION[op] === op ? op : `${op} (${OP_FUNCTION[op]})`;
}

// "Ops: a, b, ..." wrapped at 100 columns.
function opsLines(items: string[]): string {
  const lines = ["Ops:"];
  items.forEach((item, i) => {
    const text = i < items.length - 1 ? `${item},` : item;
    if (lines[lines.length - 1].length + text.length + 1 > 100) lines.push(text);
    else lines[lines.length - 1] += ` ${text}`;
  });
  return lines.join("\n");
}

/** The ops' names, wrapped as the usage texts show them (`Ops: gdn, deltanet, ...`). */
export const OPS_NAMES: string = opsLines([...OPS]);

/**
 * The ops and what each runs, for the usage texts; the ops from gdn to linear-attn are the "linear ops"
 * (chunked, causal by construction).
 */
export const OPS_USAGE: string = opsLines(
  OPS.map((op) => op === "attention" ? "attention (softmax attention)" : opLabel(op)),
);

/**
 * The decode steps on a state pool (cli/pool_decode.ts).
 *
 * @example
 * ```ts
 * import type { PoolDecodeOp } from "./shape.ts";
 * const op: PoolDecodeOp = "kda-decode";
 * ```
 */
export type PoolDecodeOp = "kda-decode" | "gdn-pool-decode";

/**
 * Whether an op is a decode step on a state pool ({@link PoolDecodeOp}).
 *
 * @example
 * ```ts
 * import { isPoolDecode } from "./shape.ts";
 * console.log(isPoolDecode("gdn-pool-decode"), isPoolDecode("gdn-decode")); // true false
 * ```
 */
export function isPoolDecode(op: OpName): op is PoolDecodeOp {
  return op === "kda-decode" || op === "gdn-pool-decode";
}

/** The ops whose function takes `useQkL2norm` (the `--l2norm` flag). */
const L2NORM_OPS: readonly OpName[] = ["gdn", "deltanet", "gdn-decode", "deltanet-decode"];

/**
 * Refuses `--l2norm` for an op whose function has no in-kernel L2 norm of q and k (`useQkL2norm`), and
 * for the pool decode steps, which always apply it.
 */
export function checkL2norm(op: OpName, l2norm: boolean | undefined): void {
  if (l2norm && isPoolDecode(op)) {
    throw new UsageError(`--l2norm: ${opLabel(op)} L2-normalises q and k in every step; drop the flag`);
  }
  if (l2norm && !L2NORM_OPS.includes(op)) {
    const ops = L2NORM_OPS.join(", ");
    throw new UsageError(`--l2norm: ${opLabel(op)} takes no useQkL2norm; the flag applies to ${ops}`);
  }
}

// Why an op takes no causal mask (undefined for attention, which does).
function noMask(op: OpName): string | undefined {
  switch (OP_FAMILY[op]) {
    case "attention":
      return undefined;
    case "linear":
      return `${op} is causal by construction`;
    case "feature-map":
      return `${op} is causal unless --bidirectional`;
    default:
      return `${opLabel(op)} runs one token per sequence, with no mask to choose`;
  }
}

/** Refuses `--backward` for a decode step, which has no backward to check, time or tune. */
export function checkBackward(op: OpName, backward: boolean | undefined): void {
  if (backward && isDecode(op)) {
    throw new UsageError(`--backward: ${opLabel(op)} is a decode step, forward only; drop the flag`);
  }
}

/** Refuses `--causal` for an op that takes no mask (every op but attention). */
export function checkCausal(op: OpName, causal: boolean | undefined): void {
  const why = noMask(op);
  if (causal && why) throw new UsageError(`--causal: ${why}; drop the flag`);
}

/** Sizes of one problem, read from a shape name. */
export interface Shape {
  /** The name as given (canonical order for names made here). */
  name: string;
  /** Batch (B). */
  batch: number;
  /** Tokens per sequence (T or S); for attention the query length; 1 for the decode ops. */
  seq: number;
  /** Attention: key length (SKV, default the query length); attention-decode: the cache length. */
  seqKv: number;
  /** Heads (H): attention's query heads, the linear ops' value heads. */
  heads: number;
  /** Attention: key/value heads (HKV or KV, default H). */
  headsKv: number;
  /** Linear ops and their decode steps: query/key heads (HK, default H). */
  headsQk: number;
  /** Head dimension (D); the linear ops' key dimension. */
  dim: number;
  /** Linear ops, their decode steps and fmap: value dimension (DV, default D). */
  dimV: number;
  /** A `_causal` part was given. */
  causal: boolean;
}

const PART = /^(B|T|S|SKV|H|HKV|KV|HK|D|DV)(\d+)$/i;

// The parts a family takes besides B, H and D, and how a refusal says so.
const TAKES: Record<OpFamily, { parts: readonly string[]; says: string }> = {
  linear: {
    parts: ["T", "HK", "DV"],
    says: "linear ops take HK for query/key heads and DV for the value dim",
  },
  "feature-map": {
    parts: ["T", "DV"],
    says: "fmap takes DV for the value dim; q, k and v share their heads",
  },
  attention: { parts: ["T", "SKV", "HKV"], says: "attention takes HKV and SKV" },
  "state-decode": {
    parts: ["T", "HK", "DV"],
    says: "the state decode steps take HK for query/key heads and DV for the value dim",
  },
  "cache-decode": {
    parts: ["T", "SKV", "HKV"],
    says: "attention-decode takes HKV, and SKV or S for the cache length",
  },
};

// The sequence lengths of a shape's parts: tokens (or the query length) and the key length; T (or S) is
// required but for the decode ops, which step one token (T, if given, is 1; attention-decode's cache
// length is SKV, or S when SKV is absent).
function lengths(text: string, op: OpName, found: Record<string, number>): { seq: number; seqKv: number } {
  const family = OP_FAMILY[op];
  if (family === "cache-decode") {
    const cache = found.SKV ?? found.T;
    if (cache === undefined) throw new UsageError(`shape "${text}": missing SKV (or S), the cache length`);
    if (found.SKV !== undefined && found.T !== undefined && found.T !== 1) {
      throw new UsageError(`shape "${text}": ${op} takes one query token per sequence; S, beside SKV, is 1`);
    }
    return { seq: 1, seqKv: cache };
  }
  if (family === "state-decode") {
    if ((found.T ?? 1) !== 1) {
      throw new UsageError(`shape "${text}": ${op} steps one token per sequence; T, if given, is 1`);
    }
    return { seq: 1, seqKv: 1 };
  }
  if (found.T === undefined) throw new UsageError(`shape "${text}": missing T (or S)`);
  return { seq: found.T, seqKv: found.SKV ?? found.T };
}

/**
 * Reads a shape name: parts joined by `_`, each a letter code and a positive size (`B` batch, `T` or
 * `S` tokens, `H` heads, `D` head dim; attention also `SKV` key length, `HKV` / `KV` key-value heads;
 * the linear ops `HK` query/key heads, `DV` value dim), and optionally `causal` (attention only). B, H
 * and D are required, and T (or S) but for the decode ops: gdn-decode, deltanet-decode, gla-decode,
 * kda-decode and gdn-pool-decode step one token (T, if given, is 1; they take HK and DV),
 * attention-decode one query token against a cache of SKV (or S) rows (it takes HKV). fmap takes DV. A
 * part that does not fit the op is refused, and so are head dims above the kernels' largest (256) for the
 * linear ops and their decode steps. HK and HKV divide H.
 */
export function parseShape(text: string, op: OpName): Shape {
  const found: Record<string, number> = {};
  let causal = false;
  for (const part of text.split("_")) {
    if (part.toLowerCase() === "causal") {
      causal = true;
      continue;
    }
    const m = PART.exec(part);
    if (!m) {
      throw new UsageError(
        `shape "${text}": cannot read "${part}"; expected parts like B2_T1024_H8_D128 ` +
          `(attention: B2_S1024_H8_HKV2_D128)`,
      );
    }
    let key = m[1].toUpperCase();
    if (key === "S") key = "T";
    if (key === "KV") key = "HKV";
    if (key in found) throw new UsageError(`shape "${text}": ${m[1]} given twice`);
    const size = Number(m[2]);
    if (!Number.isSafeInteger(size) || size < 1) {
      throw new UsageError(`shape "${text}": ${part} must be at least 1`);
    }
    found[key] = size;
  }
  for (const need of ["B", "H", "D"]) {
    if (!(need in found)) throw new UsageError(`shape "${text}": missing ${need}`);
  }
  const family = OP_FAMILY[op];
  const { parts, says } = TAKES[family];
  for (const key of ["SKV", "HKV", "HK", "DV"]) {
    if (key in found && !parts.includes(key)) {
      throw new UsageError(`shape "${text}": ${key} does not apply to ${op} (${says})`);
    }
  }
  const { seq, seqKv } = lengths(text, op, found);
  const why = noMask(op);
  if (why && causal) throw new UsageError(`shape "${text}": ${why}; drop "causal"`);
  const capped = family === "linear" || family === "state-decode";
  if (capped && Math.max(found.D, found.DV ?? 0) > MAX_HEAD_DIM) {
    const part = found.D > MAX_HEAD_DIM ? `D${found.D}` : `DV${found.DV}`;
    const limit = `head dims D and DV of at most ${MAX_HEAD_DIM}`;
    throw new UsageError(`shape "${text}": ${opLabel(op)} takes ${limit}, got ${part}`);
  }
  const heads = found.H;
  const headsKv = found.HKV ?? heads, headsQk = found.HK ?? heads;
  if (heads % headsKv !== 0) {
    throw new UsageError(`shape "${text}": H${heads} is not a multiple of HKV${headsKv}`);
  }
  if (heads % headsQk !== 0) {
    throw new UsageError(`shape "${text}": H${heads} is not a multiple of HK${headsQk}`);
  }
  return {
    name: text,
    batch: found.B,
    seq,
    seqKv,
    heads,
    headsKv,
    headsQk,
    dim: found.D,
    dimV: found.DV ?? found.D,
    causal,
  };
}

/**
 * The canonical name of a shape, as result files and charts show it: the state decode steps' with T1
 * (the way the recorded decode benchmarks name it), attention-decode's with the cache length as SKV.
 */
export function shapeName(s: Shape, op: OpName): string {
  const family = OP_FAMILY[op];
  const attention = family === "attention" || family === "cache-decode";
  const parts = [`B${s.batch}`];
  if (family === "cache-decode") parts.push(`SKV${s.seqKv}`);
  else parts.push(`${attention ? "S" : "T"}${s.seq}`);
  if (family === "attention" && s.seqKv !== s.seq) parts.push(`SKV${s.seqKv}`);
  parts.push(`H${s.heads}`);
  if (attention && s.headsKv !== s.heads) parts.push(`KV${s.headsKv}`);
  if (!attention && s.headsQk !== s.heads) parts.push(`HK${s.headsQk}`);
  parts.push(`D${s.dim}`);
  if (!attention && s.dimV !== s.dim) parts.push(`DV${s.dimV}`);
  if (s.causal) parts.push("causal");
  return parts.join("_");
}

const DTYPES: Record<string, DType> = {
  bf16: "bfloat16",
  bfloat16: "bfloat16",
  fp16: "float16",
  f16: "float16",
  float16: "float16",
  half: "float16",
  fp32: "float32",
  f32: "float32",
  float32: "float32",
};

/** The dtype a spelling names (`bf16`, `fp16`, `fp32` and the full names), or a UsageError. */
export function parseDtype(text: string, op: OpName): DType {
  const dtype = DTYPES[text.toLowerCase()];
  if (!dtype) throw new UsageError(`dtype "${text}": expected bf16, fp16 or fp32`);
  const family = OP_FAMILY[op];
  if ((family === "attention" || family === "cache-decode") && dtype === "float32") {
    throw new UsageError(`dtype "${text}": ${op} runs in float16 or bfloat16`);
  }
  return dtype;
}

/** A whole-number flag value (`fallback` when absent), or a UsageError naming the flag. */
export function parseCount(text: string | undefined, flag: string, fallback: number, min = 0): number {
  return text === undefined ? fallback : readWholeNumber(`--${flag}`, text, min, (m) => new UsageError(m));
}
