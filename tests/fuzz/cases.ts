// The fuzz catalog: for every public function and op class, a generator of valid calls on small random
// inputs, and mutations that make a call invalid (each one certainly invalid). A case knows which it is,
// so the runner can tell an accepted invalid call from a refused valid one.
import * as ak from "../../mod.ts";
import { tensorMath } from "./tensor_math_cases.ts";
import { referenceAndCli } from "./reference_cli_cases.ts";
import { pagedDecodeReferenceCases } from "./paged_decode_reference_cases.ts";
import { featureMap } from "./feature_map.ts";
import { glaCases } from "./gla.ts";
import { gateTransformCases } from "./gate_transform.ts";
import { contextParallelCases } from "./context_parallel.ts";
import { kdaCases } from "./kda.ts";
import { causalConv1dCases } from "./causal_conv1d.ts";
import { pagedChunkCases } from "./paged_chunk.ts";
import { pagedConvCases } from "./paged_conv.ts";
import { pagedDecodeCases } from "./paged_decode.ts";
import { tokenMaskCases } from "./token_mask.ts";
import { graphCases } from "./graph.ts";
import { fileCases, float8Cases, opClassCases, settingsCases } from "./remaining_api.ts";
import { kvCacheCases, mlaCases } from "./kv_cache.ts";
import { denseTransformCases, pagedPrefillCases, prefillCases } from "./prefill.ts";
import { dsaCases, indexerCases, nsaCases } from "./sparse.ts";

/** A deterministic generator (xorshift64*), so a failing case replays from its seed. */
export class Rng {
  #s: bigint;
  constructor(seed: number) {
    this.#s = BigInt(seed) * 0x9e3779b97f4a7c15n + 1n;
  }
  next(): number {
    let s = this.#s;
    s ^= s >> 12n;
    s ^= (s << 25n) & 0xffffffffffffffffn;
    s ^= s >> 27n;
    this.#s = s;
    return Number(((s * 0x2545f4914f6cdd1dn) & 0xffffffffffffffffn) >> 11n) / 2 ** 53;
  }
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo + 1));
  }
  pick<T>(xs: readonly T[]): T {
    return xs[Math.floor(this.next() * xs.length)];
  }
  chance(p: number): boolean {
    return this.next() < p;
  }
}

/**
 * What a case expects: success (with finite float outputs when `finite`), or an AttnkitError. A valid
 * call that pins a kernel may also be refused with a message matching `refusal` (the pinned kernel
 * cannot serve it, which the override's contract allows); any other refusal of it is a defect.
 */
export interface Case {
  name: string;
  expect: "ok" | "error";
  finite: boolean;
  refusal?: RegExp;
  run(): unknown;
}

/** The refusal of a pinned kernel that cannot serve the call. */
export const PIN_REFUSAL = /tuning \S+ cannot serve this call/;
/** The refusal of `impl: "fused"` where no fused kernel serves the call (the CPU, or a shape it does not take). */
export const IMPL_REFUSAL = /impl 'fused'/;

/** Tensors made for a case; disposed after it, whatever happened. */
export class Scope {
  readonly made: ak.Tensor[] = [];
  constructor(readonly device: ak.Device) {}
  keep<T extends ak.Tensor>(t: T): T {
    this.made.push(t);
    return t;
  }
  randn(shape: number[], dtype: ak.DType, seed: number): ak.Tensor {
    return this.keep(ak.Tensor.randn(shape, { dtype, device: this.device, seed }));
  }
  rand(shape: number[], seed: number, low = 0, high = 1): ak.Tensor {
    return this.keep(ak.Tensor.rand(shape, { device: this.device, seed, low, high }));
  }
  dispose(): void {
    for (const t of this.made) t.dispose();
    this.made.length = 0;
  }
}

// ---- invalid replacements for arguments ----

const FOREIGN_KEYS = [
  "causal",
  "softmax_scale",
  "chunk_size",
  "use_qk_l2norm_in_kernel",
  "is_causal",
  "scale_",
  "cu_seqlens",
  "head_first",
  "foo",
  "dtype ",
  "",
];
const NOT_OBJECTS: unknown[] = ["causal", 1, true, 0n, [], [1, 2], () => {}, null, Symbol("s")];
// (null, like undefined, asks for an option's default)
const NOT_BOOLEANS: unknown[] = ["false", "no", 0, 1, {}, []];
const NOT_NUMBERS: unknown[] = ["1", NaN, {}, [], true, 1n];

/**
 * A value that is not a live tensor of the right kind, for a tensor argument. `strict`: the argument
 * also needs its own dtype and device (an op input); without it only the shape matters (a copy source).
 */
function badTensor(
  rng: Rng,
  scope: Scope,
  like: ak.Tensor,
  strict = true,
  offDims?: number[],
  optional = false,
): unknown {
  const which = rng.int(0, strict ? 6 : 4);
  switch (which) {
    case 0: // not a tensor (null and undefined too, unless the argument is optional)
      return rng.pick([...(optional ? [] : [null, undefined]), 1, "q", {}, [1, 2], new Float32Array(4)]);
    case 1: {
      const t = ak.Tensor.randn([...like.shape], { device: scope.device });
      t.dispose();
      return t; // disposed
    }
    case 2: // another rank
      return scope.randn(like.shape.length > 1 ? like.shape.slice(1) : [...like.shape, 2], "float32", 2);
    case 3: { // one size off
      const shape = [...like.shape];
      shape[offDims ? rng.pick(offDims) : rng.int(0, shape.length - 1)] += 1;
      return scope.randn(shape, "float32", 3);
    }
    case 4: // a shape of no meaning at all
      return scope.randn([7], "float32", 4);
    case 5: // the wrong dtype: int32 for a float input, float64 (which no op takes) otherwise
      return scope.keep(like.cast(rng.pick<ak.DType>(["int32", "float64"])));
    default: // the wrong device, where there is another; else a float64 tensor
      if (ak.cudaAvailable()) return scope.keep(like.to(scope.device === "cpu" ? "cuda" : "cpu"));
      return scope.keep(like.cast("float64"));
  }
}

/** An invalid option object, given the spec of what the valid one may hold. */
function badOptions(
  rng: Rng,
  valid: Record<string, unknown>,
  kinds: Record<string, "boolean" | "number">,
): unknown {
  const keys = Object.keys(kinds);
  const choice = rng.int(0, keys.length > 0 ? 3 : 1);
  if (choice === 0) return rng.pick(NOT_OBJECTS);
  if (choice === 1) return { ...valid, [rng.pick(FOREIGN_KEYS)]: true };
  const key = rng.pick(keys);
  return { ...valid, [key]: kinds[key] === "boolean" ? rng.pick(NOT_BOOLEANS) : rng.pick(NOT_NUMBERS) };
}

