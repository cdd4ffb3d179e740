// Graph capture (captureGraph): a GDN layer's decode step (causalConv1dDecode + recurrentGdnDecode) and a
// packed paged convolution with the active-token mask, captured once and replayed with new input values,
// new slots and new sequence lengths each round, bit for bit against the same calls made eagerly on twin
// pools; the device-side checks that replace the host read-backs while capturing (an index past the pool,
// a slot named twice, decreasing offsets: the replay's checked calls write nothing and synchronize()
// names the argument); calls that cannot be captured refused cleanly with the device usable afterwards;
// memory back to its baseline. Unselected pool slots hold NaN and must stay bitwise untouched.
import assert from "node:assert/strict";
import {
  activeTokenMask,
  captureGraph,
  causalConv1dDecode,
  cudaAvailable,
  pagedCausalConv1d,
  pagedChunkGdn,
  recurrentGdnDecode,
  Tensor,
} from "../mod.ts";
import { refill, sameBits } from "./graph_fixtures.ts";
import { expectNoLeak, HAS_CUDA, refuses, withSeed } from "./helpers.ts";

const cuda = { ignore: !HAS_CUDA };
const dev = "cuda" as const;

function setInt32(t: Tensor, values: number[]): void {
  using host = Tensor.from(values, { dtype: "int32", device: dev });
  t.copyFrom(host);
}

function setBool(t: Tensor, values: boolean[]): void {
  using host = Tensor.from(values.map(Number), { dtype: "int32", device: dev });
  using b = host.cast("bool");
  t.copyFrom(b);
}

Deno.test("captureGraph refuses bad arguments and the CPU", () => {
  refuses(() => captureGraph(42 as unknown as () => void), /body: expected a function/);
  refuses(() => captureGraph(() => {}, { device: "cpu" }), /device: expected a CUDA device, got "cpu"/);
  refuses(() => captureGraph(() => {}, { stream: 1 } as never), /unknown option 'stream'/);
  if (!cudaAvailable()) refuses(() => captureGraph(() => {}), /device/);
});

Deno.test({
  name: "captureGraph: a GDN decode step replays bit for bit with changing values and slots [cuda]",
  ...cuda,
  fn: () =>
    withSeed((seed) =>
      expectNoLeak(dev, () => {
        const [B, H, HK, K, V, W, slots] = [6, 4, 2, 64, 64, 4, 11];
        const C = 2 * HK * K + H * V;
        using x = Tensor.randn([B, C], { dtype: "bfloat16", device: dev, seed });
        using convW = Tensor.randn([C, W], { device: dev, seed: seed + 1, std: 0.5 });
        using rawGate = Tensor.randn([1, B, H], { dtype: "bfloat16", device: dev, seed: seed + 2 });
        using rawBeta = Tensor.randn([1, B, H], { dtype: "bfloat16", device: dev, seed: seed + 3 });
        using aLog = Tensor.randn([H], { device: dev, seed: seed + 4, std: 0.3 });
        using dtBias = Tensor.randn([H], { device: dev, seed: seed + 5, std: 0.3 });
        using idx = Tensor.zeros([B], { dtype: "int32", device: dev });
        using fresh = Tensor.ones([B], { dtype: "bool", device: dev });
        // Twin pools (graph, eager), NaN outside the slots a round selects.
        const pools = () => ({
          conv: Tensor.full([slots, W - 1, C], NaN, { dtype: "bfloat16", device: dev }),
          state: Tensor.full([slots, H, V, K], NaN, { device: dev }),
          qkv: Tensor.full([B, C], NaN, { dtype: "bfloat16", device: dev }),
          out: Tensor.full([1, B, H, V], NaN, { dtype: "bfloat16", device: dev }),
        });
        const g = pools(), e = pools();
        const step = (p: ReturnType<typeof pools>) => {
          causalConv1dDecode(x, convW, p.conv, {
            stateIndices: idx,
            hasInitialState: fresh,
            activation: "silu",
            out: p.qkv,
          });
          recurrentGdnDecode(p.qkv, rawGate, rawBeta, aLog, dtBias, p.state, idx, {
            hasInitialState: fresh,
            out: p.out,
          });
        };
        try {
          setInt32(idx, [1, 2, 3, 4, 5, 6]);
          setBool(fresh, [false, false, false, false, false, false]);
          step(e); // loads the kernels before the capture; e's first round is redone below
          for (const t of Object.values(e)) t.fill(NaN);
          using graph = captureGraph(() => step(g), { device: dev });
          assert.ok(graph.nodeCount >= 2, `${graph.nodeCount} nodes`);
          const rounds: [number[], boolean[]][] = [
            [[1, 2, 3, 4, 5, 6], [false, false, false, false, false, false]],
            [[2, 1, 0, 4, -1, 6], [true, true, false, true, true, true]],
            [[7, 9, 3, 10, 0, 2], [false, true, true, false, true, true]],
            [[6, 4, 2, 1, 9, 3], [true, true, true, true, true, true]],
          ];
          for (const [r, [slotsOf, resume]] of rounds.entries()) {
            setInt32(idx, slotsOf);
            setBool(fresh, resume);
            for (const [i, t] of [x, rawGate, rawBeta].entries()) refill(t, seed + 100 * r + i);
            step(e);
            graph.replay();
            graph.synchronize();
            sameBits(g.out, e.out, `round ${r}: output`);
            sameBits(g.qkv, e.qkv, `round ${r}: conv output`);
            sameBits(g.state, e.state, `round ${r}: state pool`);
            sameBits(g.conv, e.conv, `round ${r}: conv pool`);
          }
          // Bad slots found on the device: nothing written, the argument named, the graph usable after.
          using stateBefore = g.state.clone();
          using convBefore = g.conv.clone();
          setInt32(idx, [1, 12, 3, 4, 5, 6]);
          graph.replay();
          refuses(
            () => graph.synchronize(),
            /state_indices: entry 1 is 12, past the 11 slots of state_cache/,
          );
          sameBits(g.state, stateBefore, "state pool after a refused replay");
          sameBits(g.conv, convBefore, "conv pool after a refused replay");
          setInt32(idx, [3, 5, 0, 8, 3, 0]);
          graph.replay();
          refuses(() => graph.synchronize(), /state_indices: entries 0 and 4 both name slot 3/);
          sameBits(g.state, stateBefore, "state pool after a second refused replay");
          setInt32(idx, [3, 5, 0, 8, 2, 0]);
          step(e);
          graph.replay();
          graph.synchronize();
          sameBits(g.out, e.out, "output after the refusals");
          sameBits(g.state, e.state, "state pool after the refusals");
        } finally {
          for (const t of [...Object.values(g), ...Object.values(e)]) t.dispose();
        }
      })
    ),
});

