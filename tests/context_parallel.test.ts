// Context parallelism for Gated DeltaNet and KDA: the summary algebra against the float64 oracle, the
// plan of the seed's zig-zag example, and sharded against unsharded (outputs, final states, every
// gradient) for contiguous, zig-zag, document-aligned (bit for bit) and uneven layouts over 1, 2, 3 and
// 8 simulated ranks, with empty fragments; bad plans, groups and spans refused. Tolerance: the delta
// rule's (relative RMS against the unsharded op; float32 5e-5 outputs and states, 8e-5 dq / dk / dv,
// 2e-4 dg / dgate / dbeta; 16-bit 0.005, 0.008, 0.02, KDA's dgate 0.08 as in tests/kda.test.ts).
import assert from "node:assert/strict";
import {
  AttnkitError,
  causalConv1d,
  chunkGatedDeltaRule,
  chunkGatedDeltaRuleBackward,
  chunkGdnPrepare,
  chunkKda,
  chunkKdaBackward,
  chunkKdaPrepare,
  compare,
  composeEntryStates,
  composeExitCotangents,
  composeSummaries,
  contextParallelConvHistory,
  contextParallelGdn,
  contextParallelKda,
  ContextParallelPlan,
  type Device,
  type Fragment,
  mergeState,
  neutralSummary,
  SimulatedGroup,
  Tensor,
} from "../mod.ts";
import { DELTA_RULE_TOLERANCE, deltaRuleReference, GATE_GRADIENT_TOLERANCE } from "../reference/mod.ts";
import { deviceTest, expectNoLeak, refuses, withSeed } from "./helpers.ts";

const H = 2, HK = 1, K = 64, V = 64;
// Sequences of 40, 192 and 152 tokens (the seed's example), one of 1, and an empty one.
const CU = [0, 40, 232, 384, 385, 385];
const TOTAL = CU[CU.length - 1];

const LAYOUTS: Record<string, Fragment[][]> = {
  "one rank": [[[0, TOTAL]]],
  "contiguous, 2 ranks": [[[0, 192]], [[192, TOTAL]]],
  "zig-zag, 2 ranks (the seed's table)": [[[0, 96], [288, TOTAL]], [[96, 192], [192, 288]]],
  "uneven, 3 ranks, an empty fragment": [[[0, 7], [7, 7]], [[7, 300]], [[300, TOTAL]]],
  "8 ranks, cuts off the chunk grid": Array.from(
    { length: 8 },
    (_, r) => [[48 * r + (r ? 1 : 0), 48 * r + 49]],
  ),
  "a rank with nothing": [[[0, TOTAL]], [[TOTAL, TOTAL]]],
};
// The 8-rank rows above end at 385: the last one is [337, 385].
LAYOUTS["8 ranks, cuts off the chunk grid"][7] = [[337, TOTAL]];

/** The variant under test: its recipe, its unsharded op and the gate's shape. */
interface Variant {
  name: string;
  /** Per key channel (KDA) or per head (Gated DeltaNet). */
  channelGate: boolean;
  gateGrad: "dg" | "dgate";
  recipe: typeof contextParallelGdn | typeof contextParallelKda;
  whole(x: Global): { output: Tensor; finalState: Tensor; grads: Record<string, Tensor> } & Disposable;
}

const CU_OPTIONS = { layout: "bshd", cuSeqlens: CU } as const;

const GDN: Variant = {
  name: "GDN",
  channelGate: false,
  gateGrad: "dg",
  recipe: contextParallelGdn,
  whole(x) {
    const o = { ...CU_OPTIONS, useQkL2norm: true };
    const f = chunkGatedDeltaRule(x.q, x.k, x.v, x.g, x.beta, { ...o, outputFinalState: true });
    const b = chunkGatedDeltaRuleBackward(x.dO, x.q, x.k, x.v, x.g, x.beta, { ...o, dFinalState: x.dFinal });
    const grads = { dq: b.dq, dk: b.dk, dv: b.dv, dg: b.dg!, dbeta: b.dbeta };
    return {
      output: f.output,
      finalState: f.finalState!,
      grads,
      [Symbol.dispose]: () => (f[Symbol.dispose](), b[Symbol.dispose]()),
    };
  },
};