function valid(name: string, run: () => unknown, finite = true, refusal?: RegExp): Case {
  return { name, expect: "ok", finite, refusal, run };
}
function invalid(name: string, run: () => unknown): Case {
  return { name, expect: "error", finite: false, run };
}

// ---- generators, one per function or op class ----

type Gen = (rng: Rng, scope: Scope, bad: boolean) => Case;
const FLOATS: ak.DType[] = ["float32", "float64", "float16", "bfloat16"];
const ALL: ak.DType[] = [...FLOATS, "int32", "int64", "bool"];

function smallShape(rng: Rng, maxRank = 4, maxSize = 5): number[] {
  return Array.from({ length: rng.int(0, maxRank) }, () => rng.int(0, maxSize));
}

const tensorMaking: Gen = (rng, scope, bad) => {
  const dev = scope.device;
  const shape = smallShape(rng);
  const dtype = rng.pick(ALL);
  const which = rng.int(0, 6);
  if (!bad) {
    const o = { dtype, device: dev };
    switch (which) {
      case 0:
        return valid("Tensor.zeros", () => scope.keep(ak.Tensor.zeros(shape, o)));
      case 1:
        return valid("Tensor.ones", () => scope.keep(ak.Tensor.ones(shape, o)));
      case 2:
        return valid(
          "Tensor.full",
          () => scope.keep(ak.Tensor.full(shape, rng.pick([1.5, -3, NaN]), o)),
          false,
        );
      case 3: {
        const fd = rng.pick(FLOATS);
        return valid(
          "Tensor.randn",
          () => scope.keep(ak.Tensor.randn(shape, { dtype: fd, device: dev, seed: 5 })),
        );
      }
      case 4:
        return valid(
          "Tensor.arange",
          () => scope.keep(ak.Tensor.arange(0, rng.int(0, 50), rng.pick([1, 3]), o)),
        );
      case 5:
        return valid("Tensor.from", () => scope.keep(ak.Tensor.from([[1, 2], [3, 4]], o)));
      default:
        return valid("Tensor.empty", () => scope.keep(ak.Tensor.empty(shape, o)), false);
    }
  }
  const badShape = rng.pick<unknown>([
    [-1],
    [1.5],
    [2 ** 40, 2 ** 40],
    [2 ** 53],
    "2",
    null,
    [NaN],
    Array(9).fill(1),
    [[2]],
  ]);
  switch (which) {
    case 0:
      return invalid("Tensor.zeros(bad shape)", () => scope.keep(ak.Tensor.zeros(badShape as number[])));
    case 1:
      return invalid(
        "Tensor.ones(bad options)",
        () => scope.keep(ak.Tensor.ones([2], badOptions(rng, {}, {}) as ak.TensorOptions)),
      );
    case 2:
      return invalid(
        "Tensor.full(bad value)",
        () => scope.keep(ak.Tensor.full([2], rng.pick(["1", null, {}]) as number)),
      );
    case 3:
      return invalid(
        "Tensor.randn(bad options)",
        () =>
          scope.keep(
            ak.Tensor.randn(
              [2],
              rng.pick<object>([{ seed: NaN }, { seed: -1 }, { mean: "1" }, { std: Infinity }, {
                dtype: "int32",
              }]),
            ),
          ),
      );
    case 4:
      return invalid(
        "Tensor.arange(bad)",
        () =>
          scope.keep(
            ak.Tensor.arange(
              ...rng.pick<[number, number, number]>([[0, 10, 0], [0, 2 ** 40, 1], [0, NaN, 1], [
                0,
                1,
                1e-12,
              ]]),
            ),
          ),
      );
    case 5: {
      const self: unknown[] = [];
      self.push(self);
      const data = rng.pick<unknown>([self, [[1, 2], [3]], ["a"], { length: 2 ** 40 }, null]);
      return invalid("Tensor.from(bad data)", () => scope.keep(ak.Tensor.from(data as number[])));
    }
    default:
      return invalid(
        "Tensor.empty(bad dtype)",
        () => scope.keep(ak.Tensor.empty([2], { dtype: "float8" as ak.DType })),
      );
  }
};

const tensorMethods: Gen = (rng, scope, bad) => {
  const shape = [rng.int(2, 3), rng.int(1, 4), rng.int(1, 3)]; // more than one element (item refuses)
  const t = scope.randn(shape, rng.pick(FLOATS), 11);
  const which = rng.int(0, 8);
  if (!bad) {
    switch (which) {
      case 0:
        return valid("reshape", () => scope.keep(t.reshape([-1])));
      case 1:
        return valid("permute", () => scope.keep(t.permute([2, 0, 1])));
      case 2:
        return valid("transpose", () => scope.keep(t.transpose(0, -1)));
      case 3:
        return valid("cast", () => scope.keep(t.cast(rng.pick(ALL))));
      case 4:
        return valid("toArray", () => t.toArray());
      case 5:
        return valid("fill", () => t.fill(2));
      case 6:
        return valid("clone", () => scope.keep(t.clone()));
      case 7:
        return valid("copyFrom", () => t.copyFrom(scope.randn(shape, "float32", 3)));
      default:
        return valid("toString", () => t.toString(), false);
    }
  }
  switch (which) {
    case 0:
      return invalid(
        "reshape(bad)",
        () => t.reshape(rng.pick<unknown>([null, [7, 7, 7], [-1, -1], ["a"], [1.5]]) as number[]),
      );
    case 1:
      return invalid(
        "permute(bad)",
        () => t.permute(rng.pick<unknown>([null, [0, 0, 1], [0, 1], [0, 1, 3], "012"]) as number[]),
      );
    case 2:
      return invalid("transpose(bad)", () => t.transpose(rng.pick([0.5, 5, -9]), 0));
    case 3:
      return invalid("cast(bad)", () => t.cast(rng.pick(["float8", "", null]) as ak.DType));
    case 4:
      return invalid("item(non-scalar)", () => t.item());
    case 5:
      return invalid("fill(bad)", () => t.fill(rng.pick(["1", null, {}]) as number));
    case 6:
      return invalid("to(bad device)", () => scope.keep(t.to(rng.pick(["gpu", "cuda:99", "", "cpu:1"]))));
    case 7:
      return invalid("copyFrom(bad)", () => t.copyFrom(badTensor(rng, scope, t, false) as ak.Tensor));
    default: {
      t.dispose();
      return invalid("use after dispose", () => t.toArray());
    }
  }
};

