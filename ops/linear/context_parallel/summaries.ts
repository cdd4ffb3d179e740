/**
 * The algebra of state summaries. Every delta-rule token step is affine in the state, so a run of tokens
 * is one map `S_out = T S_in + b` on attnkit's `[K, V]` state (per value head): its summary is the pair
 * (`bias` b `[..., H, K, V]`, `transition` T `[..., H, K, K]`), float32. A backward run has the same
 * shape read in reverse, `dS_in = T^T dS_out + c`, so the same functions compose cotangent summaries.
 *
 * @module
 */
import { invalidArgument } from "../../../ffi/errors.ts";
import { expectTensor } from "../../checks.ts";
import { Tensor } from "../../tensor.ts";

/** What a run of tokens does to the state entering it: `S_out = transition S_in + bias`. */
export interface StateSummary extends Disposable {
  /** `[..., H, K, V]` float32: the state the run leaves from a zero state. */
  readonly bias: Tensor;
  /** `[..., H, K, K]` float32: how the run maps the state entering it. */
  readonly transition: Tensor;
}

/** Makes a summary that owns its two tensors (disposing it disposes them). */
export function summaryOf(bias: Tensor, transition: Tensor): StateSummary {
  return {
    bias,
    transition,
    [Symbol.dispose]() {
      bias.dispose();
      transition.dispose();
    },
  };
}

/** Checks a summary's tensors: float32, `[..., H, K, V]` and `[..., H, K, K]` with the same leading dims. */
export function checkSummary(op: string, name: string, s: unknown): StateSummary {
  if (s === null || typeof s !== "object") {
    throw invalidArgument(op, `${name}: expected a state summary { bias, transition }, got ${s}`);
  }
  const { bias, transition } = s as StateSummary;
  expectTensor(op, `${name}.bias`, bias);
  expectTensor(op, `${name}.transition`, transition);
  for (const [what, t] of [["bias", bias], ["transition", transition]] as const) {
    if (t.dtype !== "float32") throw invalidArgument(op, `${name}.${what}: expected float32, got ${t.dtype}`);
    if (t.ndim < 3) throw invalidArgument(op, `${name}.${what}: expected [..., H, K, *], got [${t.shape}]`);
  }
  const lead = bias.shape.slice(0, -1), K = bias.shape[bias.ndim - 2];
  const fits = transition.ndim === bias.ndim &&
    transition.shape.slice(0, -1).every((d, i) => d === lead[i]) &&
    transition.shape[transition.ndim - 1] === K;
  if (!fits) {
    throw invalidArgument(
      op,
      `${name}.transition: expected [${[...lead, K]}] to fit bias [${bias.shape}], got [${transition.shape}]`,
    );
  }
  if (transition.device !== bias.device) {
    throw invalidArgument(op, `${name}: bias on ${bias.device} and transition on ${transition.device}`);
  }
  return s as StateSummary;
}

/**
 * The summary of a run that changes nothing: bias 0, transition the identity.
 *
 * @example
 * ```ts
 * import { neutralSummary } from "@attnkit/attnkit";
 * using s = neutralSummary([2], 4, 8); // two heads, K 4, V 8
 * console.log(s.transition.shape); // [2, 4, 4]
 * ```
 */
export function neutralSummary(lead: readonly number[], K: number, V: number, device = "cpu"): StateSummary {
  const op = "neutralSummary";
  for (const [name, n] of [["K", K], ["V", V]] as const) {
    if (!Number.isInteger(n) || n < 1) {
      throw invalidArgument(op, `${name}: expected an integer >= 1, got ${n}`);
    }
  }
  if (!Array.isArray(lead) || !lead.every((d) => Number.isInteger(d) && d >= 0)) {
    throw invalidArgument(op, `lead: expected an array of dims >= 0, got ${lead}`);
  }
  const count = lead.reduce((a, b) => a * b, 1);
  const eye = new Float32Array(count * K * K);
  for (let m = 0; m < count; m++) for (let i = 0; i < K; i++) eye[(m * K + i) * K + i] = 1;
  return summaryOf(
    Tensor.zeros([...lead, K, V], { device }),
    Tensor.from(eye, { shape: [...lead, K, K], device }),
  );
}

/**
 * The state after a run: `transition state + bias` (the state `[..., H, K, V]`, float32).
 *
 * @example
 * ```ts
 * import { mergeState, neutralSummary, Tensor } from "@attnkit/attnkit";
 * using s = neutralSummary([2], 4, 8);
 * using state = Tensor.randn([2, 4, 8]);
 * using after = mergeState(state, s); // the neutral summary leaves it as it was
 * ```
 */
export function mergeState(state: Tensor, summary: StateSummary): Tensor {
  const op = "mergeState";
  expectTensor(op, "state", state);
  checkSummary(op, "summary", summary);
  if (state.shape.join() !== summary.bias.shape.join()) {
    throw invalidArgument(
      op,
      `state: expected the bias's shape [${summary.bias.shape}], got [${state.shape}]`,
    );
  }
  using moved = summary.transition.matmul(state);
  return moved.add(summary.bias);
}

/**
 * The summary of `first` followed by `second`: `T2 T1` and `T2 b1 + b2`. Composition is associative,
 * so any grouping of a sequence of runs gives the same map (up to float32 rounding).
 *
 * @example
 * ```ts
 * import { composeSummaries, neutralSummary } from "@attnkit/attnkit";
 * using a = neutralSummary([2], 4, 8);
 * using b = neutralSummary([2], 4, 8);
 * using both = composeSummaries(a, b);
 * ```
 */
export function composeSummaries(first: StateSummary, second: StateSummary): StateSummary {
  const op = "composeSummaries";
  checkSummary(op, "first", first);
  checkSummary(op, "second", second);
  if (first.bias.shape.join() !== second.bias.shape.join()) {
    throw invalidArgument(
      op,
      `second: expected bias [${first.bias.shape}] as first's, got [${second.bias.shape}]`,
    );
  }
  using carried = second.transition.matmul(first.bias);
  return summaryOf(carried.add(second.bias), second.transition.matmul(first.transition));
}
