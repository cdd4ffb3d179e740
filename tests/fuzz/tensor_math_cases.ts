// The fuzz catalog's tensor-math generator: valid calls of every Tensor math method and `where` on
// small random tensors (broadcastable shapes, every dtype, negative dims, empty and size-1 dims),
// and mutations that make a call certainly invalid (dims out of range or repeated, shapes that do
// not broadcast or multiply, operands of the wrong type, unknown options, bad index specs, disposed
// tensors, tensors on another device).
import * as ak from "../../mod.ts";
import { BINARY_CODES, REDUCE_CODES, UNARY_CODES } from "../../ops/tensor_math/codes.ts";
import type { Case, Rng, Scope } from "./cases.ts";

const FLOATS: ak.DType[] = ["float32", "float64", "float16", "bfloat16"];
const ALL: ak.DType[] = [...FLOATS, "int32", "int64", "bool"];
const UNARY = Object.keys(UNARY_CODES);
const BINARY = Object.keys(BINARY_CODES);
// Ops whose valid calls may give NaN or infinities (the runner then skips the finiteness check).
const MAY_BE_NON_FINITE = new Set(["sqrt", "log", "div", "pow"]);
const REDUCTIONS = Object.keys(REDUCE_CODES);

type Method = (...args: unknown[]) => ak.Tensor;
function method(t: ak.Tensor, name: string): Method {
  return (t as unknown as Record<string, Method>)[name].bind(t);
}

function valid(name: string, run: () => unknown, finite = true): Case {
  return { name: `tensor math: ${name}`, expect: "ok", finite, run };
}
function invalid(name: string, run: () => unknown): Case {
  return { name: `tensor math: ${name}`, expect: "error", finite: false, run };
}

function shapeOf(rng: Rng, maxRank = 3, minSize = 0): number[] {
  return Array.from({ length: rng.int(0, maxRank) }, () => rng.int(minSize, 4));
}

// A shape that broadcasts with `shape`: a suffix of it, some sizes replaced by 1, maybe more dims in front.
function broadcastable(rng: Rng, shape: readonly number[]): number[] {
  const tail = shape.slice(rng.int(0, shape.length)).map((s) => (rng.chance(0.3) ? 1 : s));
  // A new leading dim only in front of all of shape's dims (elsewhere it would meet one of them).
  return tail.length === shape.length && shape.length < 4 && rng.chance(0.2)
    ? [rng.int(1, 2), ...tail]
    : tail;
}

// A shape that certainly does not broadcast with `shape` (which has a dim of size 2 or more).
function clashing(shape: readonly number[]): number[] {
  const d = shape.findIndex((s) => s >= 2);
  return shape.map((s, i) => (i === d ? s + 1 : s));
}

function tensor(scope: Scope, rng: Rng, shape: number[], dtype: ak.DType): ak.Tensor {
  const t = scope.randn(shape, "float32", rng.int(0, 1000));
  return dtype === "float32" ? t : scope.keep(t.cast(dtype));
}