const utilities: Gen = (rng, scope, bad) => {
  const which = rng.int(0, 5);
  const a = scope.randn([3], "float32", 1);
  if (!bad) {
    switch (which) {
      case 0:
        return valid("compare", () => ak.compare(a, a));
      case 1:
        return valid("assertClose", () => ak.assertClose(a, a, { atol: 0 }));
      case 2:
        return valid("timeIt", () => ak.timeIt(() => {}, { iterations: 1, warmup: 0 }), false);
      case 3:
        return valid("dtypeSize", () => ak.dtypeSize(rng.pick(ALL)));
      case 4:
        return valid("explain", () => ak.explain({ op: "attention.fwd", gpu: "h200", d: 128 }), false);
      default:
        return valid("memoryStats", () => ak.memoryStats("cpu"), false);
    }
  }
  switch (which) {
    case 0:
      return invalid(
        "compare(bad)",
        () => ak.compare(a, rng.pick<unknown>([null, [1, 2], ["a", "b", "c"], 3]) as number[]),
      );
    case 1:
      return invalid(
        "assertClose(bad tol)",
        () =>
          ak.assertClose(
            a,
            a,
            rng.pick<unknown>([{}, { atol: -1 }, { rtol: "1" }, null, { atol: NaN }]) as ak.Tolerance,
          ),
      );
    case 2:
      return invalid(
        "timeIt(bad)",
        () =>
          ak.timeIt(
            () => {},
            rng.pick<object>([{ iterations: NaN }, { iterations: 0 }, { warmup: -1 }, { cycles: 2 }]),
          ),
      );
    case 3:
      return invalid("dtypeSize(bad)", () => ak.dtypeSize(rng.pick(["float8", "", null]) as ak.DType));
    case 4:
      return invalid(
        "explain(bad)",
        () =>
          ak.explain(rng.pick<unknown>([{ op: "x" }, { op: "attention.fwd", gpu: "h300" }]) as ak.PlanQuery),
      );
    default:
      return invalid("manualSeed(bad)", () => ak.manualSeed(rng.pick([1.5, -1, NaN]) as number));
  }
};

// ---- linear attention ----

interface LinearInputs {
  q: ak.Tensor;
  k: ak.Tensor;
  v: ak.Tensor;
  g: ak.Tensor;
  beta: ak.Tensor;
  B: number;
  T: number;
  H: number;
  D: number;
  layout: ak.LinearLayout;
  /** The shape of q, k, v and the output in the layout. */
  rows: number[];
}

function linearInputs(
  rng: Rng,
  scope: Scope,
  layout = rng.pick<ak.LinearLayout>(["bshd", "bhsd"]),
): LinearInputs {
  const B = rng.int(1, 2), T = rng.pick([1, 2, 7, 31, 33, 64, 65]), H = rng.int(1, 3);
  const D = rng.pick(scope.device === "cpu" ? [8, 16, 32] : [16, 64, 128]);
  const dtype = rng.pick<ak.DType>(["float32", "bfloat16", "float16"]);
  const rows = layout === "bshd" ? [B, T, H, D] : [B, H, T, D];
  const gates = rows.slice(0, 3);
  // |k| near 1 keeps the recurrence stable (each step scales the state by I - beta k k^T), so valid
  // calls have finite outputs with and without the in-kernel L2 norm.
  const unit = (seed: number) =>
    scope.keep(ak.Tensor.randn(rows, { dtype, device: scope.device, seed, std: D ** -0.5 }));
  return {
    q: unit(1),
    k: unit(2),
    v: scope.randn(rows, dtype, 3),
    g: scope.rand(gates, 4, -0.2, 0),
    beta: scope.rand(gates, 5),
    B,
    T,
    H,
    D,
    layout,
    rows,
  };
}

const LINEAR_KINDS = { useQkL2norm: "boolean", scale: "number", outputFinalState: "boolean" } as const;
// Layouts that are certainly wrong (the other valid layout may fit the same shapes).
const BAD_LAYOUTS: unknown[] = [undefined, "thd", "BSHD", "bthd", "head_first", 1, true];

const linearFunctions: Gen = (rng, scope, bad) => {
  const x = linearInputs(rng, scope);
  const gated = rng.chance(0.5);
  const chunked = rng.chance(0.6);
  const options: Record<string, unknown> = {
    layout: x.layout,
    useQkL2norm: rng.chance(0.5),
    outputFinalState: rng.chance(0.5),
  };
  if (chunked) options.chunkSize = rng.pick([32, 64, 128]);
  const name = `${chunked ? "chunk" : "recurrent"}${gated ? "Gated" : ""}DeltaRule`;
  const fn = (ak as unknown as Record<string, (...a: unknown[]) => unknown>)[name];
  const call = (q: unknown, beta: unknown, o: unknown) =>
    gated ? fn(q, x.k, x.v, x.g, beta, o) : fn(q, x.k, x.v, beta, o);
  const dispose = (r: unknown) => (r as Disposable)[Symbol.dispose]();
  if (!bad) {
    const dO = scope.randn(x.rows, x.q.dtype, 9);
    if (rng.chance(0.2)) {
      // The forward's result runs its own backward.
      return valid(`${name} + result.backward`, () => {
        const r = call(x.q, x.beta, { ...options, saveForBackward: chunked ? rng.chance(0.5) : undefined });
        try {
          dispose((r as ak.DeltaRuleResult).backward(dO));
        } finally {
          dispose(r);
        }
      });
    }
    if (rng.chance(0.3)) {
      const back = `${name}Backward`;
      const bfn = (ak as unknown as Record<string, (...a: unknown[]) => unknown>)[back];
      const o = { ...options };
      delete o.outputFinalState;
      return valid(
        back,
        () => dispose(gated ? bfn(dO, x.q, x.k, x.v, x.g, x.beta, o) : bfn(dO, x.q, x.k, x.v, x.beta, o)),
      );
    }
    return valid(name, () => {
      const r = call(x.q, x.beta, options) as ak.DeltaRuleResult;
      const out = scope.keep(r.output.clone());
      dispose(r);
      return out;
    });
  }
  switch (rng.int(0, 4)) {
    case 0:
      return invalid(`${name}(bad q)`, () => dispose(call(badTensor(rng, scope, x.q), x.beta, options)));
    case 1:
      // beta and g take any float dtype (they are read as float32): only their shape and liveness matter
      return invalid(
        `${name}(bad beta)`,
        () => dispose(call(x.q, badTensor(rng, scope, x.beta, false), options)),
      );
    case 2:
      return invalid(
        `${name}(bad options)`,
        () => dispose(call(x.q, x.beta, badOptions(rng, options, LINEAR_KINDS))),
      );
    case 3: {
      const layout = rng.pick(BAD_LAYOUTS);
      return invalid(
        `${name}(layout ${String(layout)})`,
        () => dispose(call(x.q, x.beta, { ...options, layout })),
      );
    }
    default:
      // the gated argument list on the ungated function, or one argument short on the gated one
      return invalid(
        `${name}(argument list)`,
        () => dispose(gated ? fn(x.q, x.k, x.v, x.beta, {}) : fn(x.q, x.k, x.v, x.g, x.beta)),
      );
  }
};

