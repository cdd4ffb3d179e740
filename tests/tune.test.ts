// Kernel choice per op: the tuning cache on disk (round trip, corrupt and foreign files, concurrent
// writers, clearing), `kernelMap` overrides, and `tune: true` (a first call tunes, later calls read the
// cache, a candidate whose output disagrees with the planner's is never chosen, tuned results equal
// untuned ones within the tolerance).
import {
  AttnkitError,
  clearTuneCache,
  compare,
  DeepSeekSparseAttentionDecodeWithKVCacheFwdOp,
  FP8LightningIndexerFwdOp,
  GatedDeltaNetBTHDFwdOp,
  GatedDeltaNetBwdOp,
  GatedDeltaNetOp,
  GroupedQueryAttentionBwdOp,
  GroupedQueryAttentionDecodePagedWithKVCacheFwdOp,
  GroupedQueryAttentionFwdOp,
  lastChoice,
  MultiHeadAttentionFwdOp,
  NSACmpFwdVarlenOp,
  NSAFwdVarlenOp,
  nsaTokenIndices,
  setTuneCachePath,
  Tensor,
  tuneCachePath,
  tuning,
} from "../mod.ts";
import { readTuneRecord, type TuneRecord, writeTuneRecord } from "../ops/tune/cache.ts";
import { sumOf, withChoice } from "../ops/tune/choice.ts";
import { VERSION } from "../ffi/version.ts";
import { deviceTest, expectNoLeak, refuses } from "./helpers.ts";
import assert from "node:assert/strict";

/**
 * Runs `fn` with the tuning cache in a fresh temporary folder, then puts the default path back (after
 * the promise settles when `fn` returns one).
 */
function withTempCache<T>(fn: (path: string) => T): T {
  const dir = Deno.makeTempDirSync({ prefix: "attnkit-tune-" });
  const path = `${dir}/sub/tune.json`;
  const restore = () => {
    setTuneCachePath(undefined);
    Deno.removeSync(dir, { recursive: true });
  };
  setTuneCachePath(path);
  let result: T;
  try {
    result = fn(path);
  } catch (e) {
    restore();
    throw e;
  }
  if (result instanceof Promise) return result.finally(restore) as T;
  restore();
  return result;
}

/** Runs `fn` with console.warn captured; returns its result and the warnings. */
function captureWarnings<T>(fn: () => T): { result: T; warnings: string[] } {
  const warnings: string[] = [];
  const original = console.warn;
  console.warn = (...a: unknown[]) => warnings.push(a.join(" "));
  try {
    return { result: fn(), warnings };
  } finally {
    console.warn = original;
  }
}

const RECORD: TuneRecord = {
  spec: { "attention.fwd": "general" },
  ms: 0.5,
  candidates: [{ spec: {}, ms: 0.7 }, { spec: { "attention.fwd": "general" }, ms: 0.5 }, {
    spec: { "attention.fwd": "wgmma" },
    ms: null,
    note: "refused",
  }],
  at: "2026-12-02T00:00:00.000Z",
};

Deno.test("tuning cache: a written record reads back after a reload, in a versioned JSON file", () => {
  withTempCache((path) => {
    assert.equal(tuneCachePath(), path);
    assert.equal(readTuneRecord("k1"), undefined);
    writeTuneRecord("k1", RECORD);
    setTuneCachePath(path); // drops what this process read: the next read is from the file
    assert.deepEqual(readTuneRecord("k1"), RECORD);
    const file = JSON.parse(Deno.readTextFileSync(path));
    assert.equal(file.format, "attnkit-tune");
    assert.equal(file.version, VERSION);
    clearTuneCache();
    assert.throws(() => Deno.statSync(path), Deno.errors.NotFound);
    assert.equal(readTuneRecord("k1"), undefined);
  });
  refuses(() => setTuneCachePath(""), /setTuneCachePath: path: expected a file path or undefined/);
});