const KDA: Variant = {
  name: "KDA",
  channelGate: true,
  gateGrad: "dgate",
  recipe: contextParallelKda as Variant["recipe"],
  whole(x) {
    const f = chunkKda(x.q, x.k, x.v, x.g, x.beta, { ...CU_OPTIONS, outputFinalState: true });
    const b = chunkKdaBackward(x.dO, x.q, x.k, x.v, x.g, x.beta, { ...CU_OPTIONS, dFinalState: x.dFinal });
    const grads = { dq: b.dq, dk: b.dk, dv: b.dv, dgate: b.dgate, dbeta: b.dbeta };
    return {
      output: f.output,
      finalState: f.finalState!,
      grads,
      [Symbol.dispose]: () => (f[Symbol.dispose](), b[Symbol.dispose]()),
    };
  },
};

interface Global {
  q: Tensor;
  k: Tensor;
  v: Tensor;
  g: Tensor;
  beta: Tensor;
  dO: Tensor;
  dFinal: Tensor;
  [Symbol.dispose](): void;
}

function globalInputs(variant: Variant, device: Device, dtype: "float32" | "bfloat16", seed: number): Global {
  const o = { dtype, device };
  const x = {
    q: Tensor.randn([1, TOTAL, HK, K], { ...o, seed }),
    // KDA takes k as given (no L2 norm in the call): small keys keep its recurrence contracting.
    k: Tensor.randn([1, TOTAL, HK, K], { ...o, seed: seed + 1, std: variant.channelGate ? K ** -0.5 : 1 }),
    v: Tensor.randn([1, TOTAL, H, V], { ...o, seed: seed + 2 }),
    g: Tensor.rand(variant.channelGate ? [1, TOTAL, H, K] : [1, TOTAL, H], {
      device,
      seed: seed + 3,
      low: -0.2,
      high: 0,
    }),
    beta: Tensor.rand([1, TOTAL, H], { device, seed: seed + 4 }),
    dO: Tensor.randn([1, TOTAL, H, V], { ...o, seed: seed + 5 }),
    dFinal: Tensor.randn([CU.length - 1, H, K, V], { device, seed: seed + 6 }),
  };
  return { ...x, [Symbol.dispose]: () => Object.values(x).forEach((t) => t.dispose()) };
}

interface RankOutcome {
  output: Tensor;
  exitStates: Tensor;
  /** Owns output, exitStates and what the backward read. */
  result: Disposable;
  grads: Record<string, Tensor>;
}

/** Every rank's forward and backward over its span of the global inputs. */
async function runSharded(variant: Variant, x: Global, fragments: Fragment[][]): Promise<RankOutcome[]> {
  const groups = SimulatedGroup.create(fragments.length);
  return await Promise.all(groups.map(async (group) => {
    const plan = ContextParallelPlan.fromFragments(CU, fragments, group.rank);
    using ids = plan.globalTokenIds(x.q.device);
    using q = x.q.indexSelect(1, ids), k = x.k.indexSelect(1, ids), v = x.v.indexSelect(1, ids);
    using g = x.g.indexSelect(1, ids), beta = x.beta.indexSelect(1, ids), dO = x.dO.indexSelect(1, ids);
    const options = variant === GDN ? { plan, group, useQkL2norm: true } : { plan, group };
    const r = await variant.recipe(q, k, v, g, beta, options);
    // The final states' gradient goes to the terminal rows; the other exit states get none.
    using sequenceOf = Tensor.from(plan.subsequences.map((s) => s.sequence), {
      dtype: "int64",
      device: x.q.device,
    });
    using picked = x.dFinal.indexSelect(0, sequenceOf);
    using terminal = Tensor.from(plan.subsequences.map((_, i) => (plan.terminal.includes(i) ? 1 : 0)), {
      shape: [plan.subsequences.length, 1, 1, 1],
      device: x.q.device,
    });
    using dExitStates = picked.mul(terminal);
    const gr = await r.backward(dO, { dExitStates });
    const grads: Record<string, Tensor> = {};
    for (const name of ["dq", "dk", "dv", variant.gateGrad, "dbeta"]) grads[name] = gr[name]!;
    return { output: r.output, exitStates: r.exitStates, grads, result: r };
  }));
}

function disposeAll(outcomes: RankOutcome[]): void {
  for (const o of outcomes) {
    o.result[Symbol.dispose]();
    for (const t of Object.values(o.grads)) t.dispose();
  }
}

