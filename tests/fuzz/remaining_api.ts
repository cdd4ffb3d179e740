// The fuzz catalog's generators for the rest of the public API: the process settings and device queries,
// the file functions (asynchronous: the runner awaits them), and the op classes the family generators do
// not make (the combined DeltaNetOp, the BHTD and prefill GDN forwards, the GQA backward op, the
// sliding-window varlen forward) with the saved-states handle passed to the wrong backward.
import * as ak from "../../mod.ts";
import type { Case, Rng, Scope } from "./cases.ts";
import { caseMakers, dispose } from "./family.ts";

const settings = caseMakers("settings");
const files = caseMakers("files");
const ops = caseMakers("op classes");

/** Process settings and device queries; a valid call leaves every setting as it found it. */
export function settingsCases(rng: Rng, scope: Scope, bad: boolean): Case {
  const { valid, invalid } = settings;
  if (!bad) {
    switch (rng.int(0, 7)) {
      case 0:
        return valid("setDebug(debugSettings())", () => ak.setDebug(ak.debugSettings()), false);
      case 1:
        return valid("setTuning(tuning().current)", () => ak.setTuning(ak.tuning().current), false);
      case 2:
        return valid("trimMemoryPool", () => ak.trimMemoryPool(scope.device), false);
      case 3:
        return valid("lastPlan", () => ak.lastPlan(), false);
      case 4:
        return valid("device queries", () => {
          const described = [
            ak.cudaDeviceCount(),
            ak.defaultDevice(),
            ak.builtWithCuda(),
            ak.nativeVersion(),
          ];
          return scope.device === "cpu" ? described : ak.deviceInfo(scope.device);
        }, false);
      case 5:
        return valid("f16BitsToNumber", () => ak.f16BitsToNumber(rng.int(0, 65535)), false);
      case 6:
        if (scope.device !== "cpu") {
          return valid("DeviceEvent", () => {
            using a = new ak.DeviceEvent(0);
            using b = new ak.DeviceEvent(0);
            a.record();
            b.record();
            return a.elapsedTo(b);
          }, false);
        }
        return valid("debugSettings", () => ak.debugSettings(), false);
      default:
        return valid("setDebug({})", () => ak.setDebug({}), false);
    }
  }
  switch (rng.int(0, 5)) {
    case 0:
      return invalid(
        "setDebug(bad)",
        () =>
          ak.setDebug(
            rng.pick<unknown>(["leaks", 1, { leaks: "yes" }, { leak: true }, {
              leaks: 1,
            }]) as ak.DebugOptions,
          ),
      );
    case 1:
      return invalid(
        "setTuning(bad)",
        () =>
          ak.setTuning(
            rng.pick<unknown>([
              "no.such.key=auto",
              { "attention.fwd": "v9" },
              { "attention.fwd": {} },
              7,
              null,
            ]) as ak.TuningSpec,
          ),
      );
    case 2:
      return invalid(
        "trimMemoryPool(bad device)",
        () => ak.trimMemoryPool(rng.pick(["gpu", "cuda:-1", "cuda:1.5", ""])),
      );
    case 3:
      return invalid("deviceInfo(bad device)", () => ak.deviceInfo(rng.pick(["cpu", "cuda:99", "tpu"])));
    case 4:
      return invalid("f16BitsToNumber(bad)", () => ak.f16BitsToNumber(rng.pick([-1, 65536, 0.5, NaN])));
    default:
      return invalid(
        "new DeviceEvent(bad)",
        () => new ak.DeviceEvent(rng.pick<unknown>([1.5, -1, "gpu", NaN, 99]) as number),
      );
  }
}

// One folder for the files of the whole run, removed when the process ends.
let folder: string | undefined;
function scratchFolder(): string {
  if (folder === undefined) {
    const made = Deno.makeTempDirSync({ prefix: "attnkit-fuzz-files-" });
    folder = made;
    globalThis.addEventListener("unload", () => Deno.removeSync(made, { recursive: true }));
  }
  return folder;
}