Deno.test("tuning cache: a corrupt, foreign or malformed file is ignored with a warning, then replaced", () => {
  for (
    const text of [
      "{ not json",
      JSON.stringify({ format: "attnkit-tune", version: "0.0.1", entries: { k1: RECORD } }),
      JSON.stringify({ format: "something-else", version: VERSION, entries: {} }),
      JSON.stringify({
        format: "attnkit-tune",
        version: VERSION,
        entries: { k1: { ...RECORD, ms: "fast" } },
      }),
    ]
  ) {
    withTempCache((path) => {
      Deno.mkdirSync(path.slice(0, path.lastIndexOf("/")), { recursive: true });
      Deno.writeTextFileSync(path, text);
      setTuneCachePath(path);
      const { result, warnings } = captureWarnings(() => readTuneRecord("k1"));
      assert.equal(result, undefined, text);
      // One warning per process at most: earlier cases may have used it up.
      assert.ok(warnings.length <= 1);
      writeTuneRecord("k2", RECORD);
      setTuneCachePath(path);
      assert.deepEqual(readTuneRecord("k2"), RECORD);
    });
  }
});

Deno.test("tuning cache: writers in parallel processes never leave a corrupt file", async () => {
  await withTempCache(async (path) => {
    const writer = `${path.slice(0, path.indexOf("/sub/"))}/writer.ts`;
    Deno.writeTextFileSync(
      writer,
      `import { writeTuneRecord } from "${new URL("../ops/tune/cache.ts", import.meta.url).href}";
import { setTuneCachePath } from "${new URL("../mod.ts", import.meta.url).href}";
setTuneCachePath(${JSON.stringify(path)});
const id = Deno.args[0];
for (let i = 0; i < 20; i++) {
  writeTuneRecord("w" + id + "-" + i, { spec: {}, ms: i, candidates: [], at: new Date().toISOString() });
}
`,
    );
    const children = Array.from({ length: 4 }, (_, i) =>
      new Deno.Command(Deno.execPath(), {
        args: ["run", "-A", "--quiet", writer, String(i)],
        env: { NO_COLOR: "1" },
        stdout: "piped",
        stderr: "piped",
      }).output());
    for (const out of await Promise.all(children)) {
      assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
    }
    const file = JSON.parse(Deno.readTextFileSync(path));
    assert.equal(file.version, VERSION);
    const keys = Object.keys(file.entries);
    assert.ok(keys.length >= 20, `${keys.length} entries`);
    assert.ok(keys.every((k) => /^w[0-3]-\d+$/.test(k)));
    assert.deepEqual([...Deno.readDirSync(path.slice(0, path.lastIndexOf("/")))].map((e) => e.name), [
      "tune.json",
    ]);
  });
});

const SIZES = {
  layout: "bshd",
  batch: 1,
  heads: 4,
  headsKv: 2,
  seqLen: 33,
  dim: 64,
  isCausal: true,
} as const;

deviceTest(
  "kernelMap: an op's calls run under its settings, over the table in force, and are reported",
  (device) =>
    expectNoLeak(device, () => {
      using q = Tensor.randn([1, 33, 4, 64], { dtype: "bfloat16", device, seed: 1 });
      using kv = Tensor.randn([1, 33, 2, 64], { dtype: "bfloat16", device, seed: 2 });
      const plain = new GroupedQueryAttentionFwdOp(SIZES);
      const pinned = new GroupedQueryAttentionFwdOp({ ...SIZES, kernelMap: { "attention.fwd": "general" } });
      using a = plain.forward(q, kv, kv);
      assert.equal(lastChoice()?.source, "planner");
      const before = tuning().current;
      using b = pinned.forward(q, kv, kv);
      assert.deepEqual(lastChoice(), {
        op: "GroupedQueryAttentionFwdOp",
        source: "override",
        spec: { "attention.fwd": "general" },
      });
      assert.deepEqual(tuning().current, before); // the table in force is back
      assert.ok(compare(b.output, a.output).relRms < 1e-2);
    }),
);