const linearOps: Gen = (rng, scope, bad) => {
  const x = linearInputs(rng, scope);
  const gated = rng.chance(0.5);
  if (!bad) {
    if (rng.chance(0.3)) {
      const state = scope.randn([x.B, x.H, x.D, x.D], "float32", 7);
      const q1 = scope.randn([x.B, x.H, x.D], x.q.dtype, 8);
      const b1 = scope.rand([x.B, x.H], 9);
      const g1 = scope.rand([x.B, x.H], 10, -0.2, 0);
      const kernelMap = rng.pick([undefined, { "linear.decode": rng.pick(["auto", "tile", "simt"]) }]);
      const op = gated
        ? new ak.GatedDeltaNetDecodeFwdOp({ useQkL2norm: true, kernelMap })
        : new ak.DeltaNetDecodeFwdOp({ useQkL2norm: true, kernelMap });
      return valid(
        "DecodeFwdOp",
        () => {
          const r = gated
            ? (op as ak.GatedDeltaNetDecodeFwdOp).forward(q1, q1, q1, g1, b1, state)
            : (op as ak.DeltaNetDecodeFwdOp).forward(q1, q1, q1, b1, state);
          scope.keep(r.output);
          scope.keep(r.newState);
        },
        true,
        kernelMap && PIN_REFUSAL,
      );
    }
    const o = { layout: x.layout, chunkSize: rng.pick([32, 64]), useQkL2norm: rng.chance(0.5) };
    const dO = scope.randn(x.rows, x.q.dtype, 9);
    if (gated) {
      if (rng.chance(0.5)) {
        const op = new ak.GatedDeltaNetOp(o);
        return valid("GatedDeltaNetOp", () => {
          scope.keep(op.forward(x.q, x.k, x.v, x.g, x.beta));
          const grads = op.backward(dO);
          grads[Symbol.dispose]();
          op[Symbol.dispose]();
        });
      }
      const grads = rng.pick(["fused", "two_pass"]);
      const kernelMap = rng.pick([undefined, { "linear.bwd.grads": grads }]);
      const bwd = new ak.GatedDeltaNetBwdOp({ ...o, kernelMap });
      return valid(
        "GatedDeltaNetBwdOp",
        () => bwd.backward(dO, x.q, x.k, x.v, x.g, x.beta)[Symbol.dispose](),
        true,
        kernelMap && PIN_REFUSAL,
      );
    }
    // The forward classes take a kernelMap of linear.fwd keys (never tune here: it writes the user's cache).
    const kernelMap = rng.pick([undefined, { "linear.fwd.path": rng.pick(["fast", "general"]) }]);
    const op = new ak.DeltaNetFwdOp({ ...o, kernelMap });
    return valid(
      "DeltaNetFwdOp + result.backward",
      () => {
        const r = op.forward(x.q, x.k, x.v, x.beta);
        const out = scope.keep(r.output.clone());
        r.backward(dO)[Symbol.dispose]();
        r[Symbol.dispose]();
        return out;
      },
      true,
      kernelMap && PIN_REFUSAL,
    );
  }
  switch (rng.int(0, 3)) {
    case 0:
      return invalid(
        "op constructor(bad options)",
        () =>
          new ak.GatedDeltaNetBTHDFwdOp(
            rng.chance(0.8)
              ? badOptions(rng, {}, { useQkL2norm: "boolean", scale: "number" }) as ak.NamedLayoutOpOptions
              : rng.pick<unknown>([
                { tune: 1 },
                { kernelMap: { "linear.fwd.path": "fastest" } },
                { kernelMap: { "attention.fwd": "general" } },
                { kernelMap: [] },
              ]) as ak.NamedLayoutOpOptions,
          ),
      );
    case 1:
      return invalid(
        "DecodeFwdOp(layout, saveStates or a bad kernelMap)",
        () =>
          new ak.DeltaNetDecodeFwdOp(
            rng.pick<unknown>([
              { saveStates: true },
              { layout: x.layout },
              { kernelMap: { "linear.fwd.state": "mma" } },
              { kernelMap: { "linear.decode": "fused" } },
            ]) as ak.DecodeOpOptions,
          ),
      );
    case 2:
      return invalid(
        "op constructor(bad layout)",
        () =>
          rng.chance(0.5)
            ? new ak.GatedDeltaNetOp({ layout: rng.pick(BAD_LAYOUTS) } as ak.DeltaCombinedOpOptions)
            : new ak.DeltaNetBwdOp({ useQkL2norm: true, layout: rng.pick(BAD_LAYOUTS) } as ak.DeltaOpOptions),
      );
    default: {
      const op = new ak.GatedDeltaNetBTHDFwdOp({});
      return invalid("GatedDeltaNetBTHDFwdOp.forward(bad g)", () => {
        const r = op.forward(x.q, x.k, x.v, badTensor(rng, scope, x.g, false) as ak.Tensor, x.beta);
        (r as unknown as Disposable)[Symbol.dispose]();
      });
    }
  }
};

// ---- softmax attention ----

const ATTENTION_KINDS = { isCausal: "boolean", returnLse: "boolean", scale: "number" } as const;

// A forward result's output, copied so that the result (and what it holds) is released at once.
function attentionOutput(scope: Scope, result: ak.AttentionResult): ak.Tensor {
  try {
    return scope.keep(result.output.clone());
  } finally {
    result[Symbol.dispose]();
  }
}

