// The fuzz catalog's generator for the float64 oracles (reference/) and the command line's library
// functions (cli.ts: main, parseResults, renderChart): valid calls on small random problems (empty
// sequences, grouped heads, windows, packed offsets, charts of any records), and mutations that make a
// call certainly invalid (a missing or mistyped field, inconsistent sizes, arrays too short, offsets
// that do not delimit sequences, unknown options).
import * as ref from "../../reference/mod.ts";
import { main, parseResults, renderChart } from "../../cli.ts";
import type { Case, Rng, Scope } from "./cases.ts";

function valid(name: string, run: () => unknown): Case {
  // The oracles return host arrays (an LSE of -inf for a row with no key is right), not tensors.
  return { name: `reference/cli: ${name}`, expect: "ok", finite: false, run };
}
function invalid(name: string, run: () => unknown): Case {
  return { name: `reference/cli: ${name}`, expect: "error", finite: false, run };
}

/** n host numbers uniform in [-1, 1): the values of a small oracle problem. */
export function numbers(rng: Rng, n: number): number[] {
  return Array.from({ length: n }, () => rng.next() * 2 - 1);
}

function offsets(lengths: number[]): number[] {
  const out = [0];
  for (const n of lengths) out.push(out[out.length - 1] + n);
  return out;
}

function attentionProblem(rng: Rng): ref.AttentionProblem {
  const n = rng.int(1, 2);
  const qStart = offsets(Array.from({ length: n }, () => rng.int(0, 5)));
  const kvStart = offsets(Array.from({ length: n }, () => rng.int(0, 5)));
  const headsKv = rng.int(1, 2), heads = headsKv * rng.int(1, 2), dim = rng.int(1, 4);
  const causal = rng.chance(0.5);
  return {
    q: numbers(rng, qStart[n] * heads * dim),
    k: Float64Array.from(numbers(rng, kvStart[n] * headsKv * dim)),
    v: Float32Array.from(numbers(rng, kvStart[n] * headsKv * dim)),
    qStart,
    kvStart,
    heads,
    headsKv,
    dim,
    smScale: rng.pick([0.5, 1, dim ** -0.5]),
    softcap: rng.pick([0, 0, 2]),
    causal,
    windowLeft: rng.pick([-1, -1, 0, 2]),
    windowRight: causal ? -1 : rng.pick([-1, 1]),
  };
}

function deltaInputs(rng: Rng): ref.DeltaReferenceInputs {
  const packed = rng.chance(0.3);
  const B = packed ? 1 : rng.int(1, 2), T = rng.int(0, 5);
  const HK = rng.int(1, 2), H = HK * rng.int(1, 2), K = rng.int(1, 3), V = rng.int(1, 3);
  const cuSeqlens = packed ? [0, rng.int(0, T), T] : undefined;
  const N = cuSeqlens ? 2 : B;
  return {
    B,
    T,
    H,
    HK,
    K,
    V,
    q: numbers(rng, B * T * HK * K),
    k: numbers(rng, B * T * HK * K).map((x) => x * 0.5),
    v: numbers(rng, B * T * H * V),
    g: rng.chance(0.5) ? numbers(rng, B * T * H).map((x) => -Math.abs(x) * 0.25) : undefined,
    beta: numbers(rng, B * T * H).map(Math.abs),
    scale: K ** -0.5,
    initialState: rng.chance(0.5) ? numbers(rng, N * H * K * V) : undefined,
    cuSeqlens,
    l2norm: rng.chance(0.5),
  };
}

function records(rng: Rng): Record<string, unknown>[] {
  return Array.from({ length: rng.int(1, 6) }, () => {
    const ms = rng.chance(0.2) ? null : 0.01 + rng.next() * 10;
    const refMs = rng.chance(0.3) ? null : 0.01 + rng.next() * 10;
    return {
      op: rng.pick(["attention", "chunkGatedDeltaRule", "a<b&c"]),
      shape: rng.pick(["B1_T64_H2_D32", "B2_S128_H4_D64_causal", "x"]),
      dtype: rng.pick(["bfloat16", "float16", ""]),
      mode: rng.pick(["fwd", "bwd", "fwdbwd"]),
      ms,
      ref: rng.pick([null, "fla", 'sdpa "cudnn"']),
      ref_ms: refMs,
    };
  });
}

// A copy of `obj` with one field replaced (or removed, for undefined).
function withField<T extends object>(obj: T, key: string, value: unknown): T {
  const copy = { ...obj } as Record<string, unknown>;
  if (value === undefined) delete copy[key];
  else copy[key] = value;
  return copy as T;
}

/** The oracle and command-line generator (registered in cases.ts). */
// A small feature-map oracle problem: one sequence and head, K = V = 2, T of 1 to 3 tokens.
function featureMapInputs(rng: Rng): ref.FeatureMapReferenceInputs {
  const T = rng.int(1, 3);
  return {
    B: 1,
    T,
    H: 1,
    K: 2,
    V: 2,
    q: numbers(rng, 2 * T),
    k: numbers(rng, 2 * T),
    v: numbers(rng, 2 * T),
  };
}