/** The tensor-math generator (registered in cases.ts). */
export function tensorMath(rng: Rng, scope: Scope, bad: boolean): Case {
  const dev = scope.device;
  const dtype = rng.pick(ALL);
  const shape = shapeOf(rng);
  const x = tensor(scope, rng, shape, dtype);
  const nonEmpty = shape.every((s) => s > 0);
  const which = rng.int(0, 7);
  if (!bad) {
    switch (which) {
      case 0: {
        const name = rng.pick(UNARY);
        return valid(name, () => scope.keep(method(x, name)()), nonEmpty && !MAY_BE_NON_FINITE.has(name));
      }
      case 1: {
        const name = rng.pick(BINARY);
        const other = rng.chance(0.3)
          ? rng.pick([2, -1, 0.5])
          : tensor(scope, rng, broadcastable(rng, shape), rng.pick(ALL));
        return valid(`${name}`, () => scope.keep(method(x, name)(other)), !MAY_BE_NON_FINITE.has(name));
      }
      case 2: {
        const cond = tensor(scope, rng, broadcastable(rng, shape), "bool");
        const b = rng.chance(0.5) ? tensor(scope, rng, broadcastable(rng, shape), rng.pick(ALL)) : -1;
        return valid("where", () => scope.keep(ak.where(cond, x, b)));
      }
      case 3: {
        const name = rng.pick(REDUCTIONS);
        const dims = shape.length === 0 || rng.chance(0.3)
          ? undefined
          : rng.chance(0.5)
          ? rng.int(-shape.length, shape.length - 1)
          : [...new Set([rng.int(0, shape.length - 1), shape.length - 1])];
        const y = nonEmpty ? x : tensor(scope, rng, shape.map((s) => s || 1), dtype); // max needs elements
        const options = rng.chance(0.5) ? { keepDim: rng.chance(0.5) } : undefined;
        return valid(`${name}`, () => scope.keep(method(y, name)(dims, options)));
      }
      case 4: {
        if (shape.length === 0) {
          const v = tensor(scope, rng, [3], dtype);
          return valid("softmax of a vector", () => scope.keep(v.softmax(0)));
        }
        const dim = rng.int(-shape.length, shape.length - 1);
        const name = rng.pick(["softmax", "logSoftmax", "logsumexp"]);
        return valid(name, () => scope.keep(method(x, name)(dim)), nonEmpty && name === "softmax");
      }
      case 5: {
        const [m, k, n] = [rng.int(0, 4), rng.int(0, 4), rng.int(0, 4)];
        const batch = rng.chance(0.5) ? [rng.int(1, 2)] : [];
        const md = rng.pick(["float32", "float64", "float16", "bfloat16", "int32"] as ak.DType[]);
        const a = tensor(scope, rng, rng.chance(0.2) ? [k] : [...batch, m, k], md);
        const b = tensor(scope, rng, rng.chance(0.2) ? [k] : [k, n], rng.pick(["float32", md]));
        return valid("matmul", () => scope.keep(a.matmul(b)));
      }
      case 6: {
        if (shape.length === 0) return valid("at()", () => scope.keep(x.at()));
        const d = rng.int(-shape.length, shape.length - 1);
        const size = shape[d < 0 ? d + shape.length : d];
        const pick = rng.int(0, 4);
        if (pick === 0) {
          return valid("slice", () => scope.keep(x.slice(d, rng.int(-5, 5), rng.int(-5, 5), rng.int(1, 3))));
        }
        if (pick === 1 && size > 0) {
          return valid("select", () => scope.keep(x.select(d, rng.int(-size, size - 1))));
        }
        if (pick === 2) {
          return valid("at", () => scope.keep(x.at(rng.pick([":", "1:", "::2", "-2:", "..."]), null)));
        }
        if (pick === 3 && size > 0) {
          const idx = Array.from({ length: rng.int(0, 4) }, () => rng.int(-size, size - 1));
          return valid("indexSelect", () => scope.keep(x.indexSelect(d, idx)));
        }
        return valid("unsqueeze/squeeze", () => scope.keep(scope.keep(x.unsqueeze(d)).squeeze(d)));
      }
      default:
        return valid("broadcastTo", () => scope.keep(x.broadcastTo([2, ...shape])));
    }
  }
  // Invalid: each mutation is certainly wrong whatever the random draw.
  const rank = shape.length;
  switch (which) {
    case 0: {
      const name = rng.pick(REDUCTIONS);
      const dim = rng.pick<unknown>([rank, -rank - 1, 0.5, "0", [0, 0], [], NaN]);
      return invalid(`${name}(bad dim)`, () => scope.keep(method(x, name)(dim)));
    }
    case 1: {
      const name = rng.pick(BINARY);
      if (!shape.some((s) => s >= 2)) {
        return invalid(
          `${name}(not a tensor)`,
          () => scope.keep(method(x, name)(rng.pick<unknown>(["1", null, {}, [1], 1n]))),
        );
      }
      const other = tensor(scope, rng, clashing(shape), dtype);
      return invalid(`${name}(shapes that do not broadcast)`, () => scope.keep(method(x, name)(other)));
    }
    case 2: {
      const options = rng.pick<unknown>([{ keepdim: true }, { keepDim: "yes" }, { dim: 0 }, "keepDim", 1]);
      return invalid("sum(bad options)", () => scope.keep(x.sum(undefined, options as ak.ReduceOptions)));
    }
    case 3: {
      const k = rng.int(1, 4);
      const a = tensor(scope, rng, [2, k], "float32");
      const b = rng.pick([
        () => tensor(scope, rng, [k + 1, 3], "float32"),
        () => tensor(scope, rng, [], "float32"),
        () => tensor(scope, rng, [k, 2], "bool"),
      ])();
      const lhs = b.dtype === "bool" ? tensor(scope, rng, [2, k], "bool") : a;
      return invalid("matmul(bad)", () => scope.keep(lhs.matmul(b)));
    }
    case 4: {
      const cond = tensor(scope, rng, shape, rng.pick(["float32", "int32"] as ak.DType[]));
      return invalid("where(non-bool cond)", () => scope.keep(ak.where(cond, x, 0)));
    }
    case 5: {
      const size = rank > 0 ? shape[0] : 0;
      return rng.pick([
        () => invalid("select(out of range)", () => scope.keep(x.select(0, size))),
        () => invalid("slice(step 0)", () => scope.keep(x.slice(0, 0, 1, 0))),
        () =>
          invalid(
            "at(bad spec)",
            () => scope.keep(x.at(rng.pick<ak.IndexSpec>(["1:x", "a", "...", ".."]), "...")),
          ),
        () => invalid("indexSelect(out of range)", () => scope.keep(x.indexSelect(0, [size]))),
        () => invalid("squeeze(bad dim)", () => scope.keep(x.squeeze(rank))),
      ])();
    }
    case 6: {
      if (ak.cudaAvailable()) {
        const other = scope.keep(x.to(dev === "cpu" ? "cuda" : "cpu"));
        return invalid("add(another device)", () => scope.keep(x.add(other)));
      }
      const gone = ak.Tensor.zeros([1], { device: dev });
      gone.dispose();
      return invalid("mul(disposed)", () => scope.keep(x.mul(gone)));
    }
    default:
      return invalid(
        "broadcastTo(bad)",
        () => scope.keep(x.broadcastTo(rng.pick<unknown>([[-1], "2", [1.5], null]) as number[])),
      );
  }
}