/** Checks each rank's results against the unsharded op's, gathered into its span. */
function checkAgainstUnsharded(
  variant: Variant,
  x: Global,
  fragments: Fragment[][],
  outcomes: RankOutcome[],
  check: (what: string, actual: Tensor, expected: Tensor, tol: number) => void,
): void {
  using whole = variant.whole(x);
  const tol = DELTA_RULE_TOLERANCE[x.q.dtype as "float32" | "bfloat16"];
  const gradTol: Record<string, number> = {
    dq: tol.dqkv,
    dk: tol.dqkv,
    dv: tol.dqkv,
    dg: tol.dsmall,
    dgate: GATE_GRADIENT_TOLERANCE.kda[x.q.dtype as "float32" | "bfloat16"],
    dbeta: tol.dsmall,
  };
  outcomes.forEach((r, rank) => {
    const plan = ContextParallelPlan.fromFragments(CU, fragments, rank);
    using ids = plan.globalTokenIds(x.q.device);
    const span = (t: Tensor) => t.indexSelect(1, ids);
    using out = span(whole.output);
    check(`rank ${rank} output`, r.output, out, tol.output);
    for (const i of plan.terminal) {
      using mine = r.exitStates.select(0, i);
      using theirs = whole.finalState!.select(0, plan.subsequences[i].sequence);
      check(`rank ${rank} final state of sequence ${plan.subsequences[i].sequence}`, mine, theirs, tol.state);
    }
    for (const key of Object.keys(r.grads)) {
      using expected = span(whole.grads[key]);
      check(`rank ${rank} ${key}`, r.grads[key], expected, gradTol[key]);
    }
  });
}

function close(what: string, actual: Tensor, expected: Tensor, tol: number): void {
  const c = compare(actual, expected);
  assert.equal(c.nanCount, 0, `${what}: NaN`);
  assert.ok(c.relRms <= tol, `${what}: relative RMS ${c.relRms} > ${tol}`);
}

function bitwise(what: string, actual: Tensor, expected: Tensor): void {
  const c = compare(actual, expected);
  assert.equal(c.maxAbs, 0, `${what}: differs by up to ${c.maxAbs}`);
}

for (const variant of [GDN, KDA]) {
  for (const dtype of ["float32", "bfloat16"] as const) {
    deviceTest(
      `context parallel ${variant.name} (${dtype}): sharded equals unsharded for every layout, forward and backward`,
      (device) =>
        withSeed((seed) =>
          expectNoLeak(device, async () => {
            using x = globalInputs(variant, device, dtype, seed);
            for (const [name, fragments] of Object.entries(LAYOUTS)) {
              const outcomes = await runSharded(variant, x, fragments);
              try {
                checkAgainstUnsharded(
                  variant,
                  x,
                  fragments,
                  outcomes,
                  (what, a, e, tol) => close(`${name}: ${what}`, a, e, tol),
                );
              } finally {
                disposeAll(outcomes);
              }
            }
          })
        ),
    );
  }

  deviceTest(
    `context parallel ${variant.name}: document-aligned fragments give the unsharded bits`,
    (device) =>
      withSeed((seed) =>
        expectNoLeak(device, async () => {
          using x = globalInputs(variant, device, "bfloat16", seed);
          // Whole documents per rank, in any order on a rank, with an empty fragment.
          const fragments: Fragment[][] = [[[232, 384], [0, 40]], [[40, 232], [384, 385], [385, 385]]];
          const outcomes = await runSharded(variant, x, fragments);
          try {
            checkAgainstUnsharded(variant, x, fragments, outcomes, (what, a, e) => {
              // KDA's CUDA backward sums dq, dk, dbeta and dgate with float atomics, whose order (so
              // whose last bit) varies from call to call, unsharded too: those are held to 1e-6.
              const atomic = variant === KDA && device === "cuda" && / (dq|dk|dbeta|dgate)$/.test(what);
              if (atomic) close(what, a, e, 1e-6);
              else bitwise(what, a, e);
            });
          } finally {
            disposeAll(outcomes);
          }
        })
      ),
  );
}

deviceTest(
  "state summaries: a segment's map applied to any entry state equals the run from it (GDN: the float64 oracle)",
  (device) =>
    withSeed((seed) =>
      expectNoLeak(device, () => {
        const dtype = device === "cpu" ? "float32" : "bfloat16";
        const N = CU.length - 1, all = Array.from({ length: N }, (_, i) => i);
        for (const variant of [GDN, KDA]) {
          using x = globalInputs(variant, device, dtype, seed);
          using entry = Tensor.randn([N, H, K, V], { device, seed: seed + 7, std: 0.3 });
          const prepare = variant === GDN ? chunkGdnPrepare : chunkKdaPrepare;
          const options = variant === GDN ? { cuSeqlens: CU, useQkL2norm: true } : { cuSeqlens: CU };
          using prepared = prepare(x.q, x.k, x.v, x.g, x.beta, options);
          assert.equal(prepared.segments, N);
          using s = prepared.stateSummaries(all);
          using exit = mergeState(entry, s);
          using expected = variant === GDN ? oracleExit(x, entry) : kdaExit(x, entry);
          const c = compare(exit, expected);
          assert.ok(
            c.relRms <= DELTA_RULE_TOLERANCE[dtype].state,
            `${variant.name}: relative RMS ${c.relRms}`,
          );
          // The empty segment's map is the neutral one, and so is the row past the last segment.
          using empty = prepared.stateSummaries([N - 1, N]);
          using neutral = neutralSummary([2, H], K, V, device);
          bitwise(`${variant.name} empty segment bias`, empty.bias, neutral.bias);
          bitwise(`${variant.name} empty segment transition`, empty.transition, neutral.transition);
        }
      })
    ),
);

