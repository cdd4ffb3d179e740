// The fuzz catalog's generator for the gated linear family: valid calls of chunkGla, recurrentGla,
// chunkSimpleGla, chunkRetention, chunkLinearAttn (their backward functions and result backwards)
// and the GLA op classes on small random shapes in both layouts, and mutations that make a call
// certainly invalid (bad tensors, wrong gate shapes, unknown or mistyped options, bad layouts).
import * as ak from "../../mod.ts";
import type { Case, Rng, Scope } from "./cases.ts";
import { badTensor, caseMakers, dispose } from "./family.ts";

const { valid, invalid } = caseMakers("gla");

type AnyFn = (...args: unknown[]) => unknown;
const fnOf = (name: string) => (ak as unknown as Record<string, AnyFn>)[name];
function inputs(rng: Rng, scope: Scope, positive: boolean) {
  const layout = rng.pick(["bshd", "bhsd"] as const);
  const B = rng.int(1, 2), T = rng.int(1, 80), HK = rng.int(1, 3), H = HK * rng.int(1, 2);
  const K = rng.pick([1, 8, 16, 40]), V = rng.pick([1, 8, 24]);
  const dtype = rng.pick<ak.DType>(["float32", "bfloat16", "float16"]);
  const rows = (heads: number, d?: number) =>
    layout === "bshd" ? [B, T, heads, ...(d ? [d] : [])] : [B, heads, T, ...(d ? [d] : [])];
  const draw = (shape: number[], seed: number) =>
    positive ? scope.keep(scope.rand(shape, seed, 0.1, 1).cast(dtype)) : scope.randn(shape, dtype, seed);
  return {
    layout,
    B,
    T,
    H,
    K,
    V,
    q: draw(rows(HK, K), 1),
    k: scope.keep(draw(rows(HK, K), 2).mul(K ** -0.5)),
    v: scope.randn(rows(H, V), dtype, 3),
    gk: scope.rand(rows(H, K), 4, -1, 0),
    g: scope.rand(rows(H), 5, -1, 0),
    gGamma: scope.rand([H], 6, -0.5, -0.01),
    dO: scope.randn(rows(H, V), dtype, 7),
  };
}

const FNS = ["chunkGla", "recurrentGla", "chunkSimpleGla", "chunkRetention", "chunkLinearAttn"] as const;
const BAD_LAYOUTS: unknown[] = [undefined, "thd", "BSHD", 1];

/** The gated-linear generator (registered in cases.ts): functions, or now and then the op classes. */
export function glaCases(rng: Rng, scope: Scope, bad: boolean): Case {
  return rng.chance(0.75) ? glaFunctions(rng, scope, bad) : glaOps(rng, scope, bad);
}

