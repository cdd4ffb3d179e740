// Zero-drift serving under graph capture: a paged chunked call with a replay state plans on the device
// (ak_replay_plan) and reads nothing back inside a capture, so one captured call replays, for inputs,
// offsets, slots and counts that change every round, the bits of the same call made eagerly on a twin
// pool and replay state: outputs, pool slots, cached tokens and counts. Decode steps (one token per
// sequence) run across a chunk boundary; a packed prefill changes its offsets every round. A slot named
// twice is found by the replay's device check and the graph stays usable. Gated DeltaNet and KDA, D 64.
import assert from "node:assert/strict";
import { captureGraph, pagedChunkGdn, pagedChunkKda, ReplayState, Tensor } from "../mod.ts";
import { sameBits } from "./graph_fixtures.ts";
import { expectNoLeak, HAS_CUDA, withSeed } from "./helpers.ts";

const cuda = { ignore: !HAS_CUDA };
const dev = "cuda" as const;
const [H, K, SLOTS] = [2, 64, 6];

type Family = "gdn" | "kda";

/** One call's inputs `[B, T, ...]`, refilled in place between replays. */
class Inputs implements Disposable {
  readonly q: Tensor;
  readonly k: Tensor;
  readonly v: Tensor;
  readonly gate: Tensor;
  readonly beta: Tensor;

  constructor(readonly f: Family, B: number, T: number) {
    const bf = { dtype: "bfloat16" as const, device: dev };
    this.q = Tensor.empty([B, T, H, K], bf);
    this.k = Tensor.empty([B, T, H, K], bf);
    this.v = Tensor.empty([B, T, H, K], bf);
    this.gate = Tensor.empty(f === "gdn" ? [B, T, H] : [B, T, H, K], { device: dev });
    this.beta = Tensor.empty([B, T, H], { device: dev });
  }

  refresh(seed: number): void {
    const fill = (t: Tensor, make: Tensor) => {
      using m = make;
      t.copyFrom(m);
    };
    const o = { dtype: "bfloat16" as const, device: dev };
    fill(this.q, Tensor.randn(this.q.shape, { ...o, seed }));
    // KDA normalises nothing: keys of norm about 1 keep its state bounded.
    fill(this.k, Tensor.randn(this.k.shape, { ...o, seed: seed + 1, std: this.f === "kda" ? 0.125 : 1 }));
    fill(this.v, Tensor.randn(this.v.shape, { ...o, seed: seed + 2 }));
    fill(this.gate, Tensor.rand(this.gate.shape, { device: dev, seed: seed + 3, low: -0.3, high: 0 }));
    fill(this.beta, Tensor.rand(this.beta.shape, { device: dev, seed: seed + 4 }));
  }

  [Symbol.dispose](): void {
    for (const t of [this.q, this.k, this.v, this.gate, this.beta]) t.dispose();
  }
}

/** A pool and its replay state. */
class World implements Disposable {
  readonly pool: Tensor;
  readonly replay: ReplayState;

  constructor(f: Family, seed: number) {
    this.pool = Tensor.randn([SLOTS, H, K, K], { device: dev, seed, std: 0.1 });
    this.replay = ReplayState.zeros(SLOTS, {
      heads: H,
      keyDim: K,
      gate: f === "gdn" ? "head" : "channel",
      device: dev,
    });
  }

  /** Copies every tensor of `other` into this world. */
  copyFrom(other: World): void {
    this.pool.copyFrom(other.pool);
    for (const name of ["q", "k", "v", "gate", "beta", "count"] as const) {
      this.replay[name].copyFrom(other.replay[name]);
    }
  }

  /** Every tensor bit for bit against `other`'s. */
  expectSame(other: World, what: string): void {
    sameBits(this.pool, other.pool, `${what}: pool`);
    for (const name of ["q", "k", "v", "gate", "beta", "count"] as const) {
      sameBits(this.replay[name], other.replay[name], `${what}: replayState.${name}`);
    }
  }

  [Symbol.dispose](): void {
    this.pool.dispose();
    this.replay.dispose();
  }
}

function call(
  f: Family,
  x: Inputs,
  w: World,
  idx: Tensor,
  o: { cuSeqlens?: Tensor; hasInitialState?: Tensor } = {},
): Tensor {
  const options = { ...o, replayState: w.replay };
  return f === "gdn"
    ? pagedChunkGdn(x.q, x.k, x.v, x.gate, x.beta, w.pool, idx, { ...options, useQkL2norm: true })
    : pagedChunkKda(x.q, x.k, x.v, x.gate, x.beta, w.pool, idx, options);
}