const attentionFunctions: Gen = (rng, scope, bad) => {
  const B = rng.int(1, 2), Sq = rng.pick([1, 5, 17, 64]), Skv = rng.pick([Sq, 1, 33]);
  const Hkv = rng.int(1, 2), Hq = Hkv * rng.int(1, 3), D = rng.pick([8, 64, 128]);
  const dtype = rng.pick<ak.DType>(["bfloat16", "float16"]);
  const layout = rng.pick(["bshd", "bhsd"] as const);
  const shape = (S: number, H: number) => layout === "bshd" ? [B, S, H, D] : [B, H, S, D];
  const q = scope.randn(shape(Sq, Hq), dtype, 1);
  const k = scope.randn(shape(Skv, Hkv), dtype, 2);
  const v = scope.randn(shape(Skv, Hkv), dtype, 3);
  const options: Omit<ak.AttentionOptions, "out" | "returnLse"> = { layout, isCausal: rng.chance(0.5) };
  if (rng.chance(0.3)) options.windowSizeLeft = rng.int(0, 8);
  if (rng.chance(0.2)) options.softcap = 20;
  // Causal with more queries than keys leaves rows with no key: output 0, still finite.
  if (!bad) {
    const dO = () => scope.randn(shape(Sq, Hq), dtype, 4);
    switch (rng.int(0, 3)) {
      case 0:
        return valid("attentionBackward", () => {
          using y = ak.attention(q, k, v, { ...options, returnLse: true });
          using g = ak.attentionBackward(dO(), q, k, v, y.output, y.lse, options);
          return scope.keep(g.dq.clone());
        });
      case 1:
        return valid("attention(...).backward", () => {
          using y = ak.attention(q, k, v, options);
          using g = y.backward(dO(), { deterministic: rng.chance(0.5) });
          return scope.keep(g.dk.clone());
        });
      default:
        return valid("attention", () => attentionOutput(scope, ak.attention(q, k, v, options)));
    }
  }
  switch (rng.int(0, 5)) {
    case 0:
      // q's batch and head dim must match k's (its length and heads may differ)
      return invalid(
        "attention(bad q)",
        () =>
          attentionOutput(
            scope,
            ak.attention(badTensor(rng, scope, q, true, [0, 3]) as ak.Tensor, k, v, options),
          ),
      );
    case 1:
      return invalid(
        "attention(bad v)",
        () => attentionOutput(scope, ak.attention(q, k, badTensor(rng, scope, v) as ak.Tensor, options)),
      );
    case 2:
      return invalid(
        "attention(bad options)",
        () =>
          attentionOutput(
            scope,
            ak.attention(q, k, v, badOptions(rng, { ...options }, ATTENTION_KINDS) as ak.AttentionOptions),
          ),
      );
    case 3:
      return invalid(
        "attention(no layout, or a wrong one)",
        () =>
          attentionOutput(
            scope,
            ak.attention(q, k, v, { ...options, layout: rng.pick([undefined, "thd", "bthd", 4]) as "bshd" }),
          ),
      );
    case 4: {
      // the backward with one of the forward's options changed
      const changed = rng.pick<Partial<ak.AttentionBackwardOptions>>([
        { isCausal: !options.isCausal },
        { softcap: (options.softcap ?? 0) + 1 },
        { scale: 0.5 },
        { windowSizeLeft: (options.windowSizeLeft ?? -1) + 2 },
      ]);
      return invalid("attentionBackward(options not the forward's)", () => {
        using y = ak.attention(q, k, v, { ...options, returnLse: true });
        ak.attentionBackward(y.output, q, k, v, y.output, y.lse, { ...options, ...changed })
          [Symbol.dispose]();
      });
    }
    default:
      return invalid(
        "attention(bad window)",
        () =>
          attentionOutput(scope, ak.attention(q, k, v, { layout, windowSizeLeft: rng.pick([-2, 1.5, NaN]) })),
      );
  }
};

const attentionOps: Gen = (rng, scope, bad) => {
  const batch = rng.int(1, 2),
    seqLen = rng.pick([1, 9, 64]),
    headsKv = rng.int(1, 2),
    heads = headsKv * rng.int(1, 2);
  const dim = rng.pick([32, 64]);
  const layout = rng.pick(["bshd", "bhsd"] as const);
  const sizes = { layout, batch, heads, headsKv, seqLen, dim };
  const shape = (H: number) => layout === "bshd" ? [batch, seqLen, H, dim] : [batch, H, seqLen, dim];
  const q = scope.randn(shape(heads), "bfloat16", 1);
  const kv = scope.randn(shape(headsKv), "bfloat16", 2);
  if (!bad) {
    if (rng.chance(0.5)) {
      const op = new ak.GroupedQueryAttentionFwdOp({ ...sizes, isCausal: rng.chance(0.5) });
      return valid("GroupedQueryAttentionFwdOp", () => attentionOutput(scope, op.forward(q, kv, kv)));
    }
    const op = new ak.GroupedQueryAttentionDenseFwdOp({ layout, windowSizeLeft: rng.int(-1, 4) });
    return valid("GroupedQueryAttentionDenseFwdOp", () => scope.keep(op.forward(q, kv, kv)));
  }
  switch (rng.int(0, 2)) {
    case 0:
      return invalid(
        "GroupedQueryAttentionFwdOp(bad sizes)",
        () =>
          new ak.GroupedQueryAttentionFwdOp(
            rng.pick<unknown>([
              { ...sizes, heads: 3, headsKv: 2 },
              { ...sizes, dim: 12 },
              {
                ...sizes,
                batch: 0,
              },
              {
                ...sizes,
                causal: true,
              },
              { ...sizes, layout: undefined },
              { ...sizes, smScale: 0.1 },
              null,
            ]) as ak.GroupedQueryAttentionFwdOptions,
          ),
      );
    case 1:
      return invalid(
        "MultiHeadAttentionFwdOp(headsKv)",
        () =>
          new ak.MultiHeadAttentionFwdOp(
            { layout, batch, heads, seqLen, dim, headsKv } as ak.MultiHeadAttentionFwdOptions,
          ),
      );
    default: {
      const op = new ak.GroupedQueryAttentionFwdOp(sizes);
      return invalid(
        "GroupedQueryAttentionFwdOp.forward(bad k)",
        () => attentionOutput(scope, op.forward(q, badTensor(rng, scope, kv) as ak.Tensor, kv)),
      );
    }
  }
};

const io: Gen = (rng, scope, bad) => {
  const t = scope.randn([2, 3], rng.pick(FLOATS), 1);
  if (!bad) {
    return rng.chance(0.5)
      ? valid("npy round trip", () => scope.keep(ak.decodeNpy(ak.encodeNpy(t))))
      : valid("safetensors round trip", () =>
        ak.decodeSafetensors(ak.encodeSafetensors({ t }))[Symbol.dispose]());
  }
  switch (rng.int(0, 2)) {
    case 0:
      return invalid(
        "decodeNpy(garbage)",
        () => scope.keep(ak.decodeNpy(new Uint8Array(rng.int(0, 100)).map(() => rng.int(0, 255)))),
      );
    case 1:
      return invalid(
        "encodeSafetensors(bad)",
        () =>
          ak.encodeSafetensors(
            rng.pick<unknown>([null, t, { "": t }, { a: 1 }]) as Record<string, ak.Tensor>,
          ),
      );
    default:
      return invalid(
        "encodeSafetensors(bad metadata)",
        () => ak.encodeSafetensors({ t }, { metadata: { a: 1 } as unknown as Record<string, string> }),
      );
  }
};

