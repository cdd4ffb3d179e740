// The gated linear family's and KDA's planners, asked for named GPUs without one (explain): which calls the
// chunked kernels serve, with which registry rows, and why the others take the general path.
import assert from "node:assert/strict";
import { explain, type PlanQuery } from "../mod.ts";

const names = (p: ReturnType<typeof explain>) => p.kernels.map((k) => k.name);

Deno.test("gla planner: 16-bit calls with head dims a multiple of 8 run the chunked kernels, K padded", () => {
  const fwd = explain({ op: "linear.gla.fwd", gpu: "h200", dtype: "bfloat16", k: 128 });
  assert.equal(fwd.path, "chunked");
  assert.deepEqual(names(fwd), [
    "linear.gla.prep.channel<bfloat16, D128>",
    "linear.gla.pass.plain<bfloat16, D128>",
  ]);
  assert.equal(fwd.details.decay, "channel");
  const padded = explain({
    op: "linear.gla.fwd",
    gpu: "h200",
    dtype: "float16",
    k: 40,
    v: 24,
    channel: false,
  });
  assert.deepEqual(names(padded), [
    "linear.gla.prep.scalar<float16, D64>",
    "linear.gla.pass.plain<float16, D64>",
  ]);
  const bwd = explain({ op: "linear.gla.bwd", gpu: "h100", k: 64 });
  assert.deepEqual(names(bwd), [
    "linear.gla.states.channel<bfloat16, D64>",
    "linear.gla.dstates.channel<bfloat16, D64>",
    "linear.gla.grads.channel<bfloat16, D64>",
  ]);
  const decode = explain({ op: "linear.gla.decode", gpu: "h200", dtype: "float32" });
  assert.deepEqual(names(decode), ["linear.gla.decode.simt<float32>"]);
});

Deno.test("gla planner: a scalar decay at K = V = 128 on Hopper takes the split state kernel alone", () => {
  const base: PlanQuery = { op: "linear.gla.fwd", dtype: "bfloat16", k: 128, channel: false };
  // V tiles of 128 once the sequence-heads fill the H200's 132 multiprocessors, else 64.
  const wide = explain({ ...base, gpu: "h200", b: 4, h: 64 });
  assert.equal(wide.path, "state_split");
  assert.deepEqual(names(wide), ["linear.gla.pass.split<bfloat16, D128, tile 128>"]);
  assert.deepEqual(names(explain({ ...base, gpu: "h100", b: 2, h: 16 })), [
    "linear.gla.pass.split<bfloat16, D128, tile 64>",
  ]);
  // Linear attention's normaliser runs in the kernel (bfloat16); elsewhere on the general path.
  const normalized = explain({ ...base, gpu: "h200", b: 4, h: 64, normalize: true });
  assert.deepEqual(names(normalized), ["linear.gla.pass.split_normalized<bfloat16, D128, tile 128>"]);
  const half = explain({ ...base, gpu: "h200", dtype: "float16", normalize: true });
  assert.equal(half.path, "general");
  assert.match(String(half.details.why), /normaliser/);
  // The backward recomputes its states on the same kernel, unless given them (the op classes).
  const bwd = explain({ ...base, op: "linear.gla.bwd", gpu: "h200", b: 4, h: 64 });
  assert.equal(bwd.details.states, "state_split");
  assert.deepEqual(names(bwd), [
    "linear.gla.pass.split<bfloat16, D128, tile 128>",
    "linear.gla.dstates.scalar<bfloat16, D128>",
    "linear.gla.grads.scalar<bfloat16, D128>",
  ]);
  // The normalised backward: the same kernel recomputes the normalised output, scans the normaliser's
  // gradient; where it does not divide, the general path.
  const normBwd = explain({ ...base, op: "linear.gla.bwd", gpu: "h200", b: 4, h: 64, normalize: true });
  assert.equal(normBwd.details.normaliser, "scans");
  assert.deepEqual(names(normBwd), [
    "linear.gla.pass.split_normalized<bfloat16, D128, tile 128>",
    "linear.gla.dstates.scalar<bfloat16, D128>",
    "linear.gla.grads.scalar<bfloat16, D128>",
  ]);
  for (const q of [{ dtype: "float16" as const }, { k: 64, v: 64 }, { chunkStates: true }]) {
    const refused = explain({ ...base, op: "linear.gla.bwd", gpu: "h200", normalize: true, ...q });
    assert.equal(refused.path, "general", JSON.stringify(q));
    assert.match(String(refused.details.why), /normalised output/);
  }
  const given = explain({ ...base, op: "linear.gla.bwd", gpu: "h200", chunkStates: true });
  assert.equal(given.details.states, "given");
  assert.deepEqual(names(given), [
    "linear.gla.dstates.scalar<bfloat16, D128>",
    "linear.gla.grads.scalar<bfloat16, D128>",
  ]);
  // Not for a decay per channel, other head dims, the chunk states of the op classes, or without sm_90a.
  const others: PlanQuery[] = [
    { ...base, gpu: "h200", channel: true },
    { ...base, gpu: "h200", v: 64 },
    { ...base, gpu: "h200", chunkStates: true },
    { ...base, gpu: "a100" },
  ];
  for (const query of others) {
    const plan = explain(query);
    assert.equal(plan.path, "chunked", JSON.stringify(query));
    assert.match(names(plan)[1], /^linear\.gla\.pass\.plain/, JSON.stringify(query));
  }
});