Deno.test({
  name: "captureGraph: packed convolution and token mask follow new lengths each replay [cuda]",
  ...cuda,
  fn: () =>
    withSeed((seed) =>
      expectNoLeak(dev, () => {
        const [T, C, W, slots] = [40, 96, 4, 8];
        using x = Tensor.randn([1, T, C], { device: dev, seed });
        using weight = Tensor.randn([C, W], { device: dev, seed: seed + 1 });
        using idx = Tensor.zeros([3], { dtype: "int32", device: dev });
        using cu = Tensor.zeros([4], { dtype: "int32", device: dev });
        using poolG = Tensor.full([slots, W - 1, C], NaN, { device: dev });
        using poolE = Tensor.full([slots, W - 1, C], NaN, { device: dev });
        using yG = Tensor.full([1, T, C], NaN, { device: dev });
        using yE = Tensor.full([1, T, C], NaN, { device: dev });
        using fresh = Tensor.zeros([3], { dtype: "bool", device: dev });
        const call = (pool: Tensor, y: Tensor) =>
          pagedCausalConv1d(x, weight, pool, idx, { cuSeqlens: cu, hasInitialState: fresh, out: y });
        setInt32(idx, [2, 5, 7]);
        setInt32(cu, [0, 3, 9, 20]);
        // The kernels load on a first, eager call (on a throwaway pool), not inside the capture.
        using _mask = activeTokenMask(x, cu);
        using scratchPool = Tensor.zeros([slots, W - 1, C], { device: dev });
        using _y = pagedCausalConv1d(x, weight, scratchPool, idx, { cuSeqlens: cu });
        using graph = captureGraph(() => {
          call(poolG, yG);
          return activeTokenMask(x, cu);
        });
        try {
          // The capacity stays 3 sequences and T rows; a shorter batch repeats its last offset.
          const rounds: [number[], number[]][] = [
            [[0, 3, 9, 20], [2, 5, 7]],
            [[0, 12, 12, 31], [5, 7, 2]],
            [[0, 0, 7, 7], [1, 2, 0]],
            [[0, 40, 40, 40], [3, 0, 0]],
          ];
          for (const [r, [offsets, slotsOf]] of rounds.entries()) {
            setInt32(cu, offsets);
            setInt32(idx, slotsOf);
            if (r === 1) setBool(fresh, [true, true, true]);
            refill(x, seed + 10 * r);
            call(poolE, yE);
            using maskE = activeTokenMask(x, cu);
            graph.replay();
            graph.synchronize();
            sameBits(yG, yE, `round ${r}: output`);
            sameBits(poolG, poolE, `round ${r}: history pool`);
            sameBits(graph.result, maskE, `round ${r}: token mask`);
          }
          using before = poolG.clone();
          setInt32(cu, [0, 9, 4, 20]);
          graph.replay();
          refuses(
            () => graph.synchronize(),
            /cu_seqlens: must be nondecreasing, but entry 2 \(4\) is below entry 1/,
          );
          sameBits(poolG, before, "pool after a refused replay");
          setInt32(cu, [0, 9, 14, 41]);
          graph.replay();
          refuses(() => graph.synchronize(), /cu_seqlens: the last offset 41 exceeds the 40 tokens/);
        } finally {
          graph.result.dispose();
        }
      })
    ),
});

