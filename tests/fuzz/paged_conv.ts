// The fuzz catalog's generator for the causal convolution over a paged history pool: valid prefill
// (dense or packed, empty sequences, spare rows) and decode steps (with or without indices, padding,
// fresh slots), and mutations that make a call certainly invalid (among them an index past the pool and a
// live slot named twice).
import * as ak from "../../mod.ts";
import type { Case, Rng, Scope } from "./cases.ts";
import { caseMakers } from "./family.ts";

const { valid, invalid } = caseMakers("paged conv1d");

/** The paged conv1d generator (registered in cases.ts). */
export function pagedConvCases(rng: Rng, scope: Scope, bad: boolean): Case {
  const dtype = rng.pick<ak.DType>(["float32", "bfloat16", "float16"]);
  const C = rng.pick([1, 3, 8]), W = rng.pick([2, 3, 4, 8]);
  const N = rng.int(1, 3), slots = N + rng.int(1, 2);
  const weight = scope.randn([C, W], rng.chance(0.5) ? "float32" : dtype, rng.int(0, 999));
  const pool = scope.randn([slots, W - 1, C], dtype, rng.int(0, 999));
  const int32 = (v: number[]) => scope.keep(ak.Tensor.from(v, { dtype: "int32", device: scope.device }));
  const indices = int32(Array.from({ length: N }, (_, n) => (rng.chance(0.2) ? -rng.int(0, 1) : n + 1)));
  const options: ak.PagedCausalConv1dOptions = { activation: rng.pick([undefined, "silu"] as const) };
  // The fused kernel is CUDA only: impl "fused" stays off the CPU and off the invalid cases, which the
  // refusal of the impl itself would otherwise answer first.
  if (rng.chance(0.3)) {
    options.impl = scope.device === "cpu" || bad ? "reference" : rng.pick(["fused", "reference"]);
  }
  if (rng.chance(0.2) && !bad) options.checkIndices = false;
  if (rng.chance(0.4)) {
    options.hasInitialState = scope.keep(
      ak.Tensor.from(Array.from({ length: N }, () => (rng.chance(0.5) ? 1 : 0)), {
        dtype: "bool",
        device: scope.device,
      }),
    );
  }
  const decode = rng.chance(0.4);
  const packed = !decode && rng.chance(0.5);
  const lengths = Array.from({ length: N }, () => rng.pick([0, 1, 4]));
  const T = packed ? lengths.reduce((a, b) => a + b, 0) + rng.int(0, 2) : rng.pick([0, 1, 5]);
  const cu = [0];
  for (const l of lengths) cu.push(cu[cu.length - 1] + l);
  const x = decode ? scope.randn([N, C], dtype, 1) : scope.randn([packed ? 1 : N, T, C], dtype, 2);
  const run = (o: unknown, xs: unknown = x, idx: unknown = indices) =>
    decode
      ? ak.causalConv1dDecode(xs as ak.Tensor, weight, pool, {
        ...(o as object),
        stateIndices: idx as ak.Tensor,
      })
      : ak.pagedCausalConv1d(xs as ak.Tensor, weight, pool, idx as ak.Tensor, {
        ...(o as object),
        ...(packed ? { cuSeqlens: cu } : {}),
      });
  if (!bad) {
    // Rows past the last packed offset are unspecified: only the active ones are checked.
    return valid(decode ? "decode" : "prefill", () => {
      const y = scope.keep(run(options));
      return packed ? scope.keep(y.slice(1, 0, cu[N])) : y;
    });
  }
  switch (rng.int(0, 6)) {
    case 5:
      // One entry past the pool, the others valid.
      return invalid(
        "an index past the pool",
        () => run(options, x, int32([slots, ...Array(N - 1).fill(0)])),
      );
    case 6:
      // Two sequences naming one live slot (a lone sequence: one past the pool instead).
      return invalid(
        N === 1 ? "an index past the pool" : "a live slot named twice",
        () => run(options, x, int32(N === 1 ? [slots + 1] : [1, ...Array(N - 1).fill(1)])),
      );
    case 0:
      return invalid(
        "unknown option",
        () => run({ ...options, [rng.pick(["cu_seqlens", "state", "width"])]: 1 }),
      );
    case 1:
      return invalid("indices of another dtype", () => run(options, x, scope.randn([N], "float32", 3)));
    case 2:
      return invalid("indices of another length", () => run(options, x, int32(Array(N + 1).fill(0))));
    case 3:
      return invalid(
        "a pool of another width",
        () =>
          decode
            ? ak.causalConv1dDecode(x, weight, scope.randn([slots, W, C], dtype, 4), {
              stateIndices: indices,
            })
            : ak.pagedCausalConv1d(x, weight, scope.randn([slots, W, C], dtype, 4), indices, options),
      );
    default:
      return invalid("bad activation", () => run({ ...options, activation: rng.pick(["relu", 1, true]) }));
  }
}
