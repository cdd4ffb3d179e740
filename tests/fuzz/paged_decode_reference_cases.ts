// The fuzz catalog's generator for the paged decode steps' float64 oracle and its tolerance rule
// (reference/paged_decode.ts, reference/tolerance.ts): valid calls on small random pools (padding rows,
// fresh slots, grouped heads, either gate transform), and mutations that make a call certainly invalid
// (a missing or mistyped field, inputs too short, a slot past the pool or named twice, a bound with the
// softplus gate, a dtype the rule does not know, rows that do not match).
import * as ref from "../../reference/mod.ts";
import type { Case, Rng, Scope } from "./cases.ts";
import { numbers } from "./reference_cli_cases.ts";

function valid(name: string, run: () => unknown): Case {
  // Host arrays, not tensors: nothing to check for finiteness on a device.
  return { name: `paged decode reference: ${name}`, expect: "ok", finite: false, run };
}

function invalid(name: string, run: () => unknown): Case {
  return { name: `paged decode reference: ${name}`, expect: "error", finite: false, run };
}

// A named change to a valid call's inputs.
type Mutation = [string, () => unknown];

// A pool of B + 1 + e slots, distinct slots for the live rows, some rows padding.
function inputs(rng: Rng): ref.PagedDecodeReferenceInputs {
  const B = rng.int(0, 4), HK = rng.int(1, 2), H = HK * rng.int(1, 2), K = rng.int(1, 4), V = rng.int(1, 3);
  const numSlots = B + 1 + rng.int(0, 2);
  const perChannel = rng.chance(0.5);
  const gateTransform = perChannel && rng.chance(0.5) ? "bounded" : "softplus";
  const free = Array.from({ length: numSlots - 1 }, (_, i) => i + 1);
  const stateIndices = Array.from({ length: B }, () => {
    if (rng.chance(0.25)) return -rng.int(0, 1);
    return free.splice(rng.int(0, free.length - 1), 1)[0];
  });
  return {
    B,
    H,
    HK,
    K,
    V,
    numSlots,
    packedQkv: numbers(rng, B * (2 * HK * K + H * V)),
    rawGate: numbers(rng, B * H * (perChannel ? K : 1)),
    rawBeta: numbers(rng, B * H),
    aLog: numbers(rng, H).map((x) => x / 4),
    dtBias: numbers(rng, H * (perChannel ? K : 1)),
    perChannel,
    gateTransform,
    ...(gateTransform === "bounded" && rng.chance(0.5) ? { lowerBound: -rng.int(1, 6) } : {}),
    stateCache: numbers(rng, numSlots * H * V * K),
    stateIndices,
    ...(rng.chance(0.5) ? { hasInitialState: stateIndices.map(() => rng.chance(0.7)) } : {}),
    ...(rng.chance(0.3) ? { scale: rng.next() } : {}),
  };
}

/** Calls of pagedDecodeReference, l2Normalize, pagedDecodeTolerance and rowToleranceBreach. */
export function pagedDecodeReferenceCases(rng: Rng, _scope: Scope, bad: boolean): Case {
  const x = inputs(rng);
  const which = rng.int(0, 2);
  if (!bad) {
    if (which === 0) return valid("pagedDecodeReference", () => ref.pagedDecodeReference(x));
    if (which === 1) return valid("l2Normalize", () => ref.l2Normalize(numbers(rng, rng.int(0, 6))));
    const tolerance = ref.pagedDecodeTolerance(
      rng.pick(["float32", "float16", "bfloat16"] as const),
      rng.pick(["float32", "bfloat16"] as const),
    );
    const r = ref.pagedDecodeReference(x);
    return valid(
      "rowToleranceBreach",
      () => ref.rowToleranceBreach(r.output, r.output, Math.max(1, x.V), tolerance.output, r.outputMagnitude),
    );
  }
  if (which === 0) {
    const live = Array.from(x.stateIndices).filter((s) => s > 0);
    const mutations: Mutation[] = [
      ["no packedQkv", () => ({ ...x, packedQkv: undefined })],
      ["H as a string", () => ({ ...x, H: String(x.H) })],
      ["HK not dividing", () => ({ ...x, HK: x.H + 1 })],
      ["perChannel as a number", () => ({ ...x, perChannel: 1 })],
      ["unknown gate transform", () => ({ ...x, gateTransform: "exp" })],
      ["lowerBound with softplus", () => ({ ...x, gateTransform: "softplus", lowerBound: -1 })],
      ["numSlots one more than the pool holds", () => ({ ...x, numSlots: x.numSlots + 1 })],
      ["B one more than the rows", () => ({ ...x, B: x.B + 1 })],
      ["an index past the pool", () => ({ ...x, ...rows(x, 1), stateIndices: [x.numSlots] })],
      ...(x.B > 0
        ? [["rawBeta one short", () => ({ ...x, rawBeta: Array.from(x.rawBeta).slice(1) })] as Mutation]
        : []),
      ...(live.length > 0
        ? [
          [
            "a slot named twice",
            () => ({ ...x, ...rows(x, 2), stateIndices: [live[0], live[0]] }),
          ] as Mutation,
        ]
        : []),
    ];
    const [name, make] = rng.pick(mutations);
    return invalid(`pagedDecodeReference(${name})`, () => ref.pagedDecodeReference(make() as never));
  }
  if (which === 1) {
    const arg = rng.pick<unknown>([null, "abc", [1, "2"], 3]);
    return invalid("l2Normalize(not numbers)", () => ref.l2Normalize(arg as number[]));
  }
  const k = rng.int(0, 3);
  if (k === 0) {
    return invalid(
      "pagedDecodeTolerance(float64)",
      () => ref.pagedDecodeTolerance("float64" as "float32", "float32"),
    );
  }
  if (k === 1) {
    return invalid(
      "pagedDecodeTolerance(float16 state)",
      () => ref.pagedDecodeTolerance("float32", "float16" as "float32"),
    );
  }
  const tolerance = ref.pagedDecodeTolerance("float32", "float32").output;
  if (k === 2) {
    return invalid(
      "rowToleranceBreach(actual short)",
      () => ref.rowToleranceBreach([1], [1, 2], 1, tolerance),
    );
  }
  return invalid("rowToleranceBreach(rowLength 0)", () => ref.rowToleranceBreach([1], [1], 0, tolerance));
}

// The per-row inputs of an n-row call (so that stateIndices of length n are consistent).
function rows(x: ref.PagedDecodeReferenceInputs, n: number): Partial<ref.PagedDecodeReferenceInputs> {
  const w = 2 * x.HK * x.K + x.H * x.V, g = x.perChannel ? x.H * x.K : x.H;
  return {
    B: n,
    packedQkv: new Array(n * w).fill(0.5),
    rawGate: new Array(n * g).fill(0),
    rawBeta: new Array(n * x.H).fill(0),
    hasInitialState: undefined,
  };
}