/** Calls of the functions. */
export function glaFunctions(rng: Rng, scope: Scope, bad: boolean): Case {
  const name = rng.pick(FNS);
  const normalize = name === "chunkLinearAttn" && rng.chance(0.5);
  const x = inputs(rng, scope, normalize);
  const options: Record<string, unknown> = { layout: x.layout, outputFinalState: rng.chance(0.5) };
  if (rng.chance(0.3)) options.scale = 0.5;
  if (name === "chunkSimpleGla") {
    if (rng.chance(0.7)) options.g = x.g;
    if (rng.chance(0.5)) options.gGamma = x.gGamma;
  }
  if (name === "chunkLinearAttn") options.normalize = normalize;
  if (x.layout === "bshd" && x.B === 1 && rng.chance(0.3)) {
    const cut = rng.int(0, x.T);
    options.cuSeqlens = [0, cut, cut, x.T];
  }
  const gated = name === "chunkGla" || name === "recurrentGla";
  const call = (q: unknown, o: unknown, gk: unknown = x.gk) =>
    gated ? fnOf(name)(q, x.k, x.v, gk, o) : fnOf(name)(q, x.k, x.v, o);
  if (!bad) {
    if (rng.chance(0.3)) {
      return valid(`${name} + result.backward`, () => {
        const r = call(x.q, options) as ak.GlaResult;
        try {
          dispose(r.backward(x.dO));
        } finally {
          dispose(r);
        }
      });
    }
    if (rng.chance(0.3)) {
      const o = { ...options };
      delete o.outputFinalState;
      const back = fnOf(`${name}Backward`);
      return valid(
        `${name}Backward`,
        () => dispose(gated ? back(x.dO, x.q, x.k, x.v, x.gk, o) : back(x.dO, x.q, x.k, x.v, o)),
      );
    }
    return valid(name, () => {
      const r = call(x.q, options) as ak.GlaResult;
      const out = scope.keep(r.output.clone());
      dispose(r);
      // Rows past the last packed sequence are unspecified: only fixed-length outputs are checked.
      return options.cuSeqlens ? undefined : out;
    });
  }
  switch (rng.int(0, 4)) {
    case 0:
      return invalid(`${name}(bad q)`, () => dispose(call(badTensor(rng, scope, x.q, "q"), options)));
    case 1:
      if (gated) {
        return invalid(
          `${name}(bad gk)`,
          () => dispose(call(x.q, options, badTensor(rng, scope, x.gk, "q"))),
        );
      }
      return invalid(
        `${name}(bad v)`,
        () => dispose(fnOf(name)(x.q, x.k, badTensor(rng, scope, x.v, "q", 0), options)),
      );
    case 2:
      return invalid(
        `${name}(unknown option)`,
        () => dispose(call(x.q, { ...options, chunkSize: 64, gv: x.g })),
      );
    case 3: {
      const layout = rng.pick(BAD_LAYOUTS);
      return invalid(`${name}(layout ${String(layout)})`, () => dispose(call(x.q, { ...options, layout })));
    }
    default:
      return invalid(
        `${name}(mistyped option)`,
        () => dispose(call(x.q, { ...options, outputFinalState: rng.pick(["yes", 1, null]), scale: "0.5" })),
      );
  }
}

/** The GLA op classes (fixed length, "bshd"). */
export function glaOps(rng: Rng, scope: Scope, bad: boolean): Case {
  const B = rng.int(1, 2),
    T = rng.int(1, 70),
    H = rng.int(1, 3),
    K = rng.pick([8, 16]),
    V = rng.pick([8, 12]);
  const q = scope.randn([B, T, H, K], "float32", 1);
  const k = scope.randn([B, T, H, K], "float32", 2);
  const v = scope.randn([B, T, H, V], "float32", 3);
  const g = scope.rand([B, T, H, K], 4, -1, 0);
  const h0 = rng.chance(0.5) ? scope.randn([B, H, K, V], "float32", 5) : undefined;
  const dO = scope.randn([B, T, H, V], "float32", 6);
  if (!bad) {
    switch (rng.int(0, 2)) {
      case 0:
        return valid("GLAFwdOp + GLABwdOp", () => {
          using r = new ak.GLAFwdOp({ chunkSize: 64 }).forward(q, k, v, g, h0);
          dispose(new ak.GLABwdOp().backward(dO, q, k, v, g, r.chunkStates, undefined, h0 !== undefined));
          return scope.keep(r.output.clone());
        });
      case 1:
        return valid("GLAFwdOp result.backward", () => {
          using r = new ak.GLAFwdOp().forward(q, k, v, g, h0);
          dispose(r.backward(dO));
        });
      default: {
        const state = scope.randn([B, H, K, V], "float32", 7);
        const at = (t: ak.Tensor) => scope.keep(t.select(1, 0));
        return valid("GLADecodeFwdOp", () => {
          const r = new ak.GLADecodeFwdOp({ inPlace: rng.chance(0.5) }).forward(
            at(q),
            at(k),
            at(v),
            at(g),
            state,
          );
          scope.keep(r.newState);
          return scope.keep(r.output);
        });
      }
    }
  }
  switch (rng.int(0, 2)) {
    case 0:
      return invalid(
        "GLAFwdOp(chunkSize)",
        () => new ak.GLAFwdOp({ chunkSize: rng.pick([32, 128, 0, "64"]) as number }),
      );
    case 1:
      return invalid(
        "GLAFwdOp(bad g)",
        () => dispose(new ak.GLAFwdOp().forward(q, k, v, badTensor(rng, scope, g, "q") as ak.Tensor)),
      );
    default:
      return invalid(
        "GLABwdOp(bad h)",
        () => dispose(new ak.GLABwdOp().backward(dO, q, k, v, g, badTensor(rng, scope, v, "q") as ak.Tensor)),
      );
  }
}
