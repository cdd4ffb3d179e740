/**
 * `attnkit tune`: pre-tunes attention, attention decode, Gated DeltaNet or DeltaNet shapes into the
 * tuning cache (the op classes' `tune: true` on fresh random inputs), prints every candidate's time and
 * the winner; `--clear` empties the cache first.
 *
 * @module
 */
import { parseArgs } from "node:util";
import {
  clearTuneCache,
  DeltaNetBwdOp,
  DeltaNetFwdOp,
  type Device,
  type DType,
  GatedDeltaNetBTHDFwdOp,
  GatedDeltaNetBwdOp,
  GroupedQueryAttentionBwdOp,
  GroupedQueryAttentionDecodeWithKVCacheFwdOp,
  GroupedQueryAttentionFwdOp,
  lastChoice,
  setTuneCachePath,
  tuneCachePath,
} from "../mod.ts";
import { readTuneRecord } from "../ops/tune/cache.ts";
import { attentionInputs } from "./attention.ts";
import { chooseDevice } from "./cases.ts";
import { deltaGates } from "./linear.ts";
import { LinearTensors } from "./linear_problem.ts";
import {
  checkBackward,
  checkCausal,
  opLabel,
  type OpName,
  parseDtype,
  parseOp,
  parseShape,
  type Shape,
  UsageError,
} from "./shape.ts";

/** The usage of `attnkit tune`. */
export const TUNE_USAGE =
  `Usage: attnkit tune <attention|attention-decode|gdn|deltanet> --shapes A,B,... [options]

Tunes each shape (every kernel that can serve it, timed against the planner's choice, outputs compared)
and keeps the winners in the tuning cache, where op classes built with tune: true find them (attention:
GroupedQueryAttentionFwdOp / BwdOp; attention-decode: GroupedQueryAttentionDecodeWithKVCacheFwdOp;
gdn: GatedDeltaNetBTHDFwdOp / GatedDeltaNetBwdOp with useQkL2norm; deltanet: DeltaNetFwdOp /
DeltaNetBwdOp with useQkL2norm, all bshd). The other ops (kda, gla, simple-gla, retention, linear-attn,
fmap, gdn-decode, deltanet-decode, gla-decode, kda-decode, gdn-pool-decode) take no tune option: the
planner picks their kernels (gdn-decode, deltanet-decode: or kernelMap), and tune refuses them.

Options:
  --shapes LIST    e.g. B2_S3000_H24_KV8_D128_causal (attention), B1_SKV65536_H32_KV8_D128
                   (attention-decode: SKV the cache length), B3_T5000_H24_D128 (gdn, deltanet)
  --dtype DTYPE    bf16 (default) or fp16; gdn and deltanet also fp32
  --device DEVICE  cpu, cuda, cuda:N (default: cuda when present)
  --causal         attention: causal mask for every shape (also a "_causal" shape suffix)
  --backward       tune the backward too (not attention-decode, a forward-only step)
  --cache PATH     the cache file (default ${tuneCachePath()})
  --clear          empty the cache first
  -h, --help       this text

Examples:
  attnkit tune attention --shapes B2_S3000_H24_KV8_D128_causal --backward
  attnkit tune attention-decode --shapes B1_SKV65536_H32_KV8_D128
  attnkit tune gdn --shapes B3_T5000_H24_D128 --backward`;

/** The ops whose op classes take `tune: true`. */
type TunedOp = "attention" | "attention-decode" | "gdn" | "deltanet";

// The other ops' functions (and the state decode op classes) take no tune option: the planner alone picks
// their kernels.
function isTuned(op: OpName): op is TunedOp {
  return op === "attention" || op === "attention-decode" || op === "gdn" || op === "deltanet";
}

function tuneLinear(op: "gdn" | "deltanet", shape: Shape, dtype: DType, device: Device, backward: boolean) {
  // The inputs `attnkit check` and `bench` use, with the in-kernel L2 norm the op classes are built with.
  using x = new LinearTensors({ shape, dtype, device, seed: 1, l2norm: true });
  const { q, k, v, dO } = x;
  const { g, beta } = deltaGates(x, op === "gdn");
  const options = { layout: "bshd" as const, useQkL2norm: true, tune: true };
  if (op === "gdn") {
    using fwd = new GatedDeltaNetBTHDFwdOp(options).forward(q, k, v, g!, beta);
    report(`${shape.name} forward`);
    if (!backward) return;
    using _grads = new GatedDeltaNetBwdOp(options).backward(dO, q, k, v, g!, beta, fwd.chunkStates);
  } else {
    using fwd = new DeltaNetFwdOp(options).forward(q, k, v, beta);
    report(`${shape.name} forward`);
    if (!backward) return;
    using _grads = new DeltaNetBwdOp(options).backward(dO, q, k, v, beta, fwd.chunkStates);
  }
  report(`${shape.name} backward`);
}