Deno.test("kernelMap and tune: bad values are refused naming the option and what is allowed", () => {
  refuses(
    () => new GroupedQueryAttentionFwdOp({ ...SIZES, kernelMap: { "attention.bwd": "general" } } as never),
    /options\.kernelMap: unknown key attention\.bwd; this op takes attention\.fwd/,
  );
  refuses(
    () => new GroupedQueryAttentionBwdOp({ ...SIZES, kernelMap: { "attention.bwd": "fast" } } as never),
    /options\.kernelMap\.attention\.bwd: expected one of auto, general, wgmma, wgmma_v2, got "fast"/,
  );
  refuses(
    () => new GroupedQueryAttentionFwdOp({ ...SIZES, kernelMap: "general" } as never),
    /options\.kernelMap: expected an object of tuning keys and values/,
  );
  refuses(() => new GroupedQueryAttentionFwdOp({ ...SIZES, tune: "yes" } as never), /tune/);
  refuses(
    () =>
      new MultiHeadAttentionFwdOp(
        { layout: "bshd", batch: 1, heads: 2, seqLen: 8, dim: 64, kernel_map: {} } as never,
      ),
    /kernel_map/,
  );
});

deviceTest(
  "tune: the first call of a shape tunes, later ones read the cache; results match the planner's",
  (device) =>
    withTempCache(() =>
      expectNoLeak(device, () => {
        using q = Tensor.randn([1, 33, 4, 64], { dtype: "float16", device, seed: 3 });
        using kv = Tensor.randn([1, 33, 2, 64], { dtype: "float16", device, seed: 4 });
        using dO = Tensor.randn([1, 33, 4, 64], { dtype: "float16", device, seed: 5 });
        const tuned = new GroupedQueryAttentionFwdOp({ ...SIZES, tune: true });
        using first = tuned.forward(q, kv, kv);
        const choice = lastChoice()!;
        assert.equal(choice.source, "tune");
        const record = readTuneRecord(choice.key!)!;
        // The planner's own choice and every attention.fwd variant were tried.
        assert.deepEqual(
          record.candidates.map((c) => c.spec["attention.fwd"] ?? "planner").sort(),
          ["general", "planner", "wgmma", "wgmma_persistent"],
        );
        assert.ok(record.candidates.some((c) => c.ms === record.ms));
        using second = tuned.forward(q, kv, kv);
        assert.equal(lastChoice()?.source, "cache");
        assert.deepEqual(second.output.toArray(), first.output.toArray());
        using plain = new GroupedQueryAttentionFwdOp(SIZES).forward(q, kv, kv);
        assert.ok(compare(first.output, plain.output).relRms <= 2e-3);
        // The backward tunes its own key.
        using grads = new GroupedQueryAttentionBwdOp({ ...SIZES, tune: true }).backward(
          dO,
          q,
          kv,
          kv,
          first.output,
          first.lse,
        );
        assert.equal(lastChoice()?.source, "tune");
        assert.equal(grads.dq.shape.join(), "1,33,4,64");
      })
    ),
);

deviceTest(
  "tune: the comparison's device sums equal float64 sums, folded in rows or whole, NaN kept",
  (device) =>
    expectNoLeak(device, () => {
      // Folded into rows (of 4096, whose sums are then summed whole) and whole (an odd size, and
      // sizes too small to fold).
      for (const shape of [[3, 500, 24, 128], [4096 * 5], [3, 7, 1001], [64 * 3], [1], [0]]) {
        using x = Tensor.rand(shape, { device, seed: shape[0], low: -1, high: 2 });
        let exact = 0;
        for (const v of x.toArray() as Float32Array) exact += v;
        const got = sumOf(x);
        assert.ok(
          Math.abs(got - exact) <= 1e-5 * Math.max(1, Math.abs(exact)),
          `${shape}: ${got} vs ${exact}`,
        );
      }
      const values = new Float32Array(4096 * 6).fill(0.5);
      values[9000] = NaN;
      using poisoned = Tensor.from(values, { device });
      assert.ok(Number.isNaN(sumOf(poisoned)));
    }),
);

