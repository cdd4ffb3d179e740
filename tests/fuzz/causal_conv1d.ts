// The fuzz catalog's generator for the causal depthwise convolution: valid calls of the forward, the
// result's backward and the backward function on small random inputs (widths 1..8, silu or none,
// dense or packed with empty sequences and spare capacity, histories in and out, three dtypes with
// float32 or 16-bit weights), and mutations that make a call certainly invalid.
import * as ak from "../../mod.ts";
import type { Case, Rng, Scope } from "./cases.ts";
import { caseMakers, dispose } from "./family.ts";

const { valid, invalid } = caseMakers("causal conv1d");

/** Random offsets over T tokens: some sequences empty, the last offset at T or below it. */
function offsets(rng: Rng, T: number): number[] {
  const cu = [0];
  const n = rng.int(1, 4);
  for (let i = 0; i < n; i++) cu.push(Math.min(T, cu[i] + rng.pick([0, 1, rng.int(0, T)])));
  if (rng.chance(0.5)) cu[n] = T;
  return cu;
}

/** The causal conv1d generator (registered in cases.ts). */
export function causalConv1dCases(rng: Rng, scope: Scope, bad: boolean): Case {
  const dtype = rng.pick<ak.DType>(["float32", "bfloat16", "float16"]);
  const packed = rng.chance(0.4);
  const B = packed ? 1 : rng.int(1, 3), T = rng.pick([0, 1, 2, 7, 33]), C = rng.pick([1, 3, 8, 17]);
  const W = rng.pick([1, 2, 3, 4, 8]);
  const cu = packed ? offsets(rng, T) : undefined;
  const N = cu ? cu.length - 1 : B;
  const x = scope.randn([B, T, C], dtype, rng.int(0, 999));
  const weight = scope.randn([C, W], rng.chance(0.5) ? "float32" : dtype, rng.int(0, 999));
  const options: Omit<ak.CausalConv1dOptions, "out" | "returnFinalState"> = {
    activation: rng.pick([undefined, "silu", "swish"] as const),
    cuSeqlens: cu,
  };
  if (rng.chance(0.5)) options.initialState = scope.randn([N, W - 1, C], dtype, rng.int(0, 999));
  const dOutput = scope.randn([B, T, C], dtype, 7);
  // With spare capacity the output rows past the last offset are unspecified: check dx instead.
  const whole = !cu || cu[cu.length - 1] === T;
  if (!bad) {
    const returnFinalState = rng.chance(0.5);
    switch (rng.int(0, 2)) {
      case 0:
        return valid("forward + result.backward", () => {
          using r = ak.causalConv1d(x, weight, { ...options, returnFinalState });
          const dFinalState = r.finalState ? scope.randn([N, W - 1, C], dtype, 8) : undefined;
          using g = r.backward(dOutput, { dFinalState });
          return scope.keep((whole ? r.output : g.dx).clone());
        });
      case 1:
        return valid("forward", () => {
          const r = ak.causalConv1d(x, weight, { ...options, returnFinalState: true });
          const out = scope.keep(r.finalState!.clone());
          dispose(r);
          return out;
        });
      default:
        return valid("backward", () => {
          const g = ak.causalConv1dBackward(dOutput, x, weight, options);
          const out = scope.keep(g.dweight.clone());
          dispose(g);
          return out;
        });
    }
  }
  const call = (a: unknown, w: unknown, o: unknown) =>
    dispose(ak.causalConv1d(a as ak.Tensor, w as ak.Tensor, o as ak.CausalConv1dOptions));
  switch (rng.int(0, 6)) {
    case 0:
      return invalid(
        "unknown option",
        () => call(x, weight, { ...options, [rng.pick(["cu_seqlens", "initial_state", "act", "width"])]: 1 }),
      );
    case 1:
      return invalid(
        "bad activation",
        () => call(x, weight, { ...options, activation: rng.pick(["relu", 1, true]) }),
      );
    case 2: {
      const shape = rng.pick([[C + 1, W], [C, 9], [C, 0], [C]]);
      return invalid("weight of another shape", () => call(x, scope.randn(shape, "float32", 1), options));
    }
    case 3: {
      const other = dtype === "float32" ? "bfloat16" : (dtype === "bfloat16" ? "float16" : "bfloat16");
      return invalid("weight of a third dtype", () => call(x, scope.randn([C, W], other, 2), options));
    }
    case 4:
      return invalid(
        "initial state of another shape",
        () => call(x, weight, { ...options, initialState: scope.randn([N + 1, W - 1, C], dtype, 3) }),
      );
    case 5:
      return invalid("offsets that do not fit", () =>
        call(scope.randn([1, T, C], dtype, 4), weight, {
          ...options,
          initialState: undefined,
          cuSeqlens: rng.pick([[0, T + 1], [1, T + 1], [0, 2, 1], [0]]),
        }));
    default: {
      const dO = scope.randn([B, T + 1, C], dtype, 5);
      return invalid(
        "backward with a dOutput of another shape",
        () => dispose(ak.causalConv1dBackward(dO, x, weight, options)),
      );
    }
  }
}