export function referenceAndCli(rng: Rng, _scope: Scope, bad: boolean): Case {
  const which = rng.int(0, 5);
  if (which === 0 || which === 1) {
    const p = attentionProblem(rng);
    const Tq = p.qStart[p.qStart.length - 1];
    const dOut = numbers(rng, Tq * p.heads * p.dim);
    const prec = rng.pick([ref.FLOAT64, ref.samePrecision("bfloat16"), ref.samePrecision("float16")]);
    if (!bad) {
      if (which === 0) return valid("attentionReference", () => ref.attentionReference(p, prec));
      const { output } = ref.attentionReference(p);
      return rng.chance(0.5)
        ? valid("attentionReferenceBackward", () => ref.attentionReferenceBackward(p, dOut, output, prec))
        : valid("attentionReferenceLoss", () => ref.attentionReferenceLoss(p, dOut));
    }
    const mutations: [string, () => ref.AttentionProblem][] = [
      ["no heads", () => withField(p, "heads", undefined)],
      ["heads 0", () => withField(p, "heads", 0)],
      ["heads 1.5", () => withField(p, "heads", 1.5)],
      ["headsKv not dividing", () => withField(p, "headsKv", p.heads + 1)],
      ["dim as a string", () => withField(p, "dim", String(p.dim))],
      ["qStart not from 0", () => withField(p, "qStart", p.qStart.map((x) => x + 1))],
      ["qStart decreasing", () => withField(p, "qStart", [0, 3, 1])],
      ["kvStart of another length", () => withField(p, "kvStart", [...p.kvStart, p.kvStart.at(-1)!])],
      ["q too short", () => withField(p, "q", [])],
      ["k not numbers", () => withField(p, "k", ["1"])],
      ["causal as a string", () => withField(p, "causal", "yes")],
      ["smScale NaN", () => withField(p, "smScale", NaN)],
      ["softcap negative", () => withField(p, "softcap", -1)],
      ["windowLeft -2", () => withField(p, "windowLeft", -2)],
    ];
    const q0 = p.qStart.length > 1 && p.qStart.at(-1)! > 0; // a non-empty q makes "q too short" certain
    const usable = mutations.filter(([name]) => name !== "q too short" || q0);
    const [name, make] = rng.pick(usable);
    const bent = make();
    if (which === 0) return invalid(`attentionReference(${name})`, () => ref.attentionReference(bent));
    const { output } = ref.attentionReference(p);
    const other = rng.int(0, 3);
    if (other === 0) {
      return invalid(
        `attentionReferenceBackward(${name})`,
        () => ref.attentionReferenceBackward(bent, dOut, output),
      );
    }
    if (other === 1 && dOut.length > 0) {
      return invalid(
        "attentionReferenceBackward(dOut too short)",
        () => ref.attentionReferenceBackward(p, dOut.slice(1), output),
      );
    }
    if (other === 2) {
      const badPrec = rng.pick<unknown>([null, {}, { name: "x", acc: Math.fround }, "float64"]);
      return invalid(
        "attentionReference(bad precision)",
        () => ref.attentionReference(p, badPrec as ref.Precision),
      );
    }
    return invalid(`attentionReferenceLoss(${name})`, () => ref.attentionReferenceLoss(bent, dOut));
  }
  if (which === 2) {
    const x = deltaInputs(rng);
    const dOut = numbers(rng, x.B * x.T * x.H * x.V);
    if (!bad) {
      return rng.chance(0.5)
        ? valid("deltaRuleReference", () => ref.deltaRuleReference(x))
        : valid("deltaRuleReferenceBackward", () => ref.deltaRuleReferenceBackward(x, dOut));
    }
    const nonEmpty = x.B * x.T > 0;
    const mutations: [string, () => ref.DeltaReferenceInputs][] = [
      ["no scale", () => withField(x, "scale", undefined)],
      ["scale NaN", () => withField(x, "scale", NaN)],
      ["H 0", () => withField(x, "H", 0)],
      ["HK not dividing", () => withField(x, "HK", x.H + 1)],
      ["K negative", () => withField(x, "K", -1)],
      ["beta not an array", () => withField(x, "beta", 1)],
      ["cuSeqlens with B = 2", () => withField(withField(x, "B", 2), "cuSeqlens", [0, 0])],
      ["cuSeqlens past T", () => withField(withField(x, "B", 1), "cuSeqlens", [0, x.T + 1])],
      ["l2norm as a number", () => withField(x, "l2norm", 1)],
      ["checkpointEvery 0", () => withField(x, "checkpointEvery", 0)],
      ...(nonEmpty
        ? [["v too short", () => withField(x, "v", [])] as [string, () => ref.DeltaReferenceInputs]]
        : []),
    ];
    const [name, make] = rng.pick(mutations);
    const bent = make();
    if (rng.chance(0.5)) return invalid(`deltaRuleReference(${name})`, () => ref.deltaRuleReference(bent));
    if (rng.chance(0.5) && dOut.length > 0) {
      return invalid(
        "deltaRuleReferenceBackward(dOutput too short)",
        () => ref.deltaRuleReferenceBackward(x, dOut.slice(1)),
      );
    }
    return invalid(`deltaRuleReferenceBackward(${name})`, () => ref.deltaRuleReferenceBackward(bent, dOut));
  }
  if (which === 3) {
    if (!bad) {
      const k = rng.int(0, 4);
      if (k === 0) return valid("roundBf16", () => ref.roundBf16(rng.next() * 1e4));
      if (k === 1) return valid("roundF16", () => ref.roundF16(rng.next() * 1e4));
      if (k === 2) {
        return valid("samePrecision", () => ref.samePrecision(rng.pick(["float16", "bfloat16"] as const)));
      }
      if (k === 3) {
        const dtype = rng.pick(["float16", "bfloat16"] as const);
        const values = Array.from({ length: rng.int(0, 9) }, () => (rng.next() - 0.5) * 8);
        const pick = rng.int(0, 2);
        if (pick === 0) {
          return valid(
            "attentionBound",
            () => ref.attentionBound(rng.next(), rng.pick(["forward", "backward"] as const), rng.next()),
          );
        }
        if (pick === 1) return valid("roundingAllowance", () => ref.roundingAllowance(values, dtype));
        const x = featureMapInputs(rng);
        const dOut = numbers(rng, x.T * 2), tolDtype = rng.pick(["float32", dtype] as const);
        return valid("featureMapGradientTolerance", () => {
          const grads = ref.featureMapLinearAttentionReferenceBackward(x, dOut);
          return ref.featureMapGradientTolerance(x, dOut, grads, tolDtype);
        });
      }
      const p = attentionProblem(rng);
      return valid("admits", () => ref.admits(p, rng.int(0, 3), rng.int(0, 3), 4, 4));
    }
    const k = rng.int(0, 4);
    if (k === 0) return invalid("roundBf16(string)", () => ref.roundBf16("1" as unknown as number));
    if (k === 1) return invalid("samePrecision(float32)", () => ref.samePrecision("float32" as "float16"));
    if (k === 2) return invalid("attentionBound(negative)", () => ref.attentionBound(-1, "forward"));
    if (k === 3) {
      const pick = rng.int(0, 4);
      if (pick === 0) {
        return invalid("attentionBound(direction)", () => ref.attentionBound(1, "sideways" as "forward"));
      }
      if (pick === 1) return invalid("attentionBound(allowance)", () => ref.attentionBound(1, "forward", -1));
      if (pick === 2) {
        return invalid(
          "roundingAllowance(float32)",
          () => ref.roundingAllowance([1], "float32" as "float16"),
        );
      }
      if (pick === 3) {
        return invalid(
          "roundingAllowance(expected)",
          () => ref.roundingAllowance(0.5 as unknown as number[], "bfloat16"),
        );
      }
      const x = featureMapInputs(rng);
      const dOut = numbers(rng, x.T * 2 - 1);
      return invalid(
        "featureMapGradientTolerance(dOutput too short)",
        () => ref.featureMapGradientTolerance(x, dOut, { dq: x.q, dk: x.k }, "bfloat16"),
      );
    }
    return invalid("admits(i -1)", () => ref.admits(attentionProblem(rng), -1, 0, 4, 4));
  }
  // The command line's library functions.
  const rs = records(rng);
  if (!bad) {
    const metric = rng.pick(["ms", "speedup"] as const);
    return rng.chance(0.5)
      ? valid("parseResults", () => parseResults({ gpu: "g", records: rs }))
      : valid("renderChart", () =>
        renderChart(parseResults({ date: "d", records: rs }), { metric, title: "t<&>" }));
  }
  const k = rng.int(0, 6);
  if (k === 0) return invalid("parseResults(no records)", () => parseResults({ records: [] }));
  if (k === 1) {
    return invalid("parseResults(ms as text)", () => parseResults({ records: [{ ...rs[0], ms: "1" }] }));
  }
  if (k === 2) return invalid("parseResults(not an object)", () => parseResults(rng.pick([42, "x", null])));
  if (k === 3) {
    return invalid(
      "renderChart(bad metric)",
      () => renderChart(parseResults({ records: rs }), { metric: "pie" as "ms" }),
    );
  }
  if (k === 4) {
    return invalid(
      "renderChart(unknown option)",
      () => renderChart(parseResults({ records: rs }), { colour: 1 } as object),
    );
  }
  if (k === 5) {
    return invalid(
      "renderChart(no results)",
      () => renderChart(null as never),
    );
  }
  return invalid(
    "main(not strings)",
    () => main(rng.pick<unknown>([42, [1], null, ["check", 2]]) as string[]),
  );
}