Deno.test("tune: a candidate far slower than the fastest stops being timed after three rounds", () => {
  withTempCache(() => {
    using x = Tensor.from([1, 2, 3, 4]);
    const runs: Record<string, number> = {};
    const run = () => {
      const variant = tuning().current["attention.fwd"] ?? "planner";
      runs[variant] = (runs[variant] ?? 0) + 1;
      // Busy waits long against a scheduler's time slice, so that a fast candidate descheduled while the
      // suite runs in parallel still keeps a best sample within 1.5x of the other fast one.
      const until = performance.now() + (variant === "wgmma" ? 80 : 20);
      while (performance.now() < until) { /* the slow candidate */ }
      const t = x.clone();
      return { tensors: [t], [Symbol.dispose]: () => t.dispose() };
    };
    withChoice({
      op: "Test",
      device: "cpu" as const,
      tune: true,
      keys: ["attention.fwd"],
      shapeClass: "pruned",
      relRms: 1e-3,
      run,
    }, () => 0);
    const record = readTuneRecord(lastChoice()!.key!)!;
    const slow = record.candidates.find((c) => c.spec["attention.fwd"] === "wgmma")!;
    assert.match(slow.note!, /timed 3 rounds only/);
    assert.notEqual(record.spec["attention.fwd"], "wgmma");
    // One comparison run, two warm-up rounds, three timed: 6 runs, against 13 for the others.
    assert.equal(runs.wgmma, 6);
    assert.equal(runs.general, 13);
  });
});

Deno.test("tune: a candidate whose output disagrees with the planner's is never chosen, however fast", () => {
  withTempCache(() => {
    using good = Tensor.from([1, 2, 3, 4]);
    using bad = Tensor.from([1, 2, 3, 5]);
    const slow = () => {
      const until = performance.now() + 2;
      while (performance.now() < until) { /* the correct kernels are slower */ }
    };
    const run = () => {
      const variant = tuning().current["attention.fwd"];
      if (variant !== "general") slow(); // "general" is the fastest candidate, and wrong
      const t = (variant === "general" ? bad : good).clone();
      return { tensors: [t], [Symbol.dispose]: () => t.dispose() };
    };
    const request = {
      op: "Test",
      device: "cpu" as const,
      tune: true,
      keys: ["attention.fwd"],
      shapeClass: "wrong-candidate",
      relRms: 1e-3,
      run,
    };
    withChoice(request, () => 0);
    const choice = lastChoice()!;
    assert.equal(choice.source, "tune");
    assert.notEqual(choice.spec["attention.fwd"], "general");
    const record = readTuneRecord(choice.key!)!;
    const general = record.candidates.find((c) => c.spec["attention.fwd"] === "general")!;
    assert.equal(general.ms, null);
    assert.match(general.note!, /relative RMS/);
    // A NaN where the planner's output has a number disagrees, however close the other values are; an
    // infinity both have agrees.
    using nan = Tensor.from([1, 2, NaN, 4]);
    using inf = Tensor.from([1, Infinity, 3, 4]);
    const pick = (wrong: Tensor, right: Tensor, shapeClass: string) => {
      const runOf = () => {
        const variant = tuning().current["attention.fwd"];
        if (variant !== "general") slow();
        const t = (variant === "general" ? wrong : right).clone();
        return { tensors: [t], [Symbol.dispose]: () => t.dispose() };
      };
      withChoice({ ...request, shapeClass, run: runOf }, () => 0);
      return readTuneRecord(lastChoice()!.key!)!.candidates.find((c) =>
        c.spec["attention.fwd"] === "general"
      )!;
    };
    const withNan = pick(nan, good, "nan-candidate");
    assert.equal(withNan.ms, null);
    assert.match(withNan.note!, /non-finite/);
    assert.notEqual(pick(inf, inf, "both-infinite").ms, null);
    // A run that throws something other than an AttnkitError is not swallowed.
    assert.throws(
      () =>
        withChoice({
          ...request,
          shapeClass: "throws",
          run: () => {
            throw new TypeError("boom");
          },
        }, () => 0),
      TypeError,
    );
    assert.ok(!(new TypeError("x") instanceof AttnkitError));
  });
});