/** The float64 oracle's exit states of Gated DeltaNet over CU from `entry`. */
function oracleExit(x: Global, entry: Tensor): Tensor {
  const host = (t: Tensor) => Float64Array.from(t.toArray() as Float32Array);
  const oracle = deltaRuleReference({
    B: 1,
    T: TOTAL,
    H,
    HK,
    K,
    V,
    scale: K ** -0.5,
    l2norm: true,
    cuSeqlens: CU,
    q: host(x.q),
    k: host(x.k),
    v: host(x.v),
    g: host(x.g),
    beta: host(x.beta),
    initialState: host(entry),
  });
  return Tensor.from(oracle.finalState, { shape: entry.shape, device: entry.device });
}

/** chunkKda's exit states over CU from `entry`. */
function kdaExit(x: Global, entry: Tensor): Tensor {
  using run = chunkKda(x.q, x.k, x.v, x.g, x.beta, {
    layout: "bshd",
    cuSeqlens: CU,
    initialState: entry,
    outputFinalState: true,
  });
  return run.finalState!.clone();
}

Deno.test("state summaries: composition is the map of one run after the other; the neutral one changes nothing", () =>
  expectNoLeak("cpu", () => {
    const make = (seed: number) => ({
      bias: Tensor.randn([3, 4, 5], { seed }),
      transition: Tensor.randn([3, 4, 4], { seed: seed + 1, std: 0.5 }),
      [Symbol.dispose]() {
        this.bias.dispose();
        this.transition.dispose();
      },
    });
    using a = make(1), b = make(3), c = make(5);
    using state = Tensor.randn([3, 4, 5], { seed: 7 });
    using ab = composeSummaries(a, b);
    using viaAb = mergeState(state, ab);
    using viaA = mergeState(state, a);
    using viaBoth = mergeState(viaA, b);
    assert.ok(compare(viaAb, viaBoth).relRms < 1e-6);
    // Associative: (a b) c = a (b c).
    using left = composeSummaries(ab, c);
    using bc = composeSummaries(b, c);
    using right = composeSummaries(a, bc);
    assert.ok(
      compare(left.bias, right.bias).relRms < 1e-6 &&
        compare(left.transition, right.transition).relRms < 1e-6,
    );
    using n = neutralSummary([3], 4, 5);
    using same = mergeState(state, n);
    bitwise("neutral", same, state);
    using wide = Tensor.zeros([3, 4, 6]);
    refuses(() => mergeState(wide, a), /state: expected the bias's shape \[3,4,5\]/);
    refuses(() => composeSummaries(a, n.bias as never), /second: expected a state summary|second.bias/);
    refuses(() => neutralSummary([2], 0, 4), /K: expected an integer >= 1/);
  }));

Deno.test("ContextParallelPlan: the seed's zig-zag example", () => {
  const cu = [0, 40, 232, 384];
  const table: Fragment[][] = [[[0, 96], [288, 384]], [[96, 192], [192, 288]]];
  const r0 = ContextParallelPlan.fromFragments(cu, table, 0);
  const r1 = ContextParallelPlan.fromFragments(cu, table, 1);
  assert.deepEqual(r0.cuSeqlens, [0, 40, 96, 192]);
  assert.deepEqual(r1.cuSeqlens, [0, 96, 136, 192]);
  assert.equal(r0.slots, 2);
  // s1 = A∩s1 -> C∩s1 -> D∩s1; s2 = D∩s2 -> B∩s2.
  assert.deepEqual(r1.predecessors, [[{ rank: 0, fragment: 0 }], [{ rank: 0, fragment: 0 }, {
    rank: 1,
    fragment: 0,
  }]]);
  assert.deepEqual(r0.predecessors, [[], [{ rank: 1, fragment: 1 }]]);
  assert.deepEqual(r0.successors, [[{ rank: 1, fragment: 1 }, { rank: 1, fragment: 0 }], []]);
  assert.deepEqual(r1.successors, [[{ rank: 1, fragment: 1 }], [{ rank: 0, fragment: 1 }]]);
  assert.deepEqual(r0.terminal, [0, 2]); // A∩s0 and B∩s2 end their sequences
  assert.deepEqual(r1.terminal, [1]); // D∩s1
  using ids = r1.globalTokenIds();
  const got = Array.from(ids.toArray() as BigInt64Array, Number);
  assert.deepEqual([got[0], got[95], got[96], got[191]], [96, 191, 192, 287]);
});

Deno.test("ContextParallelPlan: fragments that do not tile the stream, and bad ranks, are refused", () => {
  const cu = [0, 10, 20];
  refuses(() => ContextParallelPlan.fromFragments(cu, [[[0, 12]], [[10, 20]]], 0), /overlaps tokens/);
  refuses(
    () => ContextParallelPlan.fromFragments(cu, [[[0, 8]], [[10, 20]]], 0),
    /tokens \[8, 10\) belong to no fragment/,
  );
  refuses(
    () => ContextParallelPlan.fromFragments(cu, [[[0, 10]]], 0),
    /tokens \[10, 20\) belong to no fragment/,
  );
  refuses(() => ContextParallelPlan.fromFragments(cu, [[[0, 25]]], 0), /0 <= start <= stop <= 20/);
  refuses(
    () => ContextParallelPlan.fromFragments(cu, [[[0, 20]]], 1),
    /cpRank: expected an integer in \[0, 1\)/,
  );
  refuses(() => ContextParallelPlan.fromFragments([0, 5, 3], [[[0, 3]]], 0), /cuSeqlensGlobal\[2\]/);
  refuses(() => ContextParallelPlan.fromFragments(cu, [[[0, "20"]]] as never, 0), /fragments\[0\]\[0\]/);
});

Deno.test("contextParallelGdn: a plan and group that disagree, or a span of another length, are refused", async () => {
  const cu = [0, 64];
  const plan = ContextParallelPlan.fromFragments(cu, [[[0, 32]], [[32, 64]]], 0);
  const [c0, c1] = SimulatedGroup.create(2);
  using x = Tensor.randn([1, 32, 1, 16]);
  using gate = Tensor.rand([1, 32, 1], { low: -0.1, high: 0 });
  const call = (opts: unknown, q = x) => contextParallelGdn(q, q, q, gate, gate, opts as never);
  await assert.rejects(
    call({ plan, group: c1 }),
    (e) => e instanceof AttnkitError && /rank 1 of 2, but the plan is rank 0/.test(e.message),
  );
  await assert.rejects(call({ plan: {}, group: c0 }), /options.plan: expected a ContextParallelPlan/);
  await assert.rejects(call({ plan, group: {} }), /options.group: expected a Communicator/);
  await assert.rejects(call({ plan, group: c0, causal: true }), /causal/);
  using long = Tensor.randn([1, 33, 1, 16]);
  await assert.rejects(call({ plan, group: c0 }, long), /q: expected \[1, 32, \.\.\.\]/);
});

deviceTest(
  "contextParallelConvHistory: sharded convolution equals unsharded, output and every gradient",
  (device) =>
    withSeed((seed) =>
      expectNoLeak(device, async () => {
        const C = 24;
        // Pieces shorter than the history (3, 2 and 4 tokens) make a history span several of them.
        const layouts: Fragment[][][] = [
          ...Object.values(LAYOUTS),
          [[[0, 3], [9, 12]], [[3, 5], [12, 40]], [[5, 9], [40, TOTAL]]],
        ];
        for (const dtype of ["float32", "bfloat16"] as const) {
          for (const width of [2, 4, 8]) {
            using x = Tensor.randn([1, TOTAL, C], { dtype, device, seed });
            using weight = Tensor.randn([C, width], { dtype, device, seed: seed + 1, std: 0.5 });
            using dO = Tensor.randn([1, TOTAL, C], { dtype, device, seed: seed + 2 });
            const o = { activation: "silu" } as const;
            using whole = causalConv1d(x, weight, { ...o, cuSeqlens: CU });
            using wholeGrads = whole.backward(dO);
            for (const fragments of layouts) {
              const groups = SimulatedGroup.create(fragments.length);
              const ranks = await Promise.all(groups.map(async (group) => {
                const plan = ContextParallelPlan.fromFragments(CU, fragments, group.rank);
                using ids = plan.globalTokenIds(device);
                using xs = x.indexSelect(1, ids);
                using dOs = dO.indexSelect(1, ids);
                using h = await contextParallelConvHistory(xs, { plan, group, width });
                if (plan.subsequences.length === 0) {
                  // Nothing to convolve, but the rank takes part in both exchanges.
                  using none = Tensor.zeros([0, width - 1, C], { dtype, device });
                  using back = await h.backward(none);
                  assert.deepEqual(back.shape, [1, 0, C]);
                  return { out: 0, dx: 0, dweight: Tensor.zeros([C, width], { device }) };
                }
                using r = causalConv1d(xs, weight, {
                  ...o,
                  cuSeqlens: plan.cuSeqlens,
                  initialState: h.history,
                });
                using grads = r.backward(dOs);
                using fromHistory = await h.backward(grads.dInitialState!);
                using dx32 = grads.dx.cast("float32");
                using dxTotal = dx32.add(fromHistory);
                using expectedOut = whole.output.indexSelect(1, ids);
                using expectedDx = wholeGrads.dx.indexSelect(1, ids);
                return {
                  out: compare(r.output, expectedOut).relRms,
                  dx: compare(dxTotal, expectedDx).relRms,
                  dweight: grads.dweight.cast("float32"),
                };
              }));
              const tol = dtype === "float32" ? 1e-5 : 0.01;
              ranks.forEach((r, rank) => {
                assert.ok(r.out <= tol, `W ${width} ${dtype} rank ${rank}: output relative RMS ${r.out}`);
                assert.ok(r.dx <= tol, `W ${width} ${dtype} rank ${rank}: dx relative RMS ${r.dx}`);
              });
              // dweight sums over the ranks.
              let total = ranks[0].dweight.clone();
              for (const r of ranks.slice(1)) {
                const next = total.add(r.dweight);
                total.dispose();
                total = next;
              }
              for (const r of ranks) r.dweight.dispose();
              using sum = total;
              const c = compare(sum, wholeGrads.dweight);
              assert.ok(c.relRms <= tol, `W ${width} ${dtype}: dweight relative RMS ${c.relRms}`);
            }
          }
        }
      })
    ),
);

deviceTest(
  "context parallel routing: with caps, and copied in from another layout (a replay), it runs that layout",
  (device) =>
    withSeed((seed) =>
      expectNoLeak(device, async () => {
        using x = globalInputs(GDN, device, "float32", seed);
        // Two tables with the same span length per rank (192 and 193 tokens).
        const contiguous: Fragment[][] = [[[0, 192]], [[192, TOTAL]]];
        const zigzag: Fragment[][] = [[[0, 96], [289, TOTAL]], [[96, 192], [192, 289]]];
        const caps = { slots: 3, maxSubsequences: 6 };
        const groups = SimulatedGroup.create(2);
        const ranks = await Promise.all(groups.map(async (group) => {
          const first = ContextParallelPlan.fromFragments(CU, contiguous, group.rank);
          const next = ContextParallelPlan.fromFragments(CU, zigzag, group.rank);
          using captured = first.routing(device, caps);
          using fresh = next.routing(device, caps);
          captured.copyFrom(fresh); // what a captured graph would read on its next replay
          using ids = next.globalTokenIds(device);
          using q = x.q.indexSelect(1, ids), k = x.k.indexSelect(1, ids), v = x.v.indexSelect(1, ids);
          using g = x.g.indexSelect(1, ids), beta = x.beta.indexSelect(1, ids), dO = x.dO.indexSelect(1, ids);
          const options = { group, useQkL2norm: true };
          using viaRouting = await contextParallelGdn(q, k, v, g, beta, { ...options, routing: captured });
          using viaPlan = await contextParallelGdn(q, k, v, g, beta, { ...options, plan: next });
          const N = next.subsequences.length;
          assert.deepEqual(viaRouting.exitStates.shape, [caps.maxSubsequences, H, K, V]);
          bitwise("output", viaRouting.output, viaPlan.output);
          using head = viaRouting.exitStates.indexSelect(0, [...Array(N).keys()]);
          bitwise("exit states", head, viaPlan.exitStates);
          using padding = viaRouting.exitStates.indexSelect(0, [N, caps.maxSubsequences - 1]);
          using zeros = Tensor.zeros(padding.shape, { device });
          assert.equal(
            compare(padding, zeros).maxAbs,
            0,
            "padding rows stay zero",
          );
          using gr = await viaRouting.backward(dO);
          using gp = await viaPlan.backward(dO);
          for (const key of ["dq", "dk", "dv", "dg", "dbeta"]) {
            const c = compare(gr[key]!, gp[key]!);
            assert.ok(c.relRms <= 1e-6, `${key}: relative RMS ${c.relRms}`);
          }
          return N;
        }));
        assert.deepEqual(ranks, [4, 3]);
      })
    ),
);

deviceTest(
  "contextParallelConvHistory: a capped routing with another layout copied in gives that layout's history and gradients",
  (device) =>
    withSeed((seed) =>
      expectNoLeak(device, async () => {
        const C = 8, width = 4;
        using x = Tensor.randn([1, TOTAL, C], { device, seed });
        // Same span lengths per rank (192 and 193); short pieces make histories span several of them.
        const before: Fragment[][] = [[[0, 192]], [[192, TOTAL]]];
        const after: Fragment[][] = [[[0, 3], [5, 9], [12, 197]], [[3, 5], [9, 12], [197, TOTAL]]];
        const caps = { slots: 3, maxSubsequences: 6, convHistory: width - 1 };
        const groups = SimulatedGroup.create(2);
        await Promise.all(groups.map(async (group) => {
          const next = ContextParallelPlan.fromFragments(CU, after, group.rank);
          using captured = ContextParallelPlan.fromFragments(CU, before, group.rank).routing(device, caps);
          using fresh = next.routing(device, caps);
          captured.copyFrom(fresh);
          using ids = next.globalTokenIds(device);
          using xs = x.indexSelect(1, ids);
          using viaRouting = await contextParallelConvHistory(xs, { routing: captured, group, width });
          using viaPlan = await contextParallelConvHistory(xs, { plan: next, group, width });
          const N = next.subsequences.length;
          assert.deepEqual(viaRouting.history.shape, [caps.maxSubsequences, width - 1, C]);
          using head = viaRouting.history.indexSelect(0, [...Array(N).keys()]);
          bitwise(`rank ${group.rank}: history`, head, viaPlan.history);
          using dH = Tensor.randn([caps.maxSubsequences, width - 1, C], { device, seed: seed + 1 });
          using dHead = dH.indexSelect(0, [...Array(N).keys()]);
          using backRouting = await viaRouting.backward(dH);
          using backPlan = await viaPlan.backward(dHead);
          // Padding segments' rows of dH read nothing, so they send nothing back.
          bitwise(`rank ${group.rank}: history gradient`, backRouting, backPlan);
        }));
      })
    ),
);

Deno.test("context parallel routing: two contiguous ranks run one forward and one backward each, no summary pass beyond", () => {
  const flags = (rank: number) => {
    using r = ContextParallelPlan.fromFragments(CU, LAYOUTS["contiguous, 2 ranks"], rank).routing("cpu");
    return { entryFree: r.entryFree, exitFree: r.exitFree, passes: { ...r.passes } };
  };
  // Rank 0: no entry to wait for (its bias pass is its forward), exits sent on (pass B only).
  assert.deepEqual(flags(0), {
    entryFree: true,
    exitFree: false,
    passes: { bias: true, transition: false, reverse: false },
  });
  // Rank 1: its entry from rank 0's bias (no transition: a fold starts from zero), no exit goes on
  // (pass A is the whole backward), and its reverse slot's segment is not its fragment's last (no T^T).
  assert.deepEqual(flags(1), {
    entryFree: false,
    exitFree: true,
    passes: { bias: false, transition: false, reverse: false },
  });
  // With caps every pass runs and neither shortcut is taken (another layout may need them).
  using capped = ContextParallelPlan.fromFragments(CU, LAYOUTS["contiguous, 2 ranks"], 0).routing("cpu", {
    slots: 2,
  });
  assert.deepEqual([capped.entryFree, capped.exitFree], [false, false]);
});

Deno.test("context parallel routing: caps below the layout, layouts that do not fit, and ambiguous options are refused", async () => {
  const plan = ContextParallelPlan.fromFragments(CU, LAYOUTS["zig-zag, 2 ranks (the seed's table)"], 0);
  refuses(() => plan.routing("cpu", { slots: 1 }), /options.slots: expected an integer >= 2/);
  refuses(
    () => plan.routing("cpu", { maxSubsequences: 1 }),
    /options.maxSubsequences: expected an integer >= 4/,
  );
  using capped = plan.routing("cpu", { slots: 2, maxSubsequences: 5 });
  using other = plan.routing("cpu", { slots: 2, maxSubsequences: 6 });
  refuses(() => capped.copyFrom(other), /maxSubsequences 6, this routing's is 5/);
  using eager = plan.routing("cpu");
  using full = ContextParallelPlan.fromFragments(CU, [[[0, 96], [288, TOTAL]], [[96, 288]]], 0).routing(
    "cpu",
  );
  refuses(() => eager.copyFrom(full), /span length|steps|needs the/);
  const [group] = SimulatedGroup.create(2);
  using x = Tensor.randn([1, plan.spanLength, 1, 8]);
  using g = Tensor.rand([1, plan.spanLength, 1], { low: -0.1, high: 0 });
  await assert.rejects(
    contextParallelGdn(x, x, x, g, g, { plan, routing: eager, group }),
    /expected a plan or a routing \(one of the two\)/,
  );
  await assert.rejects(contextParallelGdn(x, x, x, g, g, { group } as never), /expected a plan or a routing/);
});

Deno.test("SimulatedGroup: ranks that disagree on a call's shape all fail, the late ones too (no rank waits forever)", async () => {
  const ranks = SimulatedGroup.create(3);
  using a = Tensor.zeros([2]), b = Tensor.zeros([3]);
  const calls = [ranks[0].allGather(a), ranks[1].allGather(b), ranks[2].allGather(a)];
  const outcomes = await Promise.allSettled(calls);
  assert.deepEqual(outcomes.map((o) => o.status), ["rejected", "rejected", "rejected"]);
  for (const o of outcomes) {
    assert.match(
      ((o as PromiseRejectedResult).reason as Error).message,
      /rank 1 gave \[3\] where another rank gave \[2\]/,
    );
  }
  // The next call of the group works again.
  const next = await Promise.all(ranks.map((r) => r.allGather(a)));
  assert.deepEqual(next[2].shape, [3, 2]);
  next.forEach((t) => t.dispose());
});

Deno.test("your own exchange around the prepared spans gives the recipe's entry states and gradients", async () => {
  using x = globalInputs(GDN, "cpu", "float32", 11);
  const fragments = LAYOUTS["8 ranks, cuts off the chunk grid"];
  const groups = SimulatedGroup.create(fragments.length);
  await Promise.all(groups.map(async (group) => {
    const plan = ContextParallelPlan.fromFragments(CU, fragments, group.rank);
    using routing = plan.routing();
    using ids = plan.globalTokenIds();
    using q = x.q.indexSelect(1, ids), k = x.k.indexSelect(1, ids), v = x.v.indexSelect(1, ids);
    using g = x.g.indexSelect(1, ids), beta = x.beta.indexSelect(1, ids);
    // The recipe's own exchange, then the same by hand: the routing's slot rows, an all-gather, the fold.
    using r = await contextParallelGdn(q, k, v, g, beta, { plan, group, useQkL2norm: true });
    using prepared = chunkGdnPrepare(q, k, v, g, beta, { cuSeqlens: plan.cuSeqlens, useQkL2norm: true });
    const rows = Array.from(routing.forwardRows.toArray() as BigInt64Array, Number);
    const transitionRows = Array.from(routing.forwardTransitionRows.toArray() as BigInt64Array, Number);
    using local = prepared.stateSummaries(rows, transitionRows);
    using bias = await group.allGather(local.bias);
    using transition = await group.allGather(local.transition);
    using entry = composeEntryStates({ bias, transition, [Symbol.dispose]() {} }, routing);
    bitwise(`rank ${group.rank} entry states`, entry, r.entryStates);
    using later = composeExitCotangents({ bias, transition, [Symbol.dispose]() {} }, routing);
    assert.deepEqual(later.shape, r.exitStates.shape);
    // The backward by hand: reverse summaries of the reverse slots, an all-gather, the fold, the span's backward.
    using dO = x.dO.indexSelect(1, ids);
    using viaRecipe = await r.backward(dO);
    const reverseRows = Array.from(routing.reverseRows.toArray() as BigInt64Array, Number);
    using reverse = prepared.reverseSummaries(dO, r.entryStates, reverseRows);
    using c = await group.allGather(reverse.bias);
    using tt = await group.allGather(reverse.transition);
    using fromLater = composeExitCotangents({ bias: c, transition: tt, [Symbol.dispose]() {} }, routing);
    using byHand = prepared.backward(dO, r.entryStates, fromLater);
    for (const key of ["dq", "dk", "dv", "dg", "dbeta"]) {
      const d = compare(byHand[key]!, viaRecipe[key]!);
      assert.ok(d.relRms <= 1e-6, `rank ${group.rank} ${key}: relative RMS ${d.relRms}`);
    }
    refuses(
      () =>
        composeEntryStates(
          { bias: local.bias, transition: local.transition, [Symbol.dispose]() {} },
          routing,
        ),
      /gathered.bias: expected \[8, 2, H, K, V\]/,
    );
  }));
});
