/**
 * Makes the case of an op, and the options `check` and `bench` share: device, dtype, seed, timing.
 *
 * @module
 */
import {
  AttnkitError,
  cudaAvailable,
  type Device,
  parseDevice,
  synchronize,
  Tensor,
  timeIt,
} from "../mod.ts";
import { attentionCase, attentionOracleSeconds } from "./attention.ts";
import { attentionDecodeCase, type CacheFlags, parseCacheFlags } from "./attention_decode.ts";
import { type FeatureMapFlags, fmapCase, fmapOracleSeconds, parseFeatureMapFlags } from "./feature_map.ts";
import { glaCase, glaOracleSeconds } from "./gla.ts";
import { kdaCase, kdaOracleSeconds } from "./kda.ts";
import { linearCase, linearOracleSeconds } from "./linear.ts";
import { parsePoolFlags, poolDecodeCase, type PoolFlags } from "./pool_decode.ts";
import { stateDecodeCase } from "./state_decode.ts";
import type { CaseSettings, Mode, OpCase } from "./problem.ts";
import {
  checkCausal,
  checkL2norm,
  CliError,
  isPoolDecode,
  type OpName,
  type Shape,
  UsageError,
} from "./shape.ts";

/** The usage lines of the op-specific flags of {@link CASE_OPTIONS} but --causal, as `check` and `bench` print them. */
export const CASE_FLAGS_USAGE =
  `  --l2norm             gdn, deltanet and their decode steps: L2-normalise q and k in the kernel
                       (useQkL2norm)
  --feature-map PHI    fmap: elu+1 (default), relu, identity, softmax_free (also elu, softmax-free)
  --bidirectional      fmap: every token sees every other (default causal)
  --eps E              fmap: the normaliser's eps (default 1e-6; not softmax_free)
  --cosformer          fmap: cosformer's position weights cos, sin(pi t / 2T) (cosWeight, sinWeight)
  --page-size P        attention-decode: a paged cache, pages of P rows drawn at random from the pool
  --ragged             attention-decode: rows per sequence drawn in [1, SKV] (default: SKV each)
  --gate-transform G   kda-decode: bounded (default) or softplus
  --lower-bound X      kda-decode, bounded: the gate's floor, at most 0 (default -5; --lower-bound=-3)
  --state-dtype S      kda-decode, gdn-pool-decode: the state pool's dtype, fp32 (default) or bf16`;

/**
 * The op-specific flags `check` and `bench` share, for their parseArgs: the mask, the L2 norm, fmap's,
 * attention-decode's, the pool decode steps'.
 */
export const CASE_OPTIONS = {
  causal: { type: "boolean", default: false },
  l2norm: { type: "boolean", default: false },
  "feature-map": { type: "string" },
  bidirectional: { type: "boolean", default: false },
  eps: { type: "string" },
  cosformer: { type: "boolean", default: false },
  "page-size": { type: "string" },
  ragged: { type: "boolean", default: false },
  "gate-transform": { type: "string" },
  "lower-bound": { type: "string" },
  "state-dtype": { type: "string" },
} as const;

/** The values of {@link CASE_OPTIONS} as parseArgs returns them. */
export interface CaseFlagValues {
  causal?: boolean;
  l2norm?: boolean;
  "feature-map"?: string;
  bidirectional?: boolean;
  eps?: string;
  cosformer?: boolean;
  "page-size"?: string;
  ragged?: boolean;
  "gate-transform"?: string;
  "lower-bound"?: string;
  "state-dtype"?: string;
}

/** Reads the op-specific flags, each refused (a UsageError) for an op that does not take it. */
export function caseFlags(
  op: OpName,
  values: CaseFlagValues,
): { fmap: FeatureMapFlags; cache: CacheFlags; pool: PoolFlags } {
  checkCausal(op, values.causal);
  checkL2norm(op, values.l2norm);
  return {
    fmap: parseFeatureMapFlags(op, values["feature-map"], values.bidirectional, values.eps, values.cosformer),
    cache: parseCacheFlags(op, values["page-size"], values.ragged),
    pool: parsePoolFlags(op, values["gate-transform"], values["lower-bound"], values["state-dtype"]),
  };
}

/**
 * The case of an op; `causal` applies to attention (the linear ops are causal by construction, fmap
 * unless `settings.bidirectional`, and a decode step has no mask).
 */