deviceTest(
  "tune and kernelMap on a decode op: the split-key blocks are its candidates",
  (device) =>
    withTempCache(() =>
      expectNoLeak(device, () => {
        const sizes = { batch: 2, heads: 8, headsKv: 2, seqlenKv: 512, dim: 128, pageSize: 64 };
        using q = Tensor.randn([2, 8, 128], { dtype: "bfloat16", device, seed: 6 });
        using k = Tensor.randn([512, 2, 128], { dtype: "bfloat16", device, seed: 7 });
        using v = Tensor.randn([512, 2, 128], { dtype: "bfloat16", device, seed: 8 });
        using lengths = Tensor.from([300, 17], { dtype: "int32", device });
        using table = Tensor.from([[7, 6, 5, 4, 3], [2, 1, 0, -1, -1]], { dtype: "int32", device });
        using plain = new GroupedQueryAttentionDecodePagedWithKVCacheFwdOp(sizes).forward(
          q,
          k,
          v,
          lengths,
          table,
        );
        const pinned = new GroupedQueryAttentionDecodePagedWithKVCacheFwdOp({
          ...sizes,
          kernelMap: { "attention.decode": "tiled" },
        });
        using a = pinned.forward(q, k, v, lengths, table);
        assert.equal(lastChoice()?.source, "override");
        assert.ok(compare(a, plain).relRms < 1e-2);
        const tuned = new GroupedQueryAttentionDecodePagedWithKVCacheFwdOp({ ...sizes, tune: true });
        using b = tuned.forward(q, k, v, lengths, table);
        const choice = lastChoice()!;
        assert.equal(choice.source, "tune");
        assert.deepEqual(
          readTuneRecord(choice.key!)!.candidates.map((c) => c.spec["attention.decode"] ?? "planner").sort(),
          ["mma", "pipe", "planner", "tiled", "warp"],
        );
        assert.ok(compare(b, plain).relRms < 1e-2);
        refuses(
          () =>
            new GroupedQueryAttentionDecodePagedWithKVCacheFwdOp({
              ...sizes,
              kernelMap: { "attention.fwd": "general" },
            } as never),
          /options\.kernelMap: unknown key attention\.fwd; this op takes attention\.decode/,
        );
      })
    ),
);

