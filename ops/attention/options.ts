/**
 * The option types shared by every softmax-attention op: which keys a query row sees (the mask) and
 * how raw scores are formed (the score modifier). Small on purpose, so later kinds (paged KV,
 * per-head scales, RoPE) can add fields without touching the ops that do not use them.
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";

/**
 * Which keys a query row admits. Query row i of a sequence sits at key position
 * `p = i + Skv - Sq` (bottom-right alignment); key j is admitted when
 * `p - windowSizeLeft <= j <= p + windowSizeRight` (-1: unlimited on that side), and with
 * `isCausal` also `j <= p`. A row that admits no key (e.g. causal with Sq > Skv) gets output 0
 * and LSE -inf.
 *
 * @example
 * ```ts
 * import type { MaskOptions } from "@attnkit/attnkit";
 * const slidingWindow: MaskOptions = { isCausal: true, windowSizeLeft: 255 };
 * ```
 */
export interface MaskOptions {
  /** Causal mask, bottom-right aligned; default false everywhere (no op implies it). */
  isCausal?: boolean;
  /** Keys admitted left of the row's position; -1 (default) for unlimited. */
  windowSizeLeft?: number;
  /**
   * Keys admitted right of the row's position; -1 (default) for unlimited. With `isCausal` the
   * causal bound wins (every condition must hold), so any right window acts as 0.
   */
  windowSizeRight?: number;
}

/**
 * How raw scores are formed: `z = scale * q . k`, then with `softcap` c > 0, `c * tanh(z / c)`
 * before masking and softmax.
 *
 * @example
 * ```ts
 * import type { ScoreOptions } from "@attnkit/attnkit";
 * const gemmaLike: ScoreOptions = { softcap: 50 };
 * ```
 */
export interface ScoreOptions {
  /** Score scale; default `1 / sqrt(D)` from the call's head dimension. */
  scale?: number;
  /** Cap c > 0 applied as `c * tanh(z / c)`; 0 or undefined for none. */
  softcap?: number;
}

/**
 * A mask with its defaults applied, as an op holds it and the C entries take it.
 *
 * @example
 * ```ts
 * import { GroupedQueryAttentionDenseFwdOp } from "@attnkit/attnkit";
 * const op = new GroupedQueryAttentionDenseFwdOp({ layout: "bshd", isCausal: true, windowSizeLeft: 128 });
 * console.log(op.mask); // { causal: true, windowLeft: 128, windowRight: 0 }
 * ```
 */
export interface ResolvedMask {
  /** Causal mask. */
  readonly causal: boolean;
  /** Left window, -1 for unlimited. */
  readonly windowLeft: number;
  /** Right window, -1 for unlimited (0 when causal). */
  readonly windowRight: number;
}

/**
 * Score options with their defaults applied, as an op holds them.
 *
 * @example
 * ```ts
 * import { GroupedQueryAttentionDenseFwdOp } from "@attnkit/attnkit";
 * const op = new GroupedQueryAttentionDenseFwdOp({ layout: "bshd", softcap: 30 });
 * console.log(op.score); // { scale: undefined, softcap: 30 }
 * ```
 */
export interface ResolvedScore {
  /** The scale; undefined means `1 / sqrt(D)` of the call. */
  readonly scale: number | undefined;
  /** 0 for none. */
  readonly softcap: number;
}

const INT32_MAX = 2 ** 31 - 1;

function windowSize(op: string, name: string, value: unknown): number {
  if (value === undefined) return -1;
  if (typeof value !== "number" || !Number.isInteger(value) || value < -1 || value > INT32_MAX) {
    throw invalidArgument(
      op,
      `${name}: expected -1 (unlimited) or an integer size >= 0, got ${String(value)}`,
    );
  }
  return value;
}

/**
 * Checks mask options and applies the defaults (not causal, unlimited windows).
 */
export function resolveMask(op: string, options: MaskOptions): ResolvedMask {
  const causal = options.isCausal ?? false;
  if (typeof causal !== "boolean") {
    throw invalidArgument(op, `isCausal: expected a boolean, got ${String(causal)}`);
  }
  const windowLeft = windowSize(op, "windowSizeLeft", options.windowSizeLeft);
  const windowRight = windowSize(op, "windowSizeRight", options.windowSizeRight);
  return Object.freeze({ causal, windowLeft, windowRight: causal ? 0 : windowRight });
}

/**
 * Checks score options and applies defaults. `scaleName` is what the op calls its scale option (the seed's
 * decode and prefill ops call it `smScale`).
 */
export function resolveScore(op: string, options: ScoreOptions, scaleName = "scale"): ResolvedScore {
  const { scale, softcap } = options;
  if (
    scale !== undefined && scale !== null &&
    !(typeof scale === "number" && Number.isFinite(scale) && scale > 0)
  ) {
    throw invalidArgument(
      op,
      `${scaleName}: expected a finite number > 0 (or undefined for 1 / sqrt(D)), got ${String(scale)}`,
    );
  }
  if (
    softcap !== undefined && softcap !== null &&
    !(typeof softcap === "number" && Number.isFinite(softcap) && softcap >= 0)
  ) {
    throw invalidArgument(
      op,
      `softcap: expected a finite number >= 0 (0 or undefined for none), got ${String(softcap)}`,
    );
  }
  return Object.freeze({ scale: scale ?? undefined, softcap: softcap ?? 0 });
}

/**
 * Checks a positive integer size given to an op's constructor (`batch`, `heads`, ...).
 */
export function expectSize(op: string, name: string, value: unknown, min = 1): number {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < min) {
    throw invalidArgument(op, `${name}: expected an integer >= ${min}, got ${String(value)}`);
  }
  return value;
}