Deno.test({
  name: "captureGraph: a dense paged prefill replays bit for bit (packed ones: graph_packed.test.ts) [cuda]",
  ...cuda,
  fn: () =>
    withSeed((seed) =>
      expectNoLeak(dev, () => {
        // T = 100: one full chunk and a partial one; K = V = 128 takes the tensor-core path.
        const [B, T, H, K, slots] = [2, 100, 2, 128, 5];
        using q = Tensor.randn([B, T, H, K], { dtype: "bfloat16", device: dev, seed });
        using k = Tensor.randn([B, T, H, K], { dtype: "bfloat16", device: dev, seed: seed + 1 });
        using v = Tensor.randn([B, T, H, K], { dtype: "bfloat16", device: dev, seed: seed + 2 });
        using g = Tensor.rand([B, T, H], { device: dev, seed: seed + 3, low: -0.3, high: 0 });
        using beta = Tensor.rand([B, T, H], { device: dev, seed: seed + 4 });
        using idx = Tensor.zeros([B], { dtype: "int32", device: dev });
        using fresh = Tensor.zeros([B], { dtype: "bool", device: dev });
        using poolG = Tensor.full([slots, H, K, K], NaN, { device: dev });
        using poolE = Tensor.full([slots, H, K, K], NaN, { device: dev });
        const call = (pool: Tensor) =>
          pagedChunkGdn(q, k, v, g, beta, pool, idx, { hasInitialState: fresh, useQkL2norm: true });
        setInt32(idx, [1, 3]);
        call(poolE).dispose(); // loads the kernels; poolE is reset below
        poolE.fill(NaN);
        using graph = captureGraph(() => call(poolG));
        try {
          const rounds: [number[], boolean[]][] = [[[1, 3], [false, false]], [[3, 2], [true, false]], [
            [0, 1],
            [
              true,
              true,
            ],
          ]];
          for (const [r, [slotsOf, resume]] of rounds.entries()) {
            setInt32(idx, slotsOf);
            setBool(fresh, resume);
            for (const [i, t] of [q, k, v].entries()) refill(t, seed + 10 * r + i);
            using yE = call(poolE);
            graph.replay();
            graph.synchronize();
            sameBits(graph.result, yE, `round ${r}: output`);
            sameBits(poolG, poolE, `round ${r}: state pool`);
          }
        } finally {
          graph.result.dispose();
        }
      })
    ),
});

Deno.test({
  name: "captureGraph: calls that cannot be captured are refused and the device stays usable [cuda]",
  ...cuda,
  fn: () =>
    expectNoLeak(dev, () => {
      using x = Tensor.ones([16], { device: dev });
      refuses(() => captureGraph(() => x.toArray()), /cannot be captured in a graph/);
      refuses(() => captureGraph(() => Tensor.from([1, 2], { device: dev }).dispose()), /cannot be captured/);
      refuses(() => captureGraph(() => captureGraph(() => {})), /already capturing a graph/);
      refuses(
        () => captureGraph((() => Promise.resolve(1)) as () => unknown),
        /body: expected a synchronous function/,
      );
      assert.throws(() =>
        captureGraph(() => {
          throw new RangeError("from the body");
        }), RangeError);
      // The device works eagerly and captures again.
      using y = x.mul(3);
      assert.deepEqual(Array.from(y.toArray() as Float32Array), new Array(16).fill(3));
      using graph = captureGraph(() => x.add(1));
      graph.replay();
      graph.synchronize();
      assert.deepEqual(Array.from(graph.result.toArray() as Float32Array), new Array(16).fill(2));
      graph.result.dispose();
      graph.dispose();
      assert.ok(graph.disposed);
      graph.dispose(); // twice is fine
      refuses(() => graph.replay(), /graph: disposed already/);
    }),
});
