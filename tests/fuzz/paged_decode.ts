// The fuzz catalog's generator for the paged decode steps (recurrentGdnDecode, recurrentKdaDecode):
// valid steps on small pools (grouped heads, padding indices, fresh slots, float32 or bfloat16 pools,
// both KDA gate transforms, an output buffer or not, indices checked or not), and mutations that make a
// call certainly invalid (an index past the pool or a live slot named twice among them, with the check on).
import * as ak from "../../mod.ts";
import type { Case, Rng, Scope } from "./cases.ts";
import { caseMakers } from "./family.ts";

const { valid, invalid } = caseMakers("paged decode");

/** The paged decode generator (registered in cases.ts). */
export function pagedDecodeCases(rng: Rng, scope: Scope, bad: boolean): Case {
  const kda = rng.chance(0.5);
  const dtype = rng.pick<ak.DType>(["float32", "bfloat16", "float16"]);
  const HK = rng.pick([1, 2]), H = HK * rng.pick([1, 2]);
  const K = rng.pick([4, 8, 16]), V = rng.pick([4, 8]);
  const B = rng.int(0, 4), slots = B + rng.int(1, 3);
  const W = 2 * HK * K + H * V;
  const qkv = scope.randn([B, W], dtype, rng.int(0, 999));
  const rawGate = scope.randn(kda ? [1, B, H, K] : [1, B, H], dtype, rng.int(0, 999));
  const rawBeta = scope.randn([1, B, H], dtype, rng.int(0, 999));
  const aLog = scope.randn([H], "float32", rng.int(0, 999));
  const dtBias = scope.randn(kda ? [H, K] : [H], "float32", rng.int(0, 999));
  const pool = scope.randn([slots, H, V, K], rng.pick(["float32", "bfloat16"] as const), rng.int(0, 999));
  // Distinct slots 1.. for the live sequences; padding as 0 or negative.
  const indices = Array.from({ length: B }, (_, b) => (rng.chance(0.2) ? -rng.int(0, 2) : b + 1));
  const idx = scope.keep(ak.Tensor.from(indices, { dtype: "int32", device: scope.device }));
  const fresh = scope.keep(
    ak.Tensor.from(indices.map(() => (rng.chance(0.3) ? 0 : 1)), { dtype: "bool", device: scope.device }),
  );
  const options: ak.KdaDecodeOptions = {};
  if (rng.chance(0.5)) options.hasInitialState = fresh;
  if (rng.chance(0.3)) options.scale = rng.pick([0.1, 1, 2]);
  if (rng.chance(0.3)) options.checkIndices = rng.chance(0.5);
  if (rng.chance(0.2)) options.impl = "reference";
  if (kda && rng.chance(0.4)) options.gateTransform = "softplus";
  else if (kda && rng.chance(0.5)) options.lowerBound = rng.pick([-1, -5, 0]);
  const step = (o: unknown, x: unknown = qkv, s: unknown = idx) =>
    kda
      ? ak.recurrentKdaDecode(
        x as ak.Tensor,
        rawGate,
        rawBeta,
        aLog,
        dtBias,
        pool,
        s as ak.Tensor,
        o as ak.KdaDecodeOptions,
      )
      : ak.recurrentGdnDecode(
        x as ak.Tensor,
        rawGate,
        rawBeta,
        aLog,
        dtBias,
        pool,
        s as ak.Tensor,
        o as ak.GdnDecodeOptions,
      );
  if (!bad) {
    if (!kda) delete options.lowerBound, delete options.gateTransform;
    if (rng.chance(0.5)) {
      const out = scope.keep(ak.Tensor.empty([1, B, H, V], { dtype, device: scope.device }));
      return valid("step into out", () => {
        step({ ...options, out });
        return out;
      });
    }
    return valid("step", () => scope.keep(step(options)));
  }
  const int32 = (xs: number[]) => scope.keep(ak.Tensor.from(xs, { dtype: "int32", device: scope.device }));
  const checked = { ...options, checkIndices: true };
  switch (rng.int(0, 10)) {
    case 9:
      // No fused kernel serves K of 4, 8 or 16 (nor the CPU): impl "fused" must say so, not fall back.
      return invalid("impl fused where no fused kernel serves", () => step({ ...options, impl: "fused" }));
    case 7: {
      // One entry at or far past the pool, the others valid (a batch of none: a bad option instead).
      if (B === 0) return invalid("bad checkIndices", () => step({ ...options, checkIndices: 1 }));
      const past = Array.from({ length: B }, (_, b) => b + 1);
      past[rng.int(0, B - 1)] = rng.pick([slots, slots + 1, 2 ** 31 - 1]);
      return invalid("an index past the pool", () => step(checked, qkv, int32(past)));
    }
    case 8: {
      // Two sequences naming one live slot.
      if (B < 2) return invalid("bad checkIndices", () => step({ ...options, checkIndices: "yes" }));
      const twice = Array.from({ length: B }, (_, b) => b + 1);
      twice[B - 1] = twice[0];
      return invalid("a live slot named twice", () => step(checked, qkv, int32(twice)));
    }
    case 0:
      return invalid(
        "unknown option",
        () =>
          step({ ...options, [rng.pick(["has_initial_state", "state_indices", "lower_bound", "impl"])]: 1 }),
      );
    case 1:
      return invalid("indices of another dtype", () => step(options, qkv, scope.randn([B], "float32", 1)));
    case 2:
      return invalid(
        "indices of another length",
        () =>
          step(
            options,
            qkv,
            scope.keep(ak.Tensor.from(Array(B + 1).fill(0), { dtype: "int32", device: scope.device })),
          ),
      );
    case 3:
      return invalid("a packed row of another width", () => step(options, scope.randn([B, W + 1], dtype, 2)));
    case 4:
      return invalid("bad scale", () => step({ ...options, scale: rng.pick([NaN, Infinity, "1"]) }));
    case 5:
      return invalid("output of another dtype", () =>
        step({
          ...options,
          out: scope.keep(
            ak.Tensor.empty([1, B, H, V], {
              dtype: dtype === "float32" ? "bfloat16" : "float32",
              device: scope.device,
            }),
          ),
        }));
    default:
      return invalid(
        "bad gate options",
        () =>
          kda
            ? step({ ...options, gateTransform: rng.pick(["tanh", 1]) })
            : step({ ...options, gateTransform: "bounded" }),
      );
  }
}
