// Zero-drift serving with a ReplayState: a prefill through pagedChunkGdn / pagedChunkKda followed by
// one-token calls (decode) across a chunk boundary gives, bit for bit, the outputs of the training op
// (chunkGatedDeltaRule / chunkKda) on the whole sequence from the same initial states; the pool then
// holds the training op's state after the last complete chunk and the caches the tokens since. Packed
// prefill with a padding sequence, an empty one and a fresh slot; the refusals (dtype, count, type).
//
// Bit for bit wherever the training op carries a float32 state from chunk to chunk (Gated DeltaNet on
// both backends, KDA on CUDA). The CPU backend's KDA is the exact recurrence with a float64 state, which
// a chunk boundary of the replay rounds to float32 once: there outputs agree to one bfloat16 ulp (2^-7
// relative) and states to 2^-20 of their largest element.
import assert from "node:assert/strict";
import {
  chunkGatedDeltaRule,
  chunkKda,
  type Device,
  pagedChunkGdn,
  pagedChunkKda,
  ReplayState,
  Tensor,
} from "../mod.ts";
import { deviceTest, expectNoLeak, refuses, withSeed } from "./helpers.ts";

type Family = "gdn" | "kda";

interface Slack {
  /** Relative to the element. */
  rel: number;
  /** Relative to the largest element. */
  abs: number;
}

function sameBits(
  actual: ArrayLike<number>,
  expected: ArrayLike<number>,
  what: string,
  slack: Slack = { rel: 0, abs: 0 },
): void {
  assert.equal(actual.length, expected.length, `${what}: length`);
  let scale = 0;
  for (let i = 0; i < expected.length; i++) scale = Math.max(scale, Math.abs(expected[i]));
  for (let i = 0; i < expected.length; i++) {
    const err = Math.abs(actual[i] - expected[i]);
    if (
      !Object.is(actual[i], expected[i]) && !(err <= slack.rel * Math.abs(expected[i]) + slack.abs * scale)
    ) {
      assert.fail(`${what}: element ${i} is ${actual[i]}, the training op gave ${expected[i]}`);
    }
  }
}

/**
 * None (bit for bit) where the training op carries a float32 state, else the tolerances above: the CPU's
 * KDA carries a double state, which the pool rounds to float32 at each chunk boundary. An output near
 * zero (cancellation) then moves by more than its own 2^-7, never by more than 2^-16 of the largest.
 */
const slack = (f: Family, device: Device, what: "output" | "state"): Slack =>
  f === "kda" && device === "cpu"
    ? (what === "output" ? { rel: 2 ** -7, abs: 2 ** -16 } : { rel: 0, abs: 2 ** -20 })
    : { rel: 0, abs: 0 };

interface Inputs extends Disposable {
  q: Tensor;
  k: Tensor;
  v: Tensor;
  gate: Tensor;
  beta: Tensor;
}

function inputs(
  device: Device,
  f: Family,
  B: number,
  T: number,
  dims: number[],
  seed: number,
): Inputs {
  const [H, HK, K] = dims;
  const q = Tensor.randn([B, T, HK, K], { dtype: "bfloat16", device, seed });
  const k = Tensor.randn([B, T, HK, K], {
    dtype: "bfloat16",
    device,
    seed: seed + 1,
    std: f === "kda" ? 0.25 : 1,
  });
  const v = Tensor.randn([B, T, H, K], { dtype: "bfloat16", device, seed: seed + 2 });
  const gate = Tensor.rand(f === "gdn" ? [B, T, H] : [B, T, H, K], {
    device,
    seed: seed + 3,
    low: -0.3,
    high: 0,
  });
  const beta = Tensor.rand([B, T, H], { device, seed: seed + 4 });
  return { q, k, v, gate, beta, [Symbol.dispose]: () => [q, k, v, gate, beta].forEach((t) => t.dispose()) };
}

/** Tokens [a, b) of every input (dim 1). */
function tokens(x: Inputs, a: number, b: number): Inputs {
  const s = (t: Tensor) => t.slice(1, a, b);
  return inputsOf(s(x.q), s(x.k), s(x.v), s(x.gate), s(x.beta));
}

function inputsOf(q: Tensor, k: Tensor, v: Tensor, gate: Tensor, beta: Tensor): Inputs {
  return { q, k, v, gate, beta, [Symbol.dispose]: () => [q, k, v, gate, beta].forEach((t) => t.dispose()) };
}

function replayFor(f: Family, slots: number, [H, HK, K]: number[], device: Device): ReplayState {
  return ReplayState.zeros(slots, {
    heads: H,
    keyHeads: HK,
    keyDim: K,
    gate: f === "gdn" ? "head" : "channel",
    device,
  });
}