/** saveNpy / loadNpy / saveSafetensors / loadSafetensors: round trips, and paths or contents refused. */
export function fileCases(rng: Rng, scope: Scope, bad: boolean): Case {
  const { valid, invalid } = files;
  const t = scope.randn([2, rng.int(1, 4)], rng.pick<ak.DType>(["float32", "bfloat16", "float16"]), 1);
  const dir = scratchFolder();
  const path = `${dir}/case-${rng.int(0, 1e9)}`;
  if (!bad) {
    return rng.chance(0.5)
      ? valid("npy file round trip", async () => {
        await ak.saveNpy(`${path}.npy`, t);
        return scope.keep(await ak.loadNpy(`${path}.npy`, { device: scope.device }));
      })
      : valid("safetensors file round trip", async () => {
        await ak.saveSafetensors(`${path}.safetensors`, { t }, { metadata: { note: "fuzz" } });
        dispose(await ak.loadSafetensors(`${path}.safetensors`, { device: scope.device }));
      });
  }
  // Paths no file can be written to or read from: a missing folder, a folder, nothing.
  const badPath = rng.pick([`${dir}/missing/x`, dir, ""]);
  switch (rng.int(0, 4)) {
    case 0:
      return invalid("saveNpy(bad path)", () => ak.saveNpy(badPath, t));
    case 1:
      return invalid("loadNpy(bad path)", () => ak.loadNpy(rng.pick([badPath, `${path}.absent.npy`])));
    case 2:
      return invalid("saveSafetensors(bad path)", () => ak.saveSafetensors(badPath, { t }));
    case 3:
      return invalid("loadSafetensors(bad path)", () => ak.loadSafetensors(badPath));
    default:
      return invalid(
        "saveSafetensors(bad metadata)",
        () =>
          ak.saveSafetensors(`${path}.safetensors`, { t }, {
            metadata: rng.pick<unknown>([{ a: 1 }, { a: null }, "m", [1]]) as Record<string, string>,
          }),
      );
  }
}

/** The op classes the family generators do not make, valid and refused. */
export function opClassCases(rng: Rng, scope: Scope, bad: boolean): Case {
  const { valid, invalid } = ops;
  const B = rng.int(1, 2), T = rng.pick([1, 9, 65]), H = rng.int(1, 2), D = 16;
  const dtype = rng.pick<ak.DType>(["float32", "bfloat16"]);
  const unit = (shape: number[], seed: number) =>
    scope.keep(ak.Tensor.randn(shape, { dtype, device: scope.device, seed, std: D ** -0.5 }));
  const bshd = [B, T, H, D], bhsd = [B, H, T, D];
  const gates = (shape: number[]) => scope.rand(shape, 4, -0.2, 0);
  const betas = (shape: number[]) => scope.rand(shape, 5);
  if (!bad) {
    switch (rng.int(0, 4)) {
      case 0: {
        const [q, k, v] = [unit(bhsd, 1), unit(bhsd, 2), scope.randn(bhsd, dtype, 3)];
        const beta = betas([B, H, T]), dO = scope.randn(bhsd, dtype, 6);
        return valid("DeltaNetOp", () => {
          using op = new ak.DeltaNetOp({ layout: "bhsd", useQkL2norm: true });
          const o = scope.keep(op.forward(q, k, v, beta));
          dispose(op.backward(dO));
          return o;
        });
      }
      case 1: {
        const [q, k, v] = [unit(bhsd, 1), unit(bhsd, 2), scope.randn(bhsd, dtype, 3)];
        const g = gates([B, H, T]), beta = betas([B, H, T]), dO = scope.randn(bhsd, dtype, 6);
        return valid("GatedDeltaNetBHTDFwdOp + result.backward", () => {
          using r = new ak.GatedDeltaNetBHTDFwdOp({ useQkL2norm: true }).forward(q, k, v, g, beta);
          dispose(r.backward(dO));
          return scope.keep(r.output.clone());
        });
      }
      case 2: {
        const [q, k, v] = [unit(bshd, 1), unit(bshd, 2), scope.randn(bshd, dtype, 3)];
        const g = gates([B, T, H]), beta = betas([B, T, H]);
        return valid("GatedDeltaNetPrefillBTHDFwdOp", () => {
          using r = new ak.GatedDeltaNetPrefillBTHDFwdOp({ useQkL2norm: true }).forward(q, k, v, g, beta);
          return scope.keep(r.finalState.clone());
        });
      }
      case 3: {
        const sizes = {
          layout: "bshd",
          batch: B,
          heads: 2 * H,
          headsKv: H,
          seqLen: T,
          dim: D,
          isCausal: true,
        } as const;
        const q = scope.randn([B, T, 2 * H, D], "bfloat16", 1), kv = scope.randn(bshd, "bfloat16", 2);
        const dO = scope.randn([B, T, 2 * H, D], "bfloat16", 3);
        return valid("GroupedQueryAttentionBwdOp", () => {
          using y = new ak.GroupedQueryAttentionFwdOp(sizes).forward(q, kv, kv);
          using grads = new ak.GroupedQueryAttentionBwdOp(sizes).backward(dO, q, kv, kv, y.output, y.lse!);
          return scope.keep(grads.dq.clone());
        });
      }
      default: {
        const total = rng.int(1, 40), cut = rng.int(0, total);
        const q = scope.randn([total, 2 * H, D], "bfloat16", 1),
          kv = scope.randn([total, H, D], "bfloat16", 2);
        const op = new ak.GroupedQueryAttentionSlidingWindowVarlenFwdOp({
          layout: "thd",
          batch: 2,
          heads: 2 * H,
          headsKv: H,
          dim: D,
          isCausal: true,
          windowSizeLeft: rng.int(0, 8),
        });
        const cu = [0, cut, total];
        return valid(
          "GroupedQueryAttentionSlidingWindowVarlenFwdOp",
          () => scope.keep(op.forward(q, kv, kv, cu, cu, Math.max(cut, total - cut))),
        );
      }
    }
  }
  switch (rng.int(0, 4)) {
    case 0:
      return invalid(
        "DeltaNetOp(bad options)",
        () =>
          new ak.DeltaNetOp(
            rng.pick<unknown>([
              {},
              { layout: "thd" },
              { layout: "bshd", useQkL2norm: "yes" },
              null,
            ]) as ak.DeltaCombinedOpOptions,
          ),
      );
    case 1:
      return invalid("DeltaNetOp.backward before forward", () => {
        using op = new ak.DeltaNetOp({ layout: "bshd" });
        dispose(op.backward(scope.randn(bshd, dtype, 6)));
      });
    case 2: {
      const [q, k, v] = [unit(bshd, 1), unit(bshd, 2), scope.randn(bshd, dtype, 3)];
      const beta = betas([B, T, H]), g = gates([B, H, T + 1]);
      return invalid(
        "GatedDeltaNetPrefillBTHDFwdOp.forward(bad g)",
        () => dispose(new ak.GatedDeltaNetPrefillBTHDFwdOp({}).forward(q, k, v, g, beta)),
      );
    }
    case 3: {
      // A DeltaSavedStates handle from a gated forward, passed to the ungated backward.
      const [q, k, v] = [unit(bshd, 1), unit(bshd, 2), scope.randn(bshd, dtype, 3)];
      const g = gates([B, T, H]), beta = betas([B, T, H]), dO = scope.randn(bshd, dtype, 6);
      return invalid("DeltaSavedStates to another backward", () => {
        using r = ak.chunkGatedDeltaRule(q, k, v, g, beta, { layout: "bshd", saveForBackward: true });
        const saved: ak.DeltaSavedStates = r.saved!;
        dispose(ak.chunkDeltaRuleBackward(dO, q, k, v, beta, { layout: "bshd", saved }));
      });
    }
    default: {
      const q = scope.randn([9, 2 * H, D], "bfloat16", 1), kv = scope.randn([9, H, D], "bfloat16", 2);
      return invalid(
        "GroupedQueryAttentionSlidingWindowVarlenFwdOp(bad)",
        () => {
          const op = new ak.GroupedQueryAttentionSlidingWindowVarlenFwdOp(
            rng.pick<unknown>([
              { layout: "bshd", batch: 1, heads: 2 * H, headsKv: H, dim: D },
              { layout: "thd", batch: 1, heads: 2 * H, headsKv: H, dim: D, windowSizeLeft: -2 },
              { layout: "thd", batch: 0, heads: 2 * H, headsKv: H, dim: D },
            ]) as ak.GroupedQueryAttentionSlidingWindowVarlenFwdOptions,
          );
          return scope.keep(op.forward(q, kv, kv, [0, 9], [0, 9], 9));
        },
      );
    }
  }
}