function setInt32(t: Tensor, values: number[], dtype: "int32" | "bool" = "int32"): void {
  using host = Tensor.from(values, { dtype, device: dev });
  t.copyFrom(host);
}

for (const f of ["gdn", "kda"] as const) {
  Deno.test({
    name:
      `captureGraph: ${f} decode steps with a replay state replay bit for bit across a chunk boundary [cuda]`,
    ...cuda,
    fn: () =>
      withSeed((seed) =>
        expectNoLeak(dev, () => {
          using eager = new World(f, seed), captured = new World(f, seed);
          // A prefill so that the slots hold 50, 60 and 10 tokens of an unfinished chunk.
          using idx = Tensor.from([1, 3, 4], { dtype: "int32", device: dev });
          using prefill = new Inputs(f, 1, 120);
          prefill.refresh(seed + 1);
          using cu = Tensor.from([0, 50, 110, 120], { dtype: "int32", device: dev });
          call(f, prefill, eager, idx, { cuSeqlens: cu }).dispose();
          captured.copyFrom(eager);
          using x = new Inputs(f, 3, 1);
          x.refresh(seed + 2);
          using resume = Tensor.from([1, 1, 1], { dtype: "bool", device: dev });
          // Loads the kernels outside the capture on a scratch world.
          using scratch = new World(f, seed);
          call(f, x, scratch, idx, { hasInitialState: resume }).dispose();
          using graph = captureGraph(() => call(f, x, captured, idx, { hasInitialState: resume }));
          try {
            for (let step = 0; step < 20; step++) {
              x.refresh(seed + 100 * (step + 1));
              // Slots in another order at step 7, a padding sequence at step 9, a fresh start at step 12.
              setInt32(idx, step === 9 ? [1, 0, 4] : step >= 7 ? [4, 3, 1] : [1, 3, 4]);
              setInt32(resume, step === 12 ? [1, 0, 1] : [1, 1, 1], "bool");
              using y = call(f, x, eager, idx, { hasInitialState: resume });
              graph.replay();
              graph.synchronize();
              sameBits(graph.result, y, `step ${step}: output`);
              captured.expectSame(eager, `step ${step}`);
            }
            // A slot named twice: found by the replay's device check, nothing written, the graph usable.
            captured.copyFrom(eager);
            setInt32(idx, [3, 3, 4]);
            graph.replay();
            assert.throws(() => graph.synchronize(), /slot 3/);
            captured.expectSame(eager, "after the failed check");
            setInt32(idx, [1, 3, 4]);
            using y = call(f, x, eager, idx, { hasInitialState: resume });
            graph.replay();
            graph.synchronize();
            sameBits(graph.result, y, "after the failed check: output");
            captured.expectSame(eager, "after the failed check");
          } finally {
            graph.result.dispose();
          }
        })
      ),
  });

  Deno.test({
    name:
      `captureGraph: a packed ${f} prefill with a replay state replays bit for bit for changing offsets [cuda]`,
    ...cuda,
    fn: () =>
      withSeed((seed) =>
        expectNoLeak(dev, () => {
          const T = 160;
          using eager = new World(f, seed), captured = new World(f, seed);
          using idx = Tensor.from([2, 5, 1], { dtype: "int32", device: dev });
          using cu = Tensor.from([0, 40, 100, 160], { dtype: "int32", device: dev });
          using x = new Inputs(f, 1, T);
          x.refresh(seed + 1);
          using scratch = new World(f, seed);
          call(f, x, scratch, idx, { cuSeqlens: cu }).dispose();
          using graph = captureGraph(() => call(f, x, captured, idx, { cuSeqlens: cu }));
          try {
            // Every token live; an empty sequence and a tail past the last offset; one token; nothing live.
            const rounds = [[0, 40, 100, 160], [0, 0, 70, 130], [0, 1, 65, 129], [0, 0, 0, 0], [
              0,
              63,
              64,
              160,
            ]];
            for (const [r, offsets] of rounds.entries()) {
              x.refresh(seed + 100 * (r + 1));
              setInt32(cu, offsets);
              using y = call(f, x, eager, idx, { cuSeqlens: cu });
              graph.replay();
              graph.synchronize();
              sameBits(graph.result, y, `round ${r}: output`);
              captured.expectSame(eager, `round ${r}`);
            }
          } finally {
            graph.result.dispose();
          }
        })
      ),
  });
}