deviceTest(
  "tune and kernelMap on the delta-rule op classes: forward, backward and combined, each its own stages",
  (device) =>
    withTempCache(() =>
      expectNoLeak(device, () => {
        const [B, T, H, D] = [1, 100, 2, 64];
        using q = Tensor.randn([B, T, H, D], { dtype: "bfloat16", device, seed: 9 });
        using k = Tensor.randn([B, T, H, D], { dtype: "bfloat16", device, seed: 10 });
        using v = Tensor.randn([B, T, H, D], { dtype: "bfloat16", device, seed: 11 });
        using g = Tensor.rand([B, T, H], { low: -0.3, high: 0, device, seed: 12 });
        using beta = Tensor.rand([B, T, H], { device, seed: 13 });
        using plain = new GatedDeltaNetBTHDFwdOp({ useQkL2norm: true }).forward(q, k, v, g, beta);
        assert.equal(lastChoice()?.source, "planner");
        using tuned = new GatedDeltaNetBTHDFwdOp({ useQkL2norm: true, tune: true }).forward(q, k, v, g, beta);
        const choice = lastChoice()!;
        assert.equal(choice.source, "tune");
        const record = readTuneRecord(choice.key!)!;
        assert.equal(record.candidates.length, 10); // the planner's, then 3 state kernels x 3 tiles
        assert.ok(compare(tuned.output, plain.output).relRms < 8e-3);
        const pinned = new GatedDeltaNetBTHDFwdOp({
          useQkL2norm: true,
          kernelMap: { "linear.fwd.path": "general" },
        });
        using general = pinned.forward(q, k, v, g, beta);
        assert.equal(lastChoice()?.source, "override");
        assert.ok(compare(general.output, plain.output).relRms < 8e-3);
        refuses(
          () => new GatedDeltaNetBTHDFwdOp({ kernelMap: { "linear.bwd.grads": "fused" } } as never),
          /options\.kernelMap: unknown key linear\.bwd\.grads; this op takes linear\.fwd\./,
        );
        // The backward classes tune their own stages; the combined ones take both stages' keys.
        using dO = Tensor.randn([B, T, H, D], { dtype: "bfloat16", device, seed: 14 });
        const bwd = new GatedDeltaNetBwdOp({ layout: "bshd", useQkL2norm: true, tune: true });
        using grads = bwd.backward(dO, q, k, v, g, beta, plain.chunkStates);
        const bwdChoice = lastChoice()!;
        assert.equal(bwdChoice.source, "tune");
        assert.equal(readTuneRecord(bwdChoice.key!)!.candidates.length, 28); // the planner's, then 3 x 3 x 3
        using reference = plain.backward(dO);
        assert.ok(compare(grads.dq, reference.dq).relRms < 3e-2);
        refuses(
          () => new GatedDeltaNetBwdOp({ layout: "bshd", kernelMap: { "linear.fwd.state": "mma" } } as never),
          /options\.kernelMap: unknown key linear\.fwd\.state; this op takes linear\.bwd\./,
        );
        using both = new GatedDeltaNetOp({
          layout: "bshd",
          useQkL2norm: true,
          kernelMap: { "linear.fwd.path": "general", "linear.bwd.grads": "fused" },
        });
        using o = both.forward(q, k, v, g, beta);
        assert.deepEqual(lastChoice()?.spec, { "linear.fwd.path": "general" });
        using bothGrads = both.backward(dO);
        assert.deepEqual(lastChoice()?.spec, { "linear.bwd.grads": "fused" });
        assert.ok(compare(o, plain.output).relRms < 8e-3);
        assert.ok(compare(bothGrads.dq, reference.dq).relRms < 3e-2);
        if (device === "cuda") {
          // The two-pass grads kernels exist at D = 256 only: a pin at D = 64 is refused, naming why.
          const twoPass = new GatedDeltaNetBwdOp({
            layout: "bshd",
            useQkL2norm: true,
            kernelMap: { "linear.bwd.grads": "two_pass" },
          });
          refuses(
            () => twoPass.backward(dO, q, k, v, g, beta, plain.chunkStates),
            /linear\.bwd\.grads=two_pass cannot serve this call: no runnable kernel of it at D = 64/,
          );
        }
      })
    ),
);