// ---- packed sequences, empty shapes, the remaining op classes and utilities ----

/** Offsets of `n` sequences (some possibly empty) over `total` tokens, starting at 0. */
function offsets(rng: Rng, n: number, total: number): number[] {
  const cuts = Array.from({ length: n - 1 }, () => rng.int(0, total)).sort((a, b) => a - b);
  return [0, ...cuts, total];
}

const BAD_OFFSETS = (total: number, n: number): unknown[] => [
  [1, total], // not starting at 0
  [0, total + 1], // past the tokens
  [0, 3, 1, total], // decreasing
  [0, 1.5, total], // not integers
  [0, -1, total],
  [], // no sequence
  { length: 2 ** 40 }, // an array-like of absurd length
  "0,1",
  Array(n + 2).fill(0), // more sequences than the other side has (for attention)
];

const attentionPacked: Gen = (rng, scope, bad) => {
  const n = rng.int(1, 3), Tq = rng.int(0, 20), Tkv = rng.int(1, 20);
  const Hkv = rng.int(1, 2), Hq = Hkv * rng.int(1, 2), D = rng.pick([16, 64]);
  const q = scope.randn([Tq, Hq, D], "bfloat16", 1);
  const kv = scope.randn([Tkv, Hkv, D], "bfloat16", 2);
  const cuQ = offsets(rng, n, Tq), cuKv = offsets(rng, n, Tkv);
  // offsets in any accepted form: host numbers, Int32Array, BigInt64Array, int32 or int64 tensors
  const form = (cu: number[]): ak.CuSeqlens => {
    switch (rng.int(0, 4)) {
      case 0:
        return cu;
      case 1:
        return Int32Array.from(cu);
      case 2:
        return BigInt64Array.from(cu, BigInt);
      case 3:
        return scope.keep(ak.Tensor.from(Int32Array.from(cu), { device: scope.device }));
      default:
        return scope.keep(ak.Tensor.from(BigInt64Array.from(cu, BigInt), { device: scope.device }));
    }
  };
  const options: Omit<ak.AttentionOptions, "out" | "returnLse"> = {
    layout: "thd",
    cuSeqlensQ: form(cuQ),
    cuSeqlensK: form(cuKv),
    isCausal: rng.chance(0.5),
  };
  if (!bad) {
    switch (rng.int(0, 2)) {
      case 0: {
        const op = new ak.GroupedQueryAttentionPrefillVarlenFwdOp({
          layout: "thd",
          batch: n,
          heads: Hq,
          headsKv: Hkv,
          dim: D,
          maxSeqlenQ: Tq,
          maxSeqlenK: Tkv,
          validateInputs: true,
        });
        return valid(
          "GroupedQueryAttentionPrefillVarlenFwdOp",
          () => scope.keep(op.forward(q, kv, kv, options.cuSeqlensQ!, options.cuSeqlensK!)),
        );
      }
      case 1:
        return valid("attention (packed) + backward", () => {
          using y = ak.attention(q, kv, kv, options);
          using g = y.backward(y.output);
          return scope.keep(g.dq.clone());
        });
      default:
        return valid("attention (packed)", () => attentionOutput(scope, ak.attention(q, kv, kv, options)));
    }
  }
  const badCu = rng.pick(BAD_OFFSETS(Tq, n));
  switch (rng.int(0, 2)) {
    case 0:
      return invalid(
        "attention (bad cuSeqlensQ)",
        () => attentionOutput(scope, ak.attention(q, kv, kv, { ...options, cuSeqlensQ: badCu as number[] })),
      );
    case 1:
      return invalid(
        "attention (one cuSeqlens only)",
        () => attentionOutput(scope, ak.attention(q, kv, kv, { layout: "thd", cuSeqlensQ: cuQ })),
      );
    default:
      return invalid(
        "attention (offsets with a dense layout)",
        () =>
          attentionOutput(
            scope,
            ak.attention(q, kv, kv, { ...options, layout: rng.pick(["bshd", "bhsd"] as const) }),
          ),
      );
  }
};

const emptyShapes: Gen = (rng, scope, bad) => {
  if (bad) return utilities(rng, scope, true);
  if (rng.chance(0.5)) {
    const [B, Sq, Skv] = rng.pick([[0, 4, 4], [1, 0, 4], [2, 4, 0], [1, 0, 0]]);
    const q = scope.randn([B, Sq, 2, 64], "float16", 1);
    const kv = scope.randn([B, Skv, 2, 64], "float16", 2);
    const layout = rng.pick(["bshd", "bhsd"] as const);
    const [qq, kk] = layout === "bhsd"
      ? [scope.keep(q.permute([0, 2, 1, 3])), scope.keep(kv.permute([0, 2, 1, 3]))]
      : [q, kv];
    return valid(`attention + backward, empty (B ${B}, Sq ${Sq}, Skv ${Skv}, ${layout})`, () => {
      using y = ak.attention(qq, kk, kk, { returnLse: true, layout });
      ak.attentionBackward(y.output, qq, kk, kk, y.output, y.lse, { layout })[Symbol.dispose]();
      y.backward(y.output)[Symbol.dispose]();
      return scope.keep(y.output.clone());
    });
  }
  const [B, T] = rng.pick([[0, 5], [1, 0], [2, 0]]);
  const x = (seed: number) => scope.randn([B, T, 2, 16], "float32", seed);
  const q = x(1), beta = scope.rand([B, T, 2], 2), g = scope.rand([B, T, 2], 3, -0.1, 0);
  return valid(`chunkGatedDeltaRule + backward, empty (B ${B}, T ${T})`, () => {
    const r = ak.chunkGatedDeltaRule(q, q, q, g, beta, { layout: "bshd", outputFinalState: true });
    ak.chunkGatedDeltaRuleBackward(r.output, q, q, q, g, beta, { layout: "bshd" })[Symbol.dispose]();
    r.backward(r.output)[Symbol.dispose]();
    r[Symbol.dispose]();
  });
};

