// The fuzz catalog's generator for the gate transforms: valid calls of gateTransform, boundGate, their
// explicit backwards and the result's backward on small random inputs (both kinds, per head and per
// channel, four raw dtypes, leading dims of rank 0 to 3 including empty ones, fastmath on and off),
// and mutations that make a call certainly invalid.
import * as ak from "../../mod.ts";
import { type Case, IMPL_REFUSAL, type Rng, type Scope } from "./cases.ts";
import { caseMakers, dispose } from "./family.ts";

const { valid, invalid } = caseMakers("gate transform");

/** The gate-transform generator (registered in cases.ts). */
export function gateTransformCases(rng: Rng, scope: Scope, bad: boolean): Case {
  const lead = rng.pick([[], [1], [2, 5], [1, 0], [2, 3, 7]]);
  const H = rng.int(1, 4);
  const perChannel = rng.chance(0.5);
  const D = rng.pick([1, 3, 16]);
  const tail = perChannel ? [H, D] : [H];
  const dtype = rng.pick<ak.DType>(["float32", "bfloat16", "float16", "float64"]);
  const raw = scope.keep(scope.randn([...lead, ...tail], "float32", rng.int(0, 999)).cast(dtype));
  const aLog = scope.rand([H], rng.int(0, 999), -2, 2);
  const dtBias = scope.randn(tail, "float32", rng.int(0, 999));
  const dGate = scope.randn([...lead, ...tail], rng.pick<ak.DType>(["float32", "bfloat16"]), 7);
  const kind = rng.pick(ak.GATE_TRANSFORM_KINDS);
  const options: Omit<ak.GateTransformOptions, "out"> = kind === "bounded"
    ? { kind, lowerBound: rng.pick([-5, -1, -0.5, 0]) }
    : { kind };
  if (rng.chance(0.5)) options.fastmath = rng.chance(0.5);
  if (rng.chance(0.2)) options.impl = rng.pick(["fused", "reference"] as const);
  // "fused" is refused on the CPU (it has no kernels); anything else refused stays a defect.
  const refusal = options.impl === "fused" ? IMPL_REFUSAL : undefined;
  const gateOf = (r: ak.GateTransformResult) => {
    const out = scope.keep(r.gate.clone());
    dispose(r);
    return out;
  };
  if (!bad) {
    switch (rng.int(0, 4)) {
      case 0:
        return valid("forward", () => gateOf(ak.gateTransform(raw, aLog, dtBias, options)), true, refusal);
      case 1:
        return valid(
          "forward + result.backward",
          () => {
            using r = ak.gateTransform(raw, aLog, dtBias, options);
            using g = r.backward(dGate);
            return scope.keep(g.daLog.clone());
          },
          true,
          refusal,
        );
      case 2:
        return valid(
          "backward",
          () => {
            using g = ak.gateTransformBackward(dGate, raw, aLog, dtBias, options);
            return scope.keep(g.ddtBias.clone());
          },
          true,
          refusal,
        );
      case 3: {
        // boundGate takes per-channel gates only.
        const bias2 = scope.randn([H, D], "float32", 3);
        const raw2 = scope.randn([...lead, H, D], dtype, 4);
        return valid(
          "boundGate",
          () => gateOf(ak.boundGate(raw2, aLog, bias2, { fastmath: rng.chance(0.5) })),
        );
      }
      default: {
        const bias2 = scope.randn([H, D], "float32", 5);
        const raw2 = scope.randn([...lead, H, D], dtype, 6);
        const dGate2 = scope.randn([...lead, H, D], "float32", 7);
        return valid("boundGateBackward", () => {
          using g = ak.boundGateBackward(dGate2, raw2, aLog, bias2);
          return scope.keep(g.draw.clone());
        });
      }
    }
  }
  const call = (r: unknown, a: unknown, b: unknown, o: unknown) =>
    dispose(ak.gateTransform(r as ak.Tensor, a as ak.Tensor, b as ak.Tensor, o as ak.GateTransformOptions));
  switch (rng.int(0, 7)) {
    case 0:
      return invalid(
        "kind missing or unknown",
        () => call(raw, aLog, dtBias, rng.pick<unknown>([undefined, {}, { kind: "sigmoid" }, { kind: 1 }])),
      );
    case 1:
      return invalid("lower bound missing, positive, or given to softplus", () =>
        call(
          raw,
          aLog,
          dtBias,
          rng.pick<object>([
            { kind: "bounded" },
            { kind: "bounded", lowerBound: rng.pick([1, NaN, Infinity, -Infinity, "-5"]) },
            { kind: "softplus", lowerBound: -5 },
          ]),
        ));
    case 2:
      return invalid(
        "unknown option or bad value",
        () =>
          call(raw, aLog, dtBias, {
            ...options,
            ...rng.pick<object>([{ lower_bound: -5 }, { fast_math: true }, { impl: "fast" }, {
              fastmath: 1,
            }]),
          }),
      );
    case 3: {
      // aLog of another size or dtype, dtBias of a rank or size that does not fit raw.
      return invalid("aLog or dtBias does not fit", () =>
        call(
          raw,
          rng.chance(0.5) ? scope.rand([H + 1], 1) : scope.keep(aLog.cast("bfloat16")),
          dtBias,
          options,
        ));
    }
    case 4: {
      const off = rng.pick([[H + 1], [H, D + 1], [H, D, 1], [H + 1, D]]);
      return invalid(
        "dtBias does not fit raw",
        () => call(raw, aLog, scope.randn(off, "float32", 2), options),
      );
    }
    case 5:
      return invalid("boundGate on a per-head gate", () => {
        const raw1 = scope.randn([...lead, H], "float32", 8);
        const bias1 = scope.randn([H], "float32", 9);
        dispose(ak.boundGate(raw1, aLog, bias1));
      });
    case 6: {
      const shape = [...lead, ...tail];
      shape[shape.length - 1] += 1;
      const wrong = scope.randn(shape, "float32", 10);
      return invalid(
        "backward with a dGate of another shape",
        () => dispose(ak.gateTransformBackward(wrong, raw, aLog, dtBias, options)),
      );
    }
    default: {
      const gone = scope.randn([...lead, ...tail], "float32", 11);
      gone.dispose();
      return invalid("a disposed input", () => call(gone, aLog, dtBias, options));
    }
  }
}
