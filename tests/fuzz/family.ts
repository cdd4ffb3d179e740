// What the fuzz generators of the op families share: case constructors named after the family, the
// disposal of a call's result, and a value that no tensor argument of a given shape accepts.
import * as ak from "../../mod.ts";
import type { Case, Rng, Scope } from "./cases.ts";

/** Constructors of valid and certainly invalid cases whose names start with `family: `. */
export function caseMakers(family: string): {
  valid: (name: string, run: () => unknown, finite?: boolean, refusal?: RegExp) => Case;
  invalid: (name: string, run: () => unknown) => Case;
} {
  return {
    valid: (name, run, finite = true, refusal) => ({
      name: `${family}: ${name}`,
      expect: "ok",
      finite,
      refusal,
      run,
    }),
    invalid: (name, run) => ({ name: `${family}: ${name}`, expect: "error", finite: false, run }),
  };
}

/** Disposes a call's result (a tensor or a result object). */
export const dispose = (r: unknown): void => (r as Disposable)[Symbol.dispose]();

/**
 * A value no argument shaped like `like` accepts: not a tensor (`word` among the picks), a disposed
 * tensor, another rank, or one size off in `dim` (a size another argument fixes).
 */
export function badTensor(
  rng: Rng,
  scope: Scope,
  like: ak.Tensor,
  word: string,
  dim = like.ndim - 1,
): unknown {
  switch (rng.int(0, 3)) {
    case 0:
      return rng.pick([null, 1, word, {}, new Float32Array(4)]);
    case 1: {
      const t = ak.Tensor.randn([...like.shape], { device: scope.device });
      t.dispose();
      return t;
    }
    case 2:
      return scope.randn([...like.shape, 2], "float32", 2);
    default: {
      const shape = [...like.shape];
      shape[dim] += 1;
      return scope.randn(shape, "float32", 3);
    }
  }
}