deviceTest(
  "tune and kernelMap on NSA's compressed and selected branches: item, tiled and mma blocks",
  (device) =>
    withTempCache(() =>
      expectNoLeak(device, () => {
        const T = 96, H = 16, D = 64, bs = 16;
        using q = Tensor.randn([T, H, D], { dtype: "bfloat16", device, seed: 15 });
        using kCmp = Tensor.randn([6, 1, D], { dtype: "bfloat16", device, seed: 16 });
        using vCmp = Tensor.randn([6, 1, D], { dtype: "bfloat16", device, seed: 17 });
        using tokens = nsaTokenIndices([0, T], { device });
        const sizes = { seqNum: 1, cSeqLen: T, heads: H, dimK: D, dimV: D, chunkNum: 6, group: H, bs };
        using plain = new NSACmpFwdVarlenOp(sizes).forward(q, kCmp, vCmp, [0, T], [0, 6], tokens);
        using tuned = new NSACmpFwdVarlenOp({ ...sizes, tune: true }).forward(
          q,
          kCmp,
          vCmp,
          [0, T],
          [0, 6],
          tokens,
        );
        const choice = lastChoice()!;
        assert.equal(choice.source, "tune");
        assert.deepEqual(
          readTuneRecord(choice.key!)!.candidates.map((c) => c.spec["sparse.nsa.compression"] ?? "planner")
            .sort(),
          ["item", "mma", "planner", "tiled"],
        );
        assert.ok(compare(tuned.output, plain.output).relRms < 1e-2);
        using k = Tensor.randn([T, 1, D], { dtype: "bfloat16", device, seed: 18 });
        using v = Tensor.randn([T, 1, D], { dtype: "bfloat16", device, seed: 19 });
        const list = Int32Array.from({ length: T * 2 }, (_, i) => (i % 2 === 0 ? 0 : (i >> 5) || -1));
        using blocks = Tensor.from(list, { shape: [T, 1, 2], device });
        const selection = {
          batch: 1,
          heads: H,
          cSeqLen: T,
          dim: D,
          blockSize: bs,
          groups: H,
          selectedBlocks: 2,
        };
        using a = new NSAFwdVarlenOp(selection).forward(q, k, v, blocks, undefined, [0, T], tokens);
        using b = new NSAFwdVarlenOp({ ...selection, kernelMap: { "sparse.nsa.selection": "item" } })
          .forward(q, k, v, blocks, undefined, [0, T], tokens);
        assert.equal(lastChoice()?.source, "override");
        assert.ok(compare(b, a).relRms < 1e-2);
        refuses(
          () =>
            new NSAFwdVarlenOp({ ...selection, kernelMap: { "sparse.nsa.compression": "item" } } as never),
          /options\.kernelMap: unknown key sparse\.nsa\.compression; this op takes sparse\.nsa\.selection/,
        );
      })
    ),
);

deviceTest(
  "tune and kernelMap on DSA decode: the tensor-core block and the per-item kernel, on both backends",
  (device) =>
    withTempCache(() =>
      expectNoLeak(device, () => {
        const sizes = {
          batch: 1,
          heads: 16,
          seqLen: 2,
          seqLenKv: 80,
          dim: 512,
          dimTail: 64,
          topk: 64,
          qStartIndexS: 79,
        };
        using q = Tensor.randn([1, 2, 16, 576], { dtype: "bfloat16", device, seed: 21 });
        using kv = Tensor.randn([1, 80, 1, 576], { dtype: "bfloat16", device, seed: 22 });
        const list = Int32Array.from({ length: 2 * 64 }, (_, i) => (i % 64) + (i % 5 === 0 ? 200 : 8));
        using indices = Tensor.from(list, { shape: [1, 2, 1, 64], device });
        using planned = new DeepSeekSparseAttentionDecodeWithKVCacheFwdOp(sizes).forward(q, kv, indices);
        using item = new DeepSeekSparseAttentionDecodeWithKVCacheFwdOp({
          ...sizes,
          kernelMap: { "sparse.dsa.decode": "item" },
        }).forward(q, kv, indices);
        assert.equal(lastChoice()?.source, "override");
        // The per-item kernel keeps the probabilities unrounded: close to the block's, not its bits.
        const gap = compare(item, planned);
        assert.ok(gap.relRms < 1e-2 && gap.maxAbs > 0, JSON.stringify(gap));
        using tuned = new DeepSeekSparseAttentionDecodeWithKVCacheFwdOp({ ...sizes, tune: true }).forward(
          q,
          kv,
          indices,
        );
        const choice = lastChoice()!;
        assert.equal(choice.source, "tune");
        assert.deepEqual(
          readTuneRecord(choice.key!)!.candidates.map((c) => c.spec["sparse.dsa.decode"] ?? "planner").sort(),
          ["item", "mma", "planner", "wgmma"],
        );
        assert.ok(compare(tuned, planned).relRms < 1e-2);
        const narrow = { ...sizes, dim: 128, kernelMap: { "sparse.dsa.decode": "mma" } };
        using q2 = Tensor.randn([1, 2, 16, 192], { dtype: "bfloat16", device, seed: 23 });
        using kv2 = Tensor.randn([1, 80, 1, 192], { dtype: "bfloat16", device, seed: 24 });
        refuses(
          () => new DeepSeekSparseAttentionDecodeWithKVCacheFwdOp(narrow).forward(q2, kv2, indices),
          /sparse\.dsa\.decode=mma cannot serve this call: dim 128 \+ dimTail 64/,
        );
        refuses(
          () =>
            new DeepSeekSparseAttentionDecodeWithKVCacheFwdOp({
              ...sizes,
              kernelMap: { "sparse.nsa.selection": "item" },
            } as never),
          /options\.kernelMap: unknown key sparse\.nsa\.selection; this op takes sparse\.dsa\.decode/,
        );
      })
    ),
);

