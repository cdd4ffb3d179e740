// The fuzz catalog's generator for the active-token masks: valid masks, masked values and masked
// gradients of packed batches (spare capacity or none, host or device offsets, three dtypes), and
// mutations that make a call certainly invalid.
import * as ak from "../../mod.ts";
import type { Case, Rng, Scope } from "./cases.ts";
import { caseMakers } from "./family.ts";

const { valid, invalid } = caseMakers("token mask");

/** The token-mask generator (registered in cases.ts). */
export function tokenMaskCases(rng: Rng, scope: Scope, bad: boolean): Case {
  const dtype = rng.pick<ak.DType>(["float32", "bfloat16", "float16"]);
  const T = rng.pick([0, 1, 5, 16]), C = rng.pick([1, 3, 8]);
  const end = rng.int(0, T);
  const offsets = [0, rng.int(0, end), end].sort((a, b) => a - b);
  const x = scope.randn([1, T, C], dtype, rng.int(0, 999));
  const cu = rng.chance(0.5)
    ? offsets
    : scope.keep(ak.Tensor.from(offsets, { dtype: "int32", device: scope.device }));
  if (!bad) {
    switch (rng.int(0, 2)) {
      case 0:
        return valid("mask", () => scope.keep(ak.activeTokenMask(x, cu)));
      case 1:
        return valid("masked values", () => {
          using mask = ak.activeTokenMask(x, cu);
          return scope.keep(ak.maskInactiveTokens(x, mask));
        });
      default:
        return valid("masked gradient", () => {
          using mask = ak.activeTokenMask(x, cu);
          return scope.keep(ak.maskInactiveTokenGradients(x, mask).backward(x));
        });
    }
  }
  switch (rng.int(0, 3)) {
    case 0:
      return invalid("a batch of two", () => ak.activeTokenMask(scope.randn([2, T, C], dtype, 1), offsets));
    case 1:
      return invalid("negative offsets", () => ak.activeTokenMask(x, [0, -rng.int(1, 3)]));
    case 2:
      return invalid("a float mask", () => ak.maskInactiveTokens(x, scope.randn([1, T], "float32", 2)));
    default:
      return invalid("a mask of another length", () => {
        using mask = ak.activeTokenMask(scope.randn([1, T + 1, C], dtype, 3), [0, 0]);
        return ak.maskInactiveTokens(x, mask);
      });
  }
}