function paged(f: Family, x: Inputs, pool: Tensor, idx: Tensor, o: Record<string, unknown>): Tensor {
  return f === "gdn"
    ? pagedChunkGdn(x.q, x.k, x.v, x.gate, x.beta, pool, idx, { useQkL2norm: true, ...o })
    : pagedChunkKda(x.q, x.k, x.v, x.gate, x.beta, pool, idx, o);
}

/** The training op from `initial` (the pool's [N, H, V, K] slots), with its final state as [N, H, V, K]. */
function training(f: Family, x: Inputs, initial: Tensor, o: Record<string, unknown> = {}) {
  if (f === "kda") {
    return chunkKda(x.q, x.k, x.v, x.gate, x.beta, {
      layout: "bshd",
      initialState: initial,
      stateLayout: "vk",
      outputFinalState: true,
      ...o,
    });
  }
  using kv = initial.transpose(2, 3);
  const r = chunkGatedDeltaRule(x.q, x.k, x.v, x.gate, x.beta, {
    layout: "bshd",
    initialState: kv,
    outputFinalState: true,
    useQkL2norm: true,
    ...o,
  });
  const vk = r.finalState!.transpose(2, 3);
  return {
    output: r.output,
    finalState: vk,
    [Symbol.dispose]: () => {
      r[Symbol.dispose]();
      vk.dispose();
    },
  };
}

for (const f of ["gdn", "kda"] as const) {
  deviceTest(
    `${f}: prefill then decode with a replay state gives the training op's bits on the whole sequence`,
    (
      device,
    ) =>
      expectNoLeak(device, () =>
        withSeed((seed) => {
          const [B, L, P, H, HK, K, slots] = [2, 150, 100, 2, f === "gdn" ? 1 : 2, 64, 4];
          using x = inputs(device, f, B, L, [H, HK, K], seed);
          using idx = Tensor.from([3, 1], { dtype: "int32", device });
          using start = Tensor.randn([slots, H, K, K], { device, seed: seed + 9, std: 0.1 });
          using pool = start.clone();
          using initial = start.indexSelect(0, [3, 1]);
          using replay = replayFor(f, slots, [H, HK, K], device);
          using ref = training(f, x, initial);
          const want = ref.output.toArray() as Float32Array;
          const row = H * K;
          const rows = (y: Tensor, t0: number, n: number) => {
            const got = y.toArray() as Float32Array;
            for (let b = 0; b < B; b++) {
              sameBits(
                got.subarray(b * n * row, (b + 1) * n * row),
                want.subarray((b * L + t0) * row, (b * L + t0 + n) * row),
                `${f} batch ${b} tokens ${t0}..${t0 + n}`,
                slack(f, device, "output"),
              );
            }
          };
          {
            using pre = tokens(x, 0, P);
            using y = paged(f, pre, pool, idx, { replayState: replay });
            rows(y, 0, P);
          }
          for (let t = P; t < L; t++) {
            using step = tokens(x, t, t + 1);
            // Every other step vouches for the indices: on CUDA nothing is read back (the same bits).
            using y = paged(f, step, pool, idx, { replayState: replay, checkIndices: t % 2 === 0 });
            rows(y, t, 1);
          }
          // The pool holds the state after token 128, the caches tokens 128..149.
          assert.deepEqual(Array.from(replay.count.values("int32")), [0, 22, 0, 22]);
          using head = tokens(x, 0, 128);
          using ref128 = training(f, head, initial);
          using after = pool.indexSelect(0, [3, 1]);
          sameBits(
            after.toArray() as Float32Array,
            ref128.finalState!.toArray() as Float32Array,
            `${f} pool after 150 tokens`,
            slack(f, device, "state"),
          );
          using cachedV = replay.v.indexSelect(0, [3]);
          using tailRows = x.v.slice(1, 128, 150);
          using tailV = tailRows.slice(0, 0, 1);
          sameBits(
            (cachedV.toArray() as Float32Array).subarray(0, 22 * H * K),
            tailV.toArray() as Float32Array,
            "cached values",
          );
        })),
  );

  deviceTest(
    `${f}: packed prefill with a replay state: padding, empty and fresh sequences`,
    (device) =>
      expectNoLeak(device, () =>
        withSeed((seed) => {
          const [H, HK, K, slots] = [2, f === "gdn" ? 1 : 2, 64, 5];
          const lengths = [70, 0, 40, 130];
          const cu = [0];
          for (const l of lengths) cu.push(cu[cu.length - 1] + l);
          const T = cu[cu.length - 1] + 3; // spare rows past the last offset
          using x = inputs(device, f, 1, T, [H, HK, K], seed);
          // Sequence 0 resumes slot 2, 1 (empty) resumes slot 4, 2 is padding, 3 starts fresh in slot 1.
          using idx = Tensor.from([2, 4, 0, 1], { dtype: "int32", device });
          using resume = Tensor.from([1, 1, 1, 0], { dtype: "bool", device });
          using start = Tensor.randn([slots, H, K, K], { device, seed: seed + 9, std: 0.1 });
          using pool = start.clone();
          using replay = replayFor(f, slots, [H, HK, K], device);
          using y = paged(f, x, pool, idx, { cuSeqlens: cu, hasInitialState: resume, replayState: replay });
          using initial = start.indexSelect(0, [2, 4, 0, 1]);
          const init = initial.toArray() as Float32Array, slot = H * K * K;
          init.fill(0, 2 * slot, 4 * slot); // padding and fresh start from zero
          using initialT = Tensor.from(init, { shape: initial.shape, device });
          // Poisoned: the training op leaves the spare rows past the last offset unwritten.
          using refOut = Tensor.full([1, T, H, K], NaN, { dtype: "bfloat16", device });
          using ref = training(f, x, initialT, { cuSeqlens: cu, out: { output: refOut } });
          const got = y.toArray() as Float32Array, want = ref.output.toArray() as Float32Array, row = H * K;
          for (const n of [0, 3]) {
            sameBits(
              got.subarray(cu[n] * row, cu[n + 1] * row),
              want.subarray(cu[n] * row, cu[n + 1] * row),
              `seq ${n}`,
              slack(f, device, "output"),
            );
          }
          for (let i = cu[2] * row; i < cu[3] * row; i++) assert.equal(got[i], 0, `padding row element ${i}`);
          assert.deepEqual(Array.from(replay.count.values("int32")), [0, 2, 6, 0, 0]);
          // Slot 4 (an empty sequence) keeps its state, slot 3 (not selected) is untouched.
          using kept = pool.indexSelect(0, [3, 4]);
          using was = start.indexSelect(0, [3, 4]);
          sameBits(kept.toArray() as Float32Array, was.toArray() as Float32Array, "slots 3 and 4");
        })),
  );
}