Deno.test("gla planner: the backward above 128 key columns runs the chunked kernels by key pieces", () => {
  // Equal pieces of at most 128 columns, each a multiple of 8; the plan names the first piece's kernels.
  const cases: [number, boolean, number, string][] = [
    [256, true, 2, "channel<bfloat16, D128>"],
    [192, false, 2, "scalar<bfloat16, D128>"],
    [136, true, 2, "channel<bfloat16, D128>"],
    [200, false, 2, "scalar<bfloat16, D128>"],
  ];
  for (const [k, channel, pieces, kernel] of cases) {
    const plan = explain({ op: "linear.gla.bwd", gpu: "h200", k, v: 64, channel });
    assert.equal(plan.path, "chunked", `k ${k}`);
    assert.equal(Number(plan.details.key_pieces), pieces, `k ${k}`);
    assert.deepEqual(names(plan), [
      `linear.gla.states.${kernel}`,
      `linear.gla.dstates.${kernel}`,
      `linear.gla.grads.${kernel}`,
    ], `k ${k}`);
  }
  // At most 128 columns: one run, no pieces; what the kernels refuse stays refused at any width.
  assert.equal(explain({ op: "linear.gla.bwd", gpu: "h200", k: 128 }).details.key_pieces, undefined);
  const wide32 = explain({ op: "linear.gla.bwd", gpu: "h200", k: 256, dtype: "float32" });
  assert.equal(wide32.path, "general");
  assert.match(String(wide32.details.why), /float32/);
});

Deno.test("gla planner: the general path, with the reason, for what the chunked kernels cannot take", () => {
  const cases: [Parameters<typeof explain>[0], RegExp][] = [
    [{ op: "linear.gla.fwd", gpu: "h200", dtype: "float32" }, /float32/],
    [{ op: "linear.gla.fwd", gpu: "h200", k: 36 }, /multiple of 8/],
    [{ op: "linear.gla.fwd", gpu: "h200", aligned: false }, /aligned/],
    [{ op: "linear.gla.fwd", gpu: "h200", recurrent: true }, /token-by-token/],
    // K = 256: the prep kernel's 174 KiB of shared memory is more than an A100 block may take.
    [{ op: "linear.gla.fwd", gpu: "a100", k: 256 }, /shared memory/],
  ];
  for (const [query, why] of cases) {
    const plan = explain(query);
    assert.equal(plan.path, "general", JSON.stringify(query));
    assert.deepEqual(plan.kernels, [], JSON.stringify(query));
    assert.match(String(plan.details.why), why, JSON.stringify(query));
  }
});

Deno.test("kda planner: 16-bit calls with K <= 128 run the chunked kernels, K padded", () => {
  const fwd = explain({ op: "linear.kda.fwd", gpu: "h200", dtype: "bfloat16", k: 128 });
  assert.equal(fwd.path, "chunked");
  assert.deepEqual(names(fwd), [
    "linear.kda.prep.channel<bfloat16, D128>",
    "linear.kda.fwd.channel<bfloat16, D128>",
  ]);
  assert.equal(fwd.details.decay, "channel");
  const padded = explain({ op: "linear.kda.fwd", gpu: "h100", dtype: "float16", k: 40, v: 24 });
  assert.deepEqual(names(padded), [
    "linear.kda.prep.channel<float16, D64>",
    "linear.kda.fwd.channel<float16, D64>",
  ]);
});

Deno.test("kda planner: the general path, with the reason, for the rest", () => {
  const cases: [Parameters<typeof explain>[0], RegExp][] = [
    [{ op: "linear.kda.fwd", gpu: "h200", dtype: "float32" }, /float32/],
    [{ op: "linear.kda.fwd", gpu: "h200", k: 256 }, /K above 128/],
    [{ op: "linear.kda.fwd", gpu: "h200", k: 36 }, /multiple of 8/],
    [{ op: "linear.kda.fwd", gpu: "h200", aligned: false }, /aligned/],
    [{ op: "linear.kda.fwd", gpu: "h200", recurrent: true, fastmath: true }, /token-by-token/],
    [{ op: "linear.kda.bwd", gpu: "h200", dtype: "float32" }, /float32/],
    // The backward's gradient kernel takes 220 KiB of shared memory at K = 128.
    [{ op: "linear.kda.bwd", gpu: "a100", k: 128 }, /shared memory/],
  ];
  for (const [query, why] of cases) {
    const plan = explain(query);
    assert.equal(plan.path, "general", JSON.stringify(query));
    assert.deepEqual(plan.kernels, [], JSON.stringify(query));
    assert.match(String(plan.details.why), why, JSON.stringify(query));
  }
  const recurrent = explain({ op: "linear.kda.fwd", gpu: "h200", recurrent: true });
  assert.equal(recurrent.details.algorithm, "recurrent");
});