const linearPacked: Gen = (rng, scope, bad) => {
  const n = rng.int(1, 3), T = rng.int(1, 70), H = rng.int(1, 2), D = rng.pick([16, 32]);
  const layout = rng.pick<ak.LinearLayout>(["bshd", "bhsd"]);
  const rows = layout === "bshd" ? [1, T, H, D] : [1, H, T, D];
  const unit = (seed: number) =>
    scope.keep(ak.Tensor.randn(rows, { device: scope.device, seed, std: D ** -0.5 }));
  const q = unit(1), k = unit(2), v = unit(3);
  const g = scope.rand(rows.slice(0, 3), 4, -0.2, 0), beta = scope.rand(rows.slice(0, 3), 5);
  const starts = offsets(rng, n, T);
  // Offsets as host numbers (number[], Int32Array, BigInt64Array) or a device tensor.
  const cu: ak.CuSeqlens = rng.pick<() => ak.CuSeqlens>([
    () => starts,
    () => Int32Array.from(starts),
    () => BigInt64Array.from(starts, BigInt),
    () => scope.keep(ak.Tensor.from(Int32Array.from(starts), { device: scope.device })),
  ])();
  const initialState = scope.randn([n, H, D, D], "float32", 6);
  if (!bad) {
    // chunkGdn is the same function under the seeds' name.
    const [name, fn] = rng.pick(
      [["chunkGatedDeltaRule", ak.chunkGatedDeltaRule], ["chunkGdn", ak.chunkGdn]] as const,
    );
    return valid(`${name} (packed ${cu.constructor.name}, ${layout}, initial state)`, () => {
      const r = fn(q, k, v, g, beta, {
        layout,
        cuSeqlens: cu,
        initialState,
        outputFinalState: true,
      });
      const grads = ak.chunkGatedDeltaRuleBackward(r.output, q, k, v, g, beta, {
        layout,
        cuSeqlens: cu,
        initialState,
      });
      grads[Symbol.dispose]();
      r.backward(r.output)[Symbol.dispose]();
      const out = scope.keep(r.output.clone());
      r[Symbol.dispose]();
      return out;
    });
  }
  switch (rng.int(0, 3)) {
    case 0: {
      // (all-zero offsets would be valid here: empty sequences)
      const badCu = rng.pick([[1, T], [0, T + 1], [0, T + 3, 1, T], [0, -1, T]]);
      return invalid(`chunkGatedDeltaRule (bad cuSeqlens ${JSON.stringify(badCu)} of T ${T})`, () => {
        const t = scope.keep(ak.Tensor.from(Int32Array.from(badCu), { device: scope.device }));
        ak.chunkGatedDeltaRule(q, k, v, g, beta, { layout, cuSeqlens: rng.chance(0.5) ? t : badCu })
          [Symbol.dispose]();
      });
    }
    case 1:
      return invalid(
        "chunkGatedDeltaRule (bad host cuSeqlens)",
        () =>
          ak.chunkGatedDeltaRule(q, k, v, g, beta, {
            layout,
            // (all-zero offsets are valid here: empty sequences)
            cuSeqlens: rng.pick(
              BAD_OFFSETS(T, n).filter((o) => !(Array.isArray(o) && o.every((x) => x === 0))),
            ) as number[],
          })[Symbol.dispose](),
      );
    case 2:
      return invalid(
        "chunkGatedDeltaRule (bad initial state)",
        () =>
          ak.chunkGatedDeltaRule(q, k, v, g, beta, {
            layout,
            cuSeqlens: cu,
            initialState: badTensor(rng, scope, initialState, true, undefined, true) as ak.Tensor,
          })[Symbol.dispose](),
      );
    default:
      return invalid(
        "chunkGatedDeltaRuleBackward (bad dO)",
        () =>
          ak.chunkGatedDeltaRuleBackward(badTensor(rng, scope, q) as ak.Tensor, q, k, v, g, beta, { layout })
            [Symbol.dispose](),
      );
  }
};

const moreOps: Gen = (rng, scope, bad) => {
  const batch = rng.int(1, 2), seqLen = rng.pick([1, 9, 40]), heads = rng.int(1, 2), dim = 32;
  const sizes = { batch, heads, headsKv: heads, seqLen, dim };
  const q = scope.randn([batch, seqLen, heads, dim], "float16", 1);
  const which = rng.int(0, 3);
  if (!bad) {
    switch (which) {
      case 0: {
        const options = { layout: "bshd", batch, heads, seqLen, dim, isCausal: rng.chance(0.5) } as const;
        const fwd = new ak.MultiHeadAttentionFwdOp(options);
        const bwd = new ak.MultiHeadAttentionBwdOp(options);
        return valid("MultiHeadAttention Fwd + Bwd ops", () => {
          using y = fwd.forward(q, q, q);
          bwd.backward(y.output, q, q, q, y.output, y.lse)[Symbol.dispose]();
        });
      }
      case 1: {
        const op = new ak.GroupedQueryAttentionSlidingWindowFwdOp({
          ...sizes,
          layout: "bshd",
          isCausal: rng.chance(0.5),
          windowSizeLeft: rng.int(0, 8),
        });
        return valid("GroupedQueryAttentionSlidingWindowFwdOp", () => scope.keep(op.forward(q, q, q)));
      }
      case 2: {
        const unit = (seed: number) =>
          scope.keep(
            ak.Tensor.randn([batch, heads, seqLen, dim], { device: scope.device, seed, std: dim ** -0.5 }),
          );
        const [lq, lk, lv] = [unit(1), unit(2), unit(3)];
        const g = scope.rand([batch, heads, seqLen], 4, -0.2, 0),
          beta = scope.rand([batch, heads, seqLen], 5);
        const op = new ak.GatedDeltaNetPrefillBHTDFwdOp({});
        return valid("GatedDeltaNetPrefillBHTDFwdOp", () => {
          const r = op.forward(lq, lk, lv, g, beta);
          scope.keep(r.finalState);
          return scope.keep(r.output);
        });
      }
      default:
        return valid("prefillChunkSize", () => ak.prefillChunkSize(undefined, batch, heads, seqLen), false);
    }
  }
  switch (which) {
    case 0:
      return invalid(
        "MultiHeadAttentionBwdOp(bad)",
        () =>
          new ak.MultiHeadAttentionBwdOp(
            { layout: "bshd", batch, heads, seqLen, dim, deterministic: "yes" } as never,
          ),
      );
    case 1:
      return invalid(
        "GroupedQueryAttentionSlidingWindowFwdOp(bad window)",
        () =>
          new ak.GroupedQueryAttentionSlidingWindowFwdOp({
            ...sizes,
            layout: rng.pick(["bshd", undefined] as const)!,
            windowSizeLeft: rng.pick([-2, 0.5, "8"]) as number,
          }),
      );
    case 2:
      return invalid(
        "GatedDeltaNetPrefillBHTDFwdOp(bad chunk)",
        () => new ak.GatedDeltaNetPrefillBHTDFwdOp({ chunkSize: rng.pick([0, 48, 256, "64"]) as number }),
      );
    default:
      return invalid(
        "prefillChunkSize(bad)",
        () => ak.prefillChunkSize(rng.pick([48, "64"]) as number, batch, heads, seqLen),
      );
  }
};