// The decode op class over a contiguous cache of the shape's SKV rows, on the check's inputs.
function tuneDecode(shape: Shape, dtype: DType, device: Device): void {
  const { batch, heads, headsKv, seqKv, dim } = shape;
  const op = new GroupedQueryAttentionDecodeWithKVCacheFwdOp({
    batch,
    heads,
    headsKv,
    seqlenKv: seqKv,
    dim,
    tune: true,
  });
  using x = attentionInputs({ shape, dtype, device, seed: 1, l2norm: false });
  using q = x.q.reshape([batch, heads, dim]); // one query token per sequence
  using _o = op.forward(q, x.k, x.v);
  report(`${shape.name} decode`);
}

function tuneShape(op: TunedOp, shape: Shape, dtype: DType, device: Device, backward: boolean): void {
  if (op === "attention-decode") return tuneDecode(shape, dtype, device);
  if (op !== "attention") return tuneLinear(op, shape, dtype, device, backward);
  if (shape.seqKv !== shape.seq) {
    throw new UsageError(`shape "${shape.name}": tune takes square shapes (no SKV)`);
  }
  const options = {
    layout: "bshd" as const,
    batch: shape.batch,
    heads: shape.heads,
    headsKv: shape.headsKv,
    seqLen: shape.seq,
    dim: shape.dim,
    isCausal: shape.causal,
    tune: true,
  };
  using x = attentionInputs({ shape, dtype, device, seed: 1, l2norm: false });
  const { q, k, v, dO } = x;
  using fwd = new GroupedQueryAttentionFwdOp(options).forward(q, k, v);
  report(`${shape.name} forward`);
  if (!backward) return;
  using _grads = new GroupedQueryAttentionBwdOp(options).backward(dO, q, k, v, fwd.output, fwd.lse);
  report(`${shape.name} backward`);
}

function report(what: string): void {
  const choice = lastChoice()!;
  const record = choice.key ? readTuneRecord(choice.key) : undefined;
  const name = (spec: Readonly<Record<string, string>>) => Object.values(spec).join(",") || "planner";
  console.log(`${what}: ${name(choice.spec)} (${choice.source === "cache" ? "cached" : "tuned"})`);
  for (const c of record?.candidates ?? []) {
    const time = c.ms === null ? `- (${c.note ?? ""})` : `${c.ms.toFixed(4)} ms`;
    console.log(`  ${name(c.spec).padEnd(20)} ${time}`);
  }
}

/** Runs `attnkit tune`; returns the exit status. */
export function tuneCommand(args: string[]): number {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      shapes: { type: "string" },
      dtype: { type: "string", default: "bf16" },
      device: { type: "string" },
      causal: { type: "boolean", default: false },
      backward: { type: "boolean", default: false },
      cache: { type: "string" },
      clear: { type: "boolean", default: false },
      help: { type: "boolean", short: "h", default: false },
    },
  });
  if (values.help) {
    console.log(TUNE_USAGE);
    return 0;
  }
  if (positionals.length !== 1) {
    throw new UsageError(
      `tune: expected the op "attention", "attention-decode", "gdn" or "deltanet", got ${
        JSON.stringify(positionals.join(" "))
      }`,
    );
  }
  const op = parseOp(positionals[0]);
  if (!isTuned(op)) {
    throw new UsageError(
      `${opLabel(op)} has nothing to tune: it takes no tune option, the planner picks ` +
        `its kernels (tune serves attention, attention-decode, gdn and deltanet; check and bench run ${op})`,
    );
  }
  checkBackward(op, values.backward);
  const dtype = parseDtype(values.dtype!, op);
  if (values.cache !== undefined) setTuneCachePath(values.cache);
  if (values.clear) clearTuneCache();
  if (!values.shapes) {
    if (values.clear) return 0;
    throw new UsageError("--shapes: required (e.g. B2_S3000_H24_KV8_D128_causal, B3_T5000_H24_D128)");
  }
  const device = chooseDevice(values.device);
  const shapes = values.shapes.split(",").map((s) => {
    const shape = parseShape(s.trim(), op);
    checkCausal(op, values.causal);
    return { ...shape, causal: shape.causal || values.causal! };
  });
  console.log(`tuning cache: ${tuneCachePath()}`);
  for (const shape of shapes) tuneShape(op, shape, dtype, device, values.backward!);
  return 0;
}