deviceTest(
  "tune and kernelMap on the lightning indexer: the tensor-core block and the per-item kernel, on both backends",
  (device) =>
    withTempCache(() =>
      expectNoLeak(device, () => {
        using qWide = Tensor.randn([3, 64, 128], { device, seed: 31 });
        using kWide = Tensor.randn([100, 128], { device, seed: 32 });
        using q = qWide.cast("float8_e4m3");
        using k = kWide.cast("float8_e4m3");
        using w = Tensor.randn([3, 64], { device, seed: 33 });
        using ks = Tensor.from(new Int32Array([0, 20, 50]), { device });
        using ke = Tensor.from(new Int32Array([100, 90, 51]), { device });
        using planned = new FP8LightningIndexerFwdOp({ cleanLogits: false }).forward(q, k, w, ks, ke);
        using item = new FP8LightningIndexerFwdOp({
          cleanLogits: false,
          kernelMap: { "sparse.indexer": "item" },
        })
          .forward(q, k, w, ks, ke);
        assert.equal(lastChoice()?.source, "override");
        // The per-item kernel sums in another order (in double on the CPU): close, not the same bits.
        const gap = compare(item, planned);
        assert.ok(gap.relRms < 1e-3 && gap.maxAbs > 0, JSON.stringify(gap));
        using tuned = new FP8LightningIndexerFwdOp({ cleanLogits: false, tune: true }).forward(
          q,
          k,
          w,
          ks,
          ke,
        );
        const choice = lastChoice()!;
        assert.equal(choice.source, "tune");
        assert.deepEqual(
          readTuneRecord(choice.key!)!.candidates.map((c) => c.spec["sparse.indexer"] ?? "planner").sort(),
          ["item", "mma", "planner", "wgmma"],
        );
        assert.ok(compare(tuned, planned).relRms < 1e-3);
        using q32 = Tensor.randn([3, 32, 128], { dtype: "bfloat16", device, seed: 34 });
        using w32 = Tensor.randn([3, 32], { device, seed: 35 });
        using k16 = kWide.cast("bfloat16");
        refuses(
          () =>
            new FP8LightningIndexerFwdOp({ kernelMap: { "sparse.indexer": "mma" } }).forward(
              q32,
              k16,
              w32,
              ks,
              ke,
            ),
          /sparse\.indexer=mma cannot serve this call: 32 heads of 128 dims/,
        );
      })
    ),
);
