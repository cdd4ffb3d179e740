/**
 * The command line's vocabulary: ops, shape names such as `B2_T1000_H4_D128` (the way FLA's and
 * attnkit's benchmark tables name shapes), dtype spellings, and the error that ends a command with a
 * usage message.
 *
 * @module
 */
import type { DType } from "../mod.ts";
import { MAX_HEAD_DIM } from "../ops/linear/delta_native.ts";

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

/** The ops the command line checks and benchmarks. */
export const OPS = [
  "gdn",
  "deltanet",
  "kda",
  "gla",
  "simple-gla",
  "retention",
  "linear-attn",
  "attention",
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
  attention: "attention",
};

/**
 * The op a name stands for (aliases: `gated-deltanet`, `delta`, `simple_gla`, `retnet`, `linear_attn`),
 * or a UsageError listing the ops.
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
  attention: "attention",
};

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

/** The ops and what each runs, for the usage texts; every op but attention is a "linear op". */
export const OPS_USAGE: string = opsLines(
  OPS.map((op) => op === "attention" ? "attention (softmax attention)" : opLabel(op)),
);

/** The ops whose function takes `useQkL2norm` (the `--l2norm` flag). */
const L2NORM_OPS: readonly OpName[] = ["gdn", "deltanet"];

/** Refuses `--l2norm` for an op whose function has no in-kernel L2 norm of q and k (`useQkL2norm`). */
export function checkL2norm(op: OpName, l2norm: boolean | undefined): void {
  if (l2norm && !L2NORM_OPS.includes(op)) {
    const ops = L2NORM_OPS.join(" and ");
    throw new UsageError(`--l2norm: ${opLabel(op)} takes no useQkL2norm; the flag applies to ${ops}`);
  }
}

/** Sizes of one problem, read from a shape name. */
export interface Shape {
  /** The name as given (canonical order for names made here). */
  name: string;
  /** Batch (B). */
  batch: number;
  /** Tokens per sequence (T or S); for attention the query length. */
  seq: number;
  /** Attention: key length (SKV, default the query length). */
  seqKv: number;
  /** Heads (H): attention's query heads, the linear ops' value heads. */
  heads: number;
  /** Attention: key/value heads (HKV or KV, default H). */
  headsKv: number;
  /** Linear ops: query/key heads (HK, default H). */
  headsQk: number;
  /** Head dimension (D); the linear ops' key dimension. */
  dim: number;
  /** Linear ops: value dimension (DV, default D). */
  dimV: number;
  /** A `_causal` part was given. */
  causal: boolean;
}

const PART = /^(B|T|S|SKV|H|HKV|KV|HK|D|DV)(\d+)$/i;

/**
 * Reads a shape name: parts joined by `_`, each a letter code and a positive size (`B` batch, `T` or
 * `S` tokens, `H` heads, `D` head dim; attention also `SKV` key length, `HKV` / `KV` key-value heads;
 * the linear ops `HK` query/key heads, `DV` value dim), and optionally `causal`. B, T (or S), H and D
 * are required. A part that does not fit the op is refused, and so are the linear ops' head dims above
 * the kernels' largest (256). Every linear op takes HK dividing H and DV apart from D.
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
  for (const need of ["B", "T", "H", "D"]) {
    if (!(need in found)) {
      throw new UsageError(`shape "${text}": missing ${need === "T" ? "T (or S)" : need}`);
    }
  }
  const linear = op !== "attention";
  const foreign = linear ? ["SKV", "HKV"] : ["HK", "DV"];
  for (const key of foreign) {
    if (key in found) {
      throw new UsageError(
        `shape "${text}": ${key} does not apply to ${op} (${
          linear
            ? "linear ops take HK for query/key heads and DV for the value dim"
            : "attention takes HKV and SKV"
        })`,
      );
    }
  }
  if (linear && causal) {
    throw new UsageError(`shape "${text}": ${op} is causal by construction; drop "causal"`);
  }
  if (linear && Math.max(found.D, found.DV ?? 0) > MAX_HEAD_DIM) {
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
    seq: found.T,
    seqKv: found.SKV ?? found.T,
    heads,
    headsKv,
    headsQk,
    dim: found.D,
    dimV: found.DV ?? found.D,
    causal,
  };
}

/** The canonical name of a shape, as result files and charts show it. */
export function shapeName(s: Shape, op: OpName): string {
  const parts = [`B${s.batch}`, `${op === "attention" ? "S" : "T"}${s.seq}`];
  if (op === "attention" && s.seqKv !== s.seq) parts.push(`SKV${s.seqKv}`);
  parts.push(`H${s.heads}`);
  if (op === "attention" && s.headsKv !== s.heads) parts.push(`KV${s.headsKv}`);
  if (op !== "attention" && s.headsQk !== s.heads) parts.push(`HK${s.headsQk}`);
  parts.push(`D${s.dim}`);
  if (op !== "attention" && s.dimV !== s.dim) parts.push(`DV${s.dimV}`);
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
  if (op === "attention" && dtype === "float32") {
    throw new UsageError(`dtype "${text}": attention runs in float16 or bfloat16`);
  }
  return dtype;
}

/** A non-negative integer flag value, or a UsageError naming the flag. */
export function parseCount(text: string | undefined, flag: string, fallback: number, min = 0): number {
  if (text === undefined) return fallback;
  const v = Number(text);
  if (!/^\d+$/.test(text) || !Number.isSafeInteger(v) || v < min) {
    throw new UsageError(`--${flag}: expected an integer of at least ${min}, got "${text}"`);
  }
  return v;
}