const settingsAndDevices: Gen = (rng, scope, bad) => {
  if (!bad) {
    switch (rng.int(0, 6)) {
      case 0:
        return valid("parseDevice", () => ak.parseDevice(rng.pick(["cpu", scope.device])), false);
      case 5:
        return valid("lastChoice", () => ak.lastChoice(), false);
      case 6:
        return valid("tuneCachePath / clearTuneCache", () => {
          const dir = Deno.makeTempDirSync(); // never the user's own cache
          try {
            ak.setTuneCachePath(`${dir}/tune.json`);
            ak.clearTuneCache();
            return ak.tuneCachePath();
          } finally {
            ak.setTuneCachePath(undefined);
            Deno.removeSync(dir, { recursive: true });
          }
        }, false);
      case 1:
        return valid(
          "withTuning",
          () => ak.withTuning({ "attention.fwd": rng.pick(["auto", "general"]) }, () => 1),
          false,
        );
      case 2:
        return valid("tuning", () => ak.tuning(), false);
      case 3:
        return valid("kernels", () => ak.kernels(), false);
      default:
        return valid("bf16BitsToNumber", () => ak.bf16BitsToNumber(rng.int(0, 65535)), false);
    }
  }
  switch (rng.int(0, 5)) {
    case 4:
      return invalid(
        "setTuneCachePath(bad)",
        () => ak.setTuneCachePath(rng.pick<unknown>(["", 5, null, {}]) as string),
      );
    case 5:
      return invalid(
        "GroupedQueryAttentionFwdOp(bad tune / kernelMap)",
        () =>
          new ak.GroupedQueryAttentionFwdOp({
            layout: "bshd",
            batch: 1,
            heads: 2,
            seqLen: 8,
            dim: 64,
            ...rng.pick<Record<string, unknown>>([
              { tune: "yes" },
              { kernelMap: { "attention.bwd": "general" } },
              { kernelMap: { "attention.fwd": "fast" } },
              { kernelMap: "general" },
              { kernelMap: { causal: true } },
            ]),
          } as never),
      );
    case 0:
      return invalid(
        "parseDevice(bad)",
        () => ak.parseDevice(rng.pick(["gpu", "cuda:-1", "cuda:1.5", "cpu:0:1", 7]) as string),
      );
    case 1:
      return invalid(
        "withTuning(bad)",
        () =>
          ak.withTuning(
            rng.pick<unknown>([
              "attention.fwd=v9",
              { "no.such.key": "auto" },
              { "attention.fwd": 3 },
              5,
            ]) as ak.TuningSpec,
            () => 1,
          ),
      );
    case 2:
      return invalid(
        "bf16BitsToNumber(bad)",
        () => ak.bf16BitsToNumber(rng.pick([-1, 65536, 1.5, NaN]) as number),
      );
    default:
      return invalid("kernels(bad device)", () => ak.kernels(rng.pick(["cpu", "cuda:99", "x"]) as ak.Device));
  }
};

/**
 * Exports the catalog reaches without writing their names: called under a name built at run time, or
 * made by another export. The coverage test (tests/fuzz.test.ts) counts them as drawn, with the reason.
 */
export const DRAWN_INDIRECTLY: Readonly<Record<string, string>> = {
  chunkDeltaRule: 'linear functions: `${chunked ? "chunk" : "recurrent"}${gated ? "Gated" : ""}DeltaRule`',
  recurrentDeltaRule: "linear functions, the same constructed name",
  recurrentDeltaRuleBackward: "linear functions: `${name}Backward`",
  recurrentGatedDeltaRuleBackward: "linear functions: `${name}Backward`",
  chunkGlaBackward: "gated linear (gla.ts): `${name}Backward`",
  recurrentGlaBackward: "gated linear (gla.ts): `${name}Backward`",
  chunkSimpleGlaBackward: "gated linear (gla.ts): `${name}Backward`",
  chunkRetentionBackward: "gated linear (gla.ts): `${name}Backward`",
  chunkLinearAttnBackward: "gated linear (gla.ts): `${name}Backward`",
  CapturedGraph: "what captureGraph returns (graph.ts)",
  ToleranceError: "what assertClose throws when values differ: a verdict, not a refused call",
  OutputWithLse: "what NSACmpFwdVarlenOp.forward returns (sparse.ts)",
};

/** The generators and how often each is drawn. */
export const GENERATORS: readonly [string, Gen, number][] = [
  ["tensor making", tensorMaking, 3],
  ["tensor methods", tensorMethods, 3],
  ["utilities", utilities, 2],
  ["linear functions", linearFunctions, 3],
  ["linear ops", linearOps, 2],
  ["attention functions", attentionFunctions, 3],
  ["attention ops", attentionOps, 2],
  ["io", io, 1],
  ["attention packed", attentionPacked, 2],
  ["empty shapes", emptyShapes, 1],
  ["linear packed", linearPacked, 2],
  ["more ops", moreOps, 2],
  ["settings and devices", settingsAndDevices, 1],
  ["tensor math", tensorMath, 3],
  ["reference and cli", referenceAndCli, 1],
  ["paged decode reference", pagedDecodeReferenceCases, 1],
  ["feature map", featureMap, 2],
  ["gated linear", glaCases, 2],
  ["gate transform", gateTransformCases, 1],
  ["kda", kdaCases, 2],
  ["causal conv1d", causalConv1dCases, 2],
  ["paged decode", pagedDecodeCases, 2],
  ["token mask", tokenMaskCases, 1],
  ["paged conv1d", pagedConvCases, 1],
  ["paged chunk", pagedChunkCases, 1],
  ["graph", graphCases, 1],
  ["settings", settingsCases, 1],
  ["files", fileCases, 1],
  ["op classes", opClassCases, 1],
  ["kv-cache decode", kvCacheCases, 2],
  ["float8", float8Cases, 1],
  ["canonical prefill", prefillCases, 1],
  ["dense transforms", denseTransformCases, 1],
  ["MLA decode", mlaCases, 1],
  ["paged prefill", pagedPrefillCases, 1],
  ["NSA", nsaCases, 2],
  ["DSA decode", dsaCases, 1],
  ["lightning indexer", indexerCases, 1],
  ["context parallel", contextParallelCases, 1],
];