const float8 = caseMakers("float8_e4m3");

/** The float8_e4m3 storage dtype: made, cast and widened; arithmetic and bad casts refused. */
export function float8Cases(rng: Rng, scope: Scope, bad: boolean): Case {
  const { valid, invalid } = float8;
  const shape = [rng.int(0, 3), rng.int(1, 5)];
  const t = scope.keep(
    ak.Tensor.randn(shape, { dtype: "float8_e4m3", device: scope.device, seed: rng.int(0, 99) }),
  );
  if (!bad) {
    return rng.chance(0.5)
      ? valid(
        "randn -> cast",
        () => scope.keep(t.cast(rng.pick<ak.DType>(["float32", "bfloat16", "float16"]))),
      )
      : valid("from -> fill -> widen", () => {
        const f = scope.keep(ak.Tensor.from([0.3, -2, 448], { dtype: "float8_e4m3", device: scope.device }));
        f.fill(rng.pick([0, 1.5, -0.25]));
        return scope.keep(f.cast("float32"));
      });
  }
  switch (rng.int(0, 2)) {
    case 0:
      return invalid("arithmetic", () => scope.keep(rng.chance(0.5) ? t.add(1) : t.mul(t)));
    case 1:
      return invalid("reduction", () => scope.keep(t.sum()));
    default:
      return invalid("bad dtype name", () => t.cast(rng.pick(["float8", "fp8", "float8_e5m2"]) as ak.DType));
  }
}