deviceTest("a replay state is refused when it does not fit the call", (device) =>
  expectNoLeak(device, () => {
    using x = inputs(device, "gdn", 1, 4, [2, 2, 16], 1);
    using pool = Tensor.zeros([3, 2, 16, 16], { device });
    using idx = Tensor.from([1], { dtype: "int32", device });
    using replay = ReplayState.zeros(3, { heads: 2, keyDim: 16, gate: "head", device });
    using wide = ReplayState.zeros(3, { heads: 2, keyDim: 16, gate: "channel", device });
    refuses(() => paged("gdn", x, pool, idx, { replayState: {} }), /replayState: expected a ReplayState/);
    refuses(() => paged("gdn", x, pool, idx, { replayState: wide }), /replayState.gate/);
    using q16 = x.q.cast("float16");
    refuses(
      () => pagedChunkGdn(q16, x.k, x.v, x.gate, x.beta, pool, idx, { replayState: replay }),
      /q: expected dtype bfloat16/,
    );
    using full = Tensor.from([0, 64, 0], { dtype: "int32", device });
    replay.count.copyFrom(full);
    refuses(() => paged("gdn", x, pool, idx, { replayState: replay }), /count: slot 1 holds 64 tokens/);
    refuses(() => ReplayState.zeros(0, { heads: 1, keyDim: 8, gate: "head" }), /numSlots/);
    refuses(() => ReplayState.zeros(2, { heads: 1, gate: "head" } as never), /shape.keyDim: required/);
  }));

deviceTest(
  "a replay-backed call refuses bad offsets and indices before anything is written",
  (device) =>
    expectNoLeak(device, () => {
      using x = inputs(device, "gdn", 1, 10, [2, 2, 16], 2);
      using start = Tensor.randn([3, 2, 16, 16], { device, seed: 3 });
      using pool = start.clone();
      using idx = Tensor.from([1, 2], { dtype: "int32", device });
      using replay = ReplayState.zeros(3, { heads: 2, keyDim: 16, gate: "head", device });
      const call = (cu: number[], s: Tensor = idx) => () =>
        paged("gdn", x, pool, s, { cuSeqlens: cu, replayState: replay });
      refuses(call([0, 6, 4]), /cuSeqlens: must be nondecreasing/);
      refuses(call([0, 6, 11]), /the last offset 11 exceeds the 10 tokens/);
      refuses(call([1, 6, 10]), /must start at 0/);
      refuses(call([0, 10]), /expected 3 offsets/);
      using past = Tensor.from([1, 3], { dtype: "int32", device });
      refuses(call([0, 4, 10], past), /stateIndices: entry 1 is 3, past the 3 slots/);
      using twice = Tensor.from([2, 2], { dtype: "int32", device });
      refuses(call([0, 4, 10], twice), /entries 0 and 1 both name slot 2/);
      sameBits(
        pool.toArray() as Float32Array,
        start.toArray() as Float32Array,
        "the pool after the refusals",
      );
      assert.deepEqual(Array.from(replay.count.values("int32")), [0, 0, 0]);
    }),
);