export function makeCase(op: OpName, settings: CaseSettings, causal: boolean): OpCase {
  if (op === "attention") return attentionCase(settings, causal);
  checkCausal(op, causal);
  if (op === "gdn" || op === "deltanet") return linearCase(settings, op === "gdn");
  if (op === "kda") return kdaCase(settings);
  if (op === "fmap") return fmapCase(settings);
  if (op === "gdn-decode" || op === "deltanet-decode" || op === "gla-decode") {
    return stateDecodeCase(settings, op);
  }
  if (isPoolDecode(op)) return poolDecodeCase(settings, op);
  if (op === "attention-decode") return attentionDecodeCase(settings);
  return glaCase(settings, op);
}

/**
 * Seconds the float64 oracle would take over `batches` batch rows of an op's shape (a rough estimate);
 * `causal` is attention's mask, or fmap's causal form.
 */
export function oracleSeconds(
  op: OpName,
  shape: Shape,
  causal: boolean,
  batches: number,
  backward: boolean,
): number {
  if (op === "attention") return attentionOracleSeconds(shape, causal, batches, backward);
  // A decode step is the oracle of its family over one token, forward only (the shape's seq is 1).
  if (op === "attention-decode") return attentionOracleSeconds(shape, false, batches, false);
  if (
    op === "gdn" || op === "deltanet" || op === "gdn-decode" || op === "deltanet-decode" || isPoolDecode(op)
  ) {
    return linearOracleSeconds(shape, batches, backward);
  }
  if (op === "kda") return kdaOracleSeconds(shape, batches, backward);
  if (op === "fmap") return fmapOracleSeconds(shape, causal, batches, backward);
  return glaOracleSeconds(shape, batches, backward);
}

/** The device a `--device` value names (default: the first GPU when there is one, else the CPU). */
export function chooseDevice(text: string | undefined): Device {
  const name = text ?? (cudaAvailable() ? "cuda" : "cpu");
  if (!/^(cpu|cuda(:\d+)?)$/.test(name)) {
    throw new UsageError(`--device: expected cpu, cuda or cuda:N, got "${name}"`);
  }
  try {
    parseDevice(name, "--device");
  } catch (e) {
    // The device is absent (or the library cannot be loaded): no usage to show, exit status 1.
    throw new CliError(e instanceof AttnkitError ? e.message : String(e), 1, false);
  }
  return name as Device;
}

/** How many calls to time. */
export interface TimingPlan {
  /** Untimed calls first. */
  warmup: number;
  /** Timed calls (their median is reported). */
  iterations: number;
  /**
   * When the first call takes longer than SLOW_CALL_SECONDS, time that one call only (set unless the
   * counts were given on the command line).
   */
  adaptive: boolean;
}

/** A call slower than this (seconds) is timed once when the plan is adaptive. */
export const SLOW_CALL_SECONDS = 2;

/** The default timing: a few calls on the CPU, as many as `do_bench`-style medians want on a GPU. */
export function defaultTiming(device: Device): TimingPlan {
  return device === "cpu"
    ? { warmup: 1, iterations: 3, adaptive: true }
    : { warmup: 3, iterations: 20, adaptive: true };
}

/** What {@link timeMode} measured. */
export interface ModeTiming {
  /** Median milliseconds. */
  ms: number;
  /** The calls the median is of. */
  calls: number;
}

/**
 * Times one mode of a case: the median milliseconds of `iterations` calls after `warmup` calls; on a
 * GPU the L2 cache is cleared before each call, as triton's `do_bench` does. The first call is timed
 * on the host to see what lies ahead: when an adaptive plan's first call is slow (a large shape on
 * the CPU backend) that call is the measurement; `slow` hears of a long run ahead.
 */
export function timeMode(
  c: OpCase,
  mode: Mode,
  device: Device,
  plan: TimingPlan,
  slow?: (firstSeconds: number, calls: number) => void,
): ModeTiming {
  const fn = c.call(mode);
  synchronize(device);
  const t0 = performance.now();
  fn();
  synchronize(device);
  const first = (performance.now() - t0) / 1000;
  if (plan.adaptive && first > SLOW_CALL_SECONDS) return { ms: first * 1000, calls: 1 };
  const warmup = Math.max(0, plan.warmup - 1);
  if (first > 1) slow?.(first, warmup + plan.iterations);
  using flush = Tensor.empty([device === "cpu" ? 1 : 64 << 20], { dtype: "float32", device });
  const before = device === "cpu" ? undefined : () => void flush.fill(0);
  return {
    ms: timeIt(fn, { device, warmup, iterations: plan.iterations, before }).medianMs,
    calls: plan.iterations,
  };
}
