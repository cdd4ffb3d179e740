// The fuzz catalog's generator for KDA: valid calls of chunkKda, recurrentKda, their backward
// functions and result backwards on small random shapes in both layouts and both state layouts
// (grouped heads, packed offsets with empty sequences and a fixed capacity, 16-bit inputs), and
// mutations that make a call certainly invalid (bad tensors, wrong gate or beta shapes, states in
// the other layout, unknown or mistyped options, bad layouts).
import * as ak from "../../mod.ts";
import { type Case, IMPL_REFUSAL, type Rng, type Scope } from "./cases.ts";
import { badTensor, caseMakers, dispose } from "./family.ts";

const { valid, invalid } = caseMakers("kda");

function inputs(rng: Rng, scope: Scope) {
  const layout = rng.pick(["bshd", "bhsd"] as const);
  const stateLayout = rng.pick(["kv", "vk"] as const);
  const B = rng.int(1, 2), T = rng.int(0, 70), HK = rng.int(1, 3), H = HK * rng.int(1, 2);
  const K = rng.pick([1, 8, 16, 24]), V = rng.pick([1, 8, 12]);
  const dtype = rng.pick<ak.DType>(["float32", "bfloat16", "float16"]);
  const rows = (heads: number, d?: number) =>
    layout === "bshd" ? [B, T, heads, ...(d ? [d] : [])] : [B, heads, T, ...(d ? [d] : [])];
  return {
    layout,
    stateLayout,
    B,
    T,
    H,
    K,
    V,
    q: scope.randn(rows(HK, K), dtype, 1),
    k: scope.keep(scope.randn(rows(HK, K), dtype, 2).mul(K ** -0.5)),
    v: scope.randn(rows(H, V), dtype, 3),
    gate: scope.rand(rows(H, K), 4, -6, 0),
    beta: scope.rand(rows(H), 5),
    dO: scope.randn(rows(H, V), dtype, 7),
    state: (N: number) => scope.randn(stateLayout === "kv" ? [N, H, K, V] : [N, H, V, K], "float32", 8),
  };
}

const BAD_LAYOUTS: unknown[] = [undefined, "thd", "BSHD", 1];

/** The KDA generator (registered in cases.ts). */
export function kdaCases(rng: Rng, scope: Scope, bad: boolean): Case {
  const name = rng.pick(["chunkKda", "recurrentKda"] as const);
  const x = inputs(rng, scope);
  const options: Record<string, unknown> = { layout: x.layout, outputFinalState: rng.chance(0.5) };
  if (rng.chance(0.5)) options.stateLayout = x.stateLayout;
  if (rng.chance(0.3)) options.scale = 0.5;
  if (rng.chance(0.2)) options.fastmath = rng.chance(0.5);
  if (rng.chance(0.2)) options.impl = rng.pick(["fused", "reference"]);
  // "fused" is refused, naming why, where the kernels cannot serve the call; anything else stays a defect.
  const refusal = options.impl === "fused" ? IMPL_REFUSAL : undefined;
  let N = x.B;
  if (x.layout === "bshd" && x.B === 1 && rng.chance(0.4)) {
    const cut = rng.int(0, x.T), end = rng.int(cut, x.T); // the terminal offset may be below T
    options.cuSeqlens = [0, cut, cut, end];
    N = 3;
  }
  const stateLayout = (options.stateLayout ?? "kv") as "kv" | "vk";
  if (rng.chance(0.5)) options.initialState = stateLayout === x.stateLayout ? x.state(N) : undefined;
  const fn = name === "chunkKda" ? ak.chunkKda : ak.recurrentKda;
  const backFn = name === "chunkKda" ? ak.chunkKdaBackward : ak.recurrentKdaBackward;
  // deno-lint-ignore no-explicit-any
  const call = (o: any, gate: unknown = x.gate, beta: unknown = x.beta) =>
    fn(x.q, x.k, x.v, gate as ak.Tensor, beta as ak.Tensor, o);
  if (!bad) {
    if (rng.chance(0.3)) {
      return valid(
        `${name} + result.backward`,
        () => {
          const r = call(options);
          try {
            dispose(r.backward(x.dO));
          } finally {
            dispose(r);
          }
        },
        true,
        refusal,
      );
    }
    if (rng.chance(0.3)) {
      const o = { ...options };
      delete o.outputFinalState;
      return valid(
        `${name}Backward`,
        // deno-lint-ignore no-explicit-any
        () => dispose(backFn(x.dO, x.q, x.k, x.v, x.gate, x.beta, o as any)),
        true,
        refusal,
      );
    }
    return valid(
      name,
      () => {
        const r = call(options);
        const out = scope.keep(r.output.clone());
        dispose(r);
        // Rows past the last packed sequence are unspecified: only fixed-length outputs are checked.
        return options.cuSeqlens ? undefined : out;
      },
      true,
      refusal,
    );
  }
  switch (rng.int(0, 5)) {
    case 0:
      return invalid(
        `${name}(bad gate)`,
        () => dispose(call(options, badTensor(rng, scope, x.gate, "gate"))),
      );
    case 1:
      return invalid(
        `${name}(bad beta)`,
        () => dispose(call(options, x.gate, badTensor(rng, scope, x.beta, "gate"))),
      );
    case 2:
      return invalid(
        `${name}(unknown option)`,
        () =>
          dispose(call({ ...options, rng: 1, [rng.pick(["chunkSize", "g", "useQkL2norm", "impl"])]: 64 })),
      );
    case 3: {
      const layout = rng.pick(BAD_LAYOUTS);
      return invalid(`${name}(layout ${String(layout)})`, () => dispose(call({ ...options, layout })));
    }
    case 4: {
      // An initial state one size off, or of the other state layout when that shape differs.
      const h0 = x.K !== x.V && rng.chance(0.5)
        ? scope.randn(stateLayout === "kv" ? [N, x.H, x.V, x.K] : [N, x.H, x.K, x.V], "float32", 9)
        : scope.randn([N + 1, x.H, x.K, x.V], "float32", 9);
      return invalid(
        `${name}(initialState of another shape)`,
        () => dispose(call({ ...options, initialState: h0 })),
      );
    }
    default:
      return invalid(
        `${name}(mistyped option)`,
        () => dispose(call({ ...options, stateLayout: rng.pick(["KV", "hv", 1, true]), fastmath: "no" })),
      );
  }
}
