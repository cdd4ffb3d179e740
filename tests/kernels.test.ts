// The kernel layer on any machine: the library's row table is the registries' (csrc/*/registry.ts),
// the tuning table refuses unknown keys and values by name, and the planners choose what they should
// for described calls on named GPUs (H200, A100): the decisions the CUDA dispatchers execute.
import assert from "node:assert/strict";
import { expandRows, rowName } from "../build/registry.ts";
import { REGISTRIES } from "../build/registries.ts";
import {
  AttnkitError,
  explain,
  kernels,
  type Plan,
  type PlanQuery,
  setTuning,
  tuning,
  withTuning,
} from "../mod.ts";
import { HAS_CUDA } from "./helpers.ts";

const names = (p: Plan) => p.kernels.map((k) => k.name);

function plan(q: PlanQuery, spec = ""): Plan {
  return withTuning(spec, () => explain(q));
}

function refused(fn: () => unknown, code: string, pattern: RegExp): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof AttnkitError, `expected an AttnkitError, got ${e}`);
    assert.equal(e.code, code);
    assert.match(e.message, pattern);
    return true;
  });
}

Deno.test("kernels: the library's row table is the registries', row for row", () => {
  const rows = expandRows(REGISTRIES);
  const built = kernels();
  assert.deepEqual(built.map((k) => k.name), rows.map(rowName));
  assert.ok(built.every((k) => !k.runnable), "no row runs without a device");
  if (HAS_CUDA) assert.ok(kernels("cuda").some((k) => k.runnable), "some row runs on the GPU");
  for (const k of built) {
    assert.ok(["sm80", "sm90a"].includes(k.arch));
    assert.ok(["float32", "float16", "bfloat16", "float8_e4m3"].includes(k.dtype));
  }
});

Deno.test("tuning: keys come from the registry; unknown keys and values are refused by name", () => {
  const keys = Object.fromEntries(tuning().keys.map((k) => [k.name, k.values]));
  assert.deepEqual(keys["linear.fwd.state"], ["mma", "split", "wgmma"]);
  assert.deepEqual(keys["linear.fwd.state.tile"], ["32", "64", "128"]);
  assert.deepEqual(keys["attention.bwd"], ["general", "wgmma", "wgmma_v2"]);
  assert.deepEqual(keys["linear.bwd.grads"], ["fused", "two_pass", "wgmma"]);
  assert.ok(keys["linear.fwd.path"].includes("general"));
  refused(
    () => setTuning("linear.fwd.stat=split"),
    "INVALID_ARGUMENT",
    /unknown key 'linear\.fwd\.stat' \(did you mean 'linear\.fwd\.state'\?\)/,
  );
  refused(
    () => setTuning({ "attention.bwd": "v2p" }),
    "INVALID_ARGUMENT",
    /attention\.bwd must be auto or one of general, wgmma, wgmma_v2, got 'v2p'/,
  );
  refused(() => setTuning("linear.fwd.path"), "INVALID_ARGUMENT", /expected key=value/);
  refused(() => setTuning("linear.fwd.path=fast,linear.fwd.path=general"), "INVALID_ARGUMENT", /given twice/);
  refused(() => setTuning({ "linear.fwd.segments": 1 }), "INVALID_ARGUMENT", /linear\.fwd\.segments must be/);
  assert.deepEqual(tuning().current, {}, "a refused spec leaves the table as it was");
  withTuning({ "linear.fwd.state": "mma", "linear.fwd.state.tile": 64 }, () => {
    assert.deepEqual(tuning().current, { "linear.fwd.state": "mma", "linear.fwd.state.tile": "64" });
  });
  assert.deepEqual(tuning().current, {}, "withTuning puts the table back");
  withTuning("attention.fwd=auto", () => assert.deepEqual(tuning().current, {}, "auto is the same as unset"));
});

Deno.test("planner: attention forward and backward kernels on H200 and A100", () => {
  const fwd = (q: Omit<PlanQuery, "op">, spec = "") => plan({ op: "attention.fwd", gpu: "h200", ...q }, spec);
  assert.deepEqual(names(fwd({ d: 64, sq: 2048, hq: 16, b: 8 })), [
    "attention.fwd.wgmma_persistent<bfloat16, D64>",
  ]);
  assert.equal(fwd({ d: 64, sq: 2048, hq: 16 }).details.block_m, 192);
  assert.equal(
    fwd({ d: 128, dtype: "float16" }).kernels[0].name,
    "attention.fwd.wgmma_persistent<float16, D128>",
  );
  assert.equal(fwd({ d: 128 }).details.block_m, 128);
  assert.equal(fwd({ d: 256 }).kernels[0].name, "attention.fwd.wgmma<bfloat16, D256>");
  assert.equal(
    fwd({ d: 96 }).kernels[0].name,
    "attention.fwd.general<bfloat16, D128>",
    "96 is padded to 128",
  );
  assert.equal(fwd({ d: 160 }).kernels[0].name, "attention.fwd.general<bfloat16, D192>");
  assert.equal(fwd({ d: 128, aligned: false }).path, "general");
  assert.equal(fwd({ d: 128, totalKv: 0 }).path, "general", "no keys at all: the general kernel");
  assert.equal(fwd({ d: 128, sq: 0 }).path, "empty");
  assert.deepEqual(fwd({ d: 128 }, "attention.fwd=general").kernels[0].variant, "general");
  refused(
    () => fwd({ d: 128 }, "attention.fwd=wgmma"),
    "UNSUPPORTED",
    /no attention\.fwd\.wgmma kernel for bfloat16 at head dim 128/,
  );
  refused(() => fwd({ d: 96 }, "attention.fwd=wgmma_persistent"), "UNSUPPORTED", /head dim 96/);
  assert.equal(
    plan({ op: "attention.fwd", gpu: "a100", d: 128 }).kernels[0].name,
    "attention.fwd.general<bfloat16, D128>",
  );
  // (sequence, head) pairs whose K and V share half of the H200's 50 MiB L2: 25 MiB / (4096 * 128 * 4 B).
  assert.equal(fwd({ d: 128, sq: 4096, hq: 32, b: 4 }).details.heads_per_section, 12);
  // float8_e4m3 inputs: the 8-bit kernel at D 128 (its K and V take half the bytes: 25 pairs a section);
  // elsewhere widened to the output dtype, whose plan then runs.
  const e4m3 = { dtype: "float8_e4m3", outDtype: "float16" } as const;
  assert.equal(
    fwd({ ...e4m3, d: 128, sq: 4096, hq: 32, b: 4 }).kernels[0].name,
    "attention.fwd.wgmma_persistent<float8_e4m3, D128>",
  );
  assert.equal(fwd({ ...e4m3, d: 128, sq: 4096, hq: 32, b: 4 }).details.heads_per_section, 25);
  const widened = fwd({ ...e4m3, d: 64 });
  assert.equal(widened.path, "dequantized");
  assert.equal(widened.kernels[0].name, "attention.fwd.wgmma_persistent<float16, D64>");
  assert.equal(widened.details.why, "head dim 64 (they take 128 for float8_e4m3)");
  assert.equal(fwd({ ...e4m3, d: 128, aligned: false }).details.kernel, "general");
  assert.equal(fwd({ ...e4m3, d: 128 }, "attention.fwd=general").path, "dequantized");
  assert.equal(plan({ op: "attention.fwd", gpu: "a100", ...e4m3, d: 128 }).path, "dequantized");
  refused(() => fwd({ ...e4m3, d: 64 }, "attention.fwd=wgmma_persistent"), "UNSUPPORTED", /head dim 64/);

  const bwd = (q: Omit<PlanQuery, "op">, spec = "") => plan({ op: "attention.bwd", gpu: "h200", ...q }, spec);
  assert.equal(bwd({ d: 64 }).kernels[0].name, "attention.bwd.wgmma_v2<bfloat16, D64>");
  assert.equal(bwd({ d: 64 }).details.dq_order, "full");
  assert.equal(bwd({ d: 128 }).kernels[0].name, "attention.bwd.wgmma<bfloat16, D128>");
  assert.equal(bwd({ d: 128 }).details.dq_order, "fragments");
  // Deterministic: the Hopper kernels with dQ added in key-tile order.
  assert.equal(bwd({ d: 128, deterministic: true }).kernels[0].name, "attention.bwd.wgmma<bfloat16, D128>");
  assert.equal(bwd({ d: 64, deterministic: true }).kernels[0].name, "attention.bwd.wgmma_v2<bfloat16, D64>");
  assert.equal(bwd({ d: 256 }).kernels[0].name, "attention.bwd.general<bfloat16, D256>");
  assert.equal(bwd({ d: 128, tmaOk: false }).path, "general");
  assert.equal(plan({ op: "attention.bwd", gpu: "a100", d: 64 }).path, "general");
  assert.equal(bwd({ d: 64, deterministic: true }, "attention.bwd=general").path, "general");
});

Deno.test("planner: the chunked linear forward (paths, state kernels, tiles, segments, saving)", () => {
  const fwd = (q: Omit<PlanQuery, "op">, spec = "") => plan({ op: "linear.fwd", gpu: "h200", ...q }, spec);
  // D 128 on Hopper: the split kernel; 32 sequence-heads at tile 32 are 128 blocks, one wave, each
  // step cheaper than at tile 64 (64 blocks); 64 sequence-heads take tile 64 (tile 32 needs two waves).
  const b2 = fwd({ b: 2, t: 16384, h: 16, k: 128, save: true });
  assert.deepEqual(names(b2), [
    "linear.fwd.prep.wgmma<bfloat16, D128>",
    "linear.fwd.state.split<bfloat16, D128, tile 32>",
  ]);
  assert.equal(fwd({ b: 4, t: 2048, h: 16, k: 128 }).kernels[1].tile, 64);
  assert.equal(fwd({ b: 1, t: 8192, h: 96, k: 128 }).kernels[1].tile, 128);
  assert.equal(b2.details.loads, "tma");
  assert.equal(b2.details.saves_states, "true");
  assert.equal(b2.details.segments, undefined, "a full wave of blocks: no segments");
  // Few heads, long sequences: the state pass in segments (8 blocks would leave 124 SMs idle).
  const b1 = fwd({ b: 1, t: 8192, h: 8, k: 128 });
  assert.ok(Number(b1.details.segments) >= 2, `segments at B1 T8192 H8: ${JSON.stringify(b1.details)}`);
  assert.equal(b1.kernels.length, 3, "prep, the summaries' pass and the outputs' pass");
  // Packed sequences load with cp.async.
  assert.equal(fwd({ seqlens: [300, 5000, 17], h: 32, k: 128 }).details.loads, "cp.async");
  // D 256: the two-role wgmma kernel; D 64: mma.sync.
  assert.equal(
    fwd({ k: 256, h: 32, b: 8, t: 2048 }).kernels[1].name,
    "linear.fwd.state.wgmma<bfloat16, D256, tile 64>",
  );
  assert.equal(fwd({ k: 64, h: 8, b: 8, t: 1024 }).kernels[1].variant, "mma");
  assert.equal(
    fwd({ k: 64, save: true }).details.saves_states,
    "false",
    "only the Hopper kernels save states",
  );
  // The general path: fp32, other head dims, K != V, the recurrent algorithm, chunk outputs at 32.
  for (const q of [{ dtype: "float32" as const }, { k: 96 }, { k: 128, v: 64 }, { recurrent: true }]) {
    const p = fwd(q);
    assert.equal(p.path, "general", JSON.stringify(q));
    assert.equal(p.kernels[0].stage, "linear.fwd.recurrent");
  }
  assert.deepEqual(fwd({ chunkSize: 32, factors: true }).kernels.map((k) => k.stage), [
    "linear.fwd.recurrent",
    "linear.fwd.wy",
  ]);
  assert.equal(
    fwd({ chunkSize: 32 }).path,
    "fast",
    "chunk size 32 computes the same function in chunks of 64",
  );
  assert.equal(fwd({ aligned: false }).path, "general");
  // A100: mma.sync at every D.
  const a100 = plan({ op: "linear.fwd", gpu: "a100", k: 128, b: 2, t: 4096, h: 16 });
  assert.equal(a100.kernels[1].variant, "mma");
  // Tuning.
  assert.equal(fwd({ k: 128 }, "linear.fwd.state=mma").kernels[1].variant, "mma");
  assert.equal(fwd({ k: 128 }, "linear.fwd.state.tile=128").kernels[1].tile, 128);
  // Stage 1: the wgmma kernel at D 128 / 256 on Hopper, mma.sync elsewhere or when pinned.
  assert.equal(fwd({ k: 128 }).kernels[0].name, "linear.fwd.prep.wgmma<bfloat16, D128>");
  assert.equal(fwd({ k: 64 }).kernels[0].name, "linear.fwd.prep.mma<bfloat16, D64>");
  assert.equal(fwd({ k: 128 }, "linear.fwd.prep=mma").kernels[0].name, "linear.fwd.prep.mma<bfloat16, D128>");
  assert.equal(plan({ op: "linear.fwd", gpu: "a100", k: 128 }).kernels[0].variant, "mma");
  assert.equal(
    fwd({ k: 256 }, "linear.fwd.prep=wgmma").kernels[0].name,
    "linear.fwd.prep.wgmma<bfloat16, D256>",
  );
  refused(
    () => fwd({ k: 64 }, "linear.fwd.prep=wgmma"),
    "UNSUPPORTED",
    /linear\.fwd\.prep\.wgmma kernel at D = 64/,
  );
  refused(
    () => plan({ op: "linear.fwd", gpu: "a100", k: 128 }, "linear.fwd.prep=wgmma"),
    "UNSUPPORTED",
    /linear\.fwd\.prep=wgmma/,
  );
  assert.equal(fwd({ k: 128 }, "linear.fwd.path=general").path, "general");
  assert.equal(fwd({ k: 128, b: 2, t: 16384 }, "linear.fwd.segments=3").details.segments, 3);
  assert.equal(fwd({ k: 128 }, "linear.fwd.loads=cp.async").details.loads, "cp.async");
  refused(() => fwd({ k: 128 }, "linear.fwd.state=wgmma"), "UNSUPPORTED", /linear\.fwd\.state\.wgmma/);
  refused(() => fwd({ k: 64 }, "linear.fwd.state.tile=128"), "UNSUPPORTED", /tile/);
  refused(() => fwd({ dtype: "float32" }, "linear.fwd.path=fast"), "UNSUPPORTED", /bfloat16 or float16/);
  refused(() => fwd({ seqlens: [100, 200] }, "linear.fwd.loads=tma"), "UNSUPPORTED", /cp\.async/);
  refused(() => fwd({ k: 64 }, "linear.fwd.segments=2"), "UNSUPPORTED", /segments/);
});

Deno.test("planner: the linear backward and decode", () => {
  const bwd = (q: Omit<PlanQuery, "op">, spec = "") => plan({ op: "linear.bwd", gpu: "h200", ...q }, spec);
  const saved = bwd({ b: 2, t: 16384, h: 16, k: 128, saved: true });
  assert.deepEqual(saved.kernels.map((k) => k.stage), [
    "linear.bwd.prep",
    "linear.bwd.dstates",
    "linear.bwd.grads",
  ]);
  assert.equal(saved.kernels[2].variant, "wgmma");
  // Without saved states the state pass runs again; 32 sequence-heads x 2 blocks leave SMs idle: tile 32.
  const recompute = bwd({ b: 2, t: 16384, h: 16, k: 128 });
  assert.deepEqual(recompute.kernels.map((k) => k.stage), [
    "linear.bwd.prep",
    "linear.bwd.states",
    "linear.bwd.dstates",
    "linear.bwd.grads",
  ]);
  assert.equal(recompute.details.states_tile, 32);
  assert.equal(bwd({ b: 8, t: 2048, h: 64, k: 128 }).details.states_tile, 64);
  assert.equal(
    bwd({ k: 256, h: 32, b: 8 }).kernels.at(-1)!.name,
    "linear.bwd.grads.two_pass<bfloat16, D256>",
  );
  assert.equal(bwd({ k: 128, l2norm: true }).details.l2norm, "prep, fused");
  assert.equal(bwd({ k: 128, l2norm: true, hk: 4 }).details.l2norm, "prep");
  assert.equal(bwd({ k: 128, l2norm: true }, "linear.bwd.l2norm=kernel").details.l2norm, "kernel, fused");
  // A100: the fused gradients fit its shared memory at D 64 only; D 128 takes the general path.
  assert.equal(
    plan({ op: "linear.bwd", gpu: "a100", k: 64 }).kernels.at(-1)!.name,
    "linear.bwd.grads.fused<bfloat16, D64>",
  );
  assert.equal(plan({ op: "linear.bwd", gpu: "a100", k: 128 }).path, "general");
  const general = bwd({ dtype: "float16", k: 96, chunkSize: 32 });
  assert.equal(general.path, "general");
  assert.equal(general.details.chunk, 32);
  assert.equal(bwd({ k: 128 }, "linear.bwd.states.tile=16").details.states_tile, 16);
  refused(() => bwd({ k: 64 }, "linear.bwd.states.tile=16"), "UNSUPPORTED", /tile/);
  refused(() => bwd({ k: 128 }, "linear.bwd.grads=two_pass"), "UNSUPPORTED", /two_pass/);
  // dstates: the split kernel on Hopper at D 128 where the tile is 32 or 64, else mma.sync.
  assert.equal(saved.kernels[1].name, "linear.bwd.dstates.split<bfloat16, D128, tile 32>");
  assert.equal(
    bwd({ b: 2, t: 16384, h: 16, k: 128, saved: true }, "linear.bwd.dstates=mma").kernels[1].name,
    "linear.bwd.dstates.mma<bfloat16, D128, tile 32>",
  );
  assert.equal(plan({ op: "linear.bwd", gpu: "a100", k: 64 }).kernels[1].variant, "mma");
  assert.equal(
    bwd({ b: 2, t: 16384, h: 16, k: 128, saved: true }, "linear.bwd.dstates.tile=128").kernels[1].name,
    "linear.bwd.dstates.mma<bfloat16, D128, tile 128>",
    "a tile only the mma kernel has",
  );
  assert.equal(
    bwd({ b: 2, t: 16384, h: 16, k: 128, saved: true }, "linear.bwd.dstates=split").kernels[1].name,
    "linear.bwd.dstates.split<bfloat16, D128, tile 32>",
  );
  assert.equal(
    bwd({ b: 8, t: 2048, h: 64, k: 128 }, "linear.bwd.dstates=split").kernels[2].name,
    "linear.bwd.dstates.split<bfloat16, D128, tile 64>",
    "a wider automatic tile is capped at the split kernel's 64",
  );
  refused(() => bwd({ k: 256 }, "linear.bwd.dstates=split"), "UNSUPPORTED", /linear\.bwd\.dstates\.split/);
  refused(
    () => plan({ op: "linear.bwd", gpu: "a100", k: 64 }, "linear.bwd.dstates=split"),
    "UNSUPPORTED",
    /linear\.bwd\.dstates\.split/,
  );
  // grads: the wgmma kernel on Hopper at D 128, else mma.sync (fused); either when pinned.
  assert.equal(saved.kernels[2].name, "linear.bwd.grads.wgmma<bfloat16, D128>");
  assert.equal(
    bwd({ b: 2, t: 16384, h: 16, k: 128, saved: true }, "linear.bwd.grads=fused").kernels[2].name,
    "linear.bwd.grads.fused<bfloat16, D128>",
  );
  assert.equal(bwd({ k: 64 }).kernels.at(-1)!.name, "linear.bwd.grads.fused<bfloat16, D64>");
  refused(() => bwd({ k: 64 }, "linear.bwd.grads=wgmma"), "UNSUPPORTED", /linear\.bwd\.grads=wgmma/);
  refused(
    () => plan({ op: "linear.bwd", gpu: "a100", k: 64 }, "linear.bwd.grads=wgmma"),
    "UNSUPPORTED",
    /linear\.bwd\.grads=wgmma/,
  );
  refused(() => bwd({ k: 128 }, "linear.bwd.l2norm=prep"), "UNSUPPORTED", /no L2 norm/);
  // Decode: the tile kernel at K 64 / 128 / 256 with 16-byte rows (any GPU from sm_80), else the register
  // kernel with the reason; the tuning key pins either, a tile pin that cannot serve is refused.
  const decode = (q: Omit<PlanQuery, "op" | "gpu">, spec = "") =>
    plan({ op: "linear.decode", gpu: "h200", ...q }, spec);
  assert.equal(decode({ dtype: "float32" }).kernels[0].name, "linear.decode.tile<float32, D128>");
  assert.equal(
    plan({ op: "linear.decode", gpu: "a100", dtype: "float16", k: 256 }).kernels[0].name,
    "linear.decode.tile<float16, D256>",
  );
  const odd = decode({ k: 96 });
  assert.equal(odd.kernels[0].name, "linear.decode.simt<bfloat16>");
  assert.match(String(odd.details.why), /K is not 64, 128 or 256/);
  assert.match(String(decode({ k: 64, aligned: false }).details.why), /16-byte aligned/);
  assert.equal(decode({ k: 64 }, "linear.decode=simt").kernels[0].name, "linear.decode.simt<bfloat16>");
  refused(() => decode({ k: 96 }, "linear.decode=tile"), "UNSUPPORTED", /linear\.decode=tile cannot serve/);
});

Deno.test("explain: bad queries are refused by name", () => {
  // Without a GPU named, this machine's first one (none here: refused).
  if (HAS_CUDA) assert.equal(explain({ op: "linear.fwd" }).op, "linear.fwd");
  else refused(() => explain({ op: "linear.fwd" }), "INVALID_ARGUMENT", /name (the GPU|a gpu=h200)/);
  refused(
    () => explain({ op: "linear.fwdx" as "linear.fwd", gpu: "h200" }),
    "INVALID_ARGUMENT",
    /op must be/,
  );
  refused(
    () => explain({ op: "linear.fwd", gpu: "h300" as "h200" }),
    "INVALID_ARGUMENT",
    /gpu must be one of/,
  );
  refused(() => explain({ op: "linear.fwd", gpu: "h200", d: 64 }), "INVALID_ARGUMENT", /unknown key 'd'/);
  refused(() => explain({ op: "attention.fwd", gpu: "h200", hk: 2 }), "INVALID_ARGUMENT", /unknown key 'hk'/);
  refused(
    () => explain({ op: "attention.fwd", gpu: "h200", heads: 2 } as unknown as PlanQuery),
    "INVALID_ARGUMENT",
    /unknown key heads/,
  );
  refused(() => explain({ op: "linear.fwd", gpu: "h200", seqlens: [] }), "INVALID_ARGUMENT", /seqlens/);
});

Deno.test("explain: the split-key decode splits short batches of long caches, not large batches", () => {
  const plan = (q: Omit<PlanQuery, "op" | "gpu">) => explain({ op: "attention.decode", gpu: "h200", ...q });
  const one = plan({ b: 1, hq: 32, hkv: 8, d: 128, skv: 65536 });
  // One query row per KV head: the warp block; 2 to 16: the streamed tensor-core one (the phased tensor-core
  // one at head dim 256); more: the phased CUDA-core one.
  assert.equal(one.path, "pipe");
  assert.deepEqual(one.kernels.map((k) => k.name), ["attention.decode.pipe<bfloat16, D128>"]);
  assert.equal(plan({ b: 1, hq: 8, hkv: 8, d: 128, skv: 4096 }).path, "warp");
  assert.equal(plan({ b: 1, hq: 16, hkv: 8, d: 256, skv: 4096 }).path, "mma");
  // The streamed block only where its stages fit the GPU's shared memory: the L40S's 99 KB a block hold
  // three stages at head dim 64, not at 128, where the planner takes the phased block.
  const pipe = { "attention.decode": "pipe" };
  const l40s = (q: Omit<PlanQuery, "op" | "gpu">) => explain({ op: "attention.decode", gpu: "l40s", ...q });
  assert.deepEqual(
    withTuning(pipe, () => plan({ b: 1, hq: 32, hkv: 8, d: 128, skv: 4096 })).kernels.map((k) => k.name),
    ["attention.decode.pipe<bfloat16, D128>"],
  );
  assert.equal(withTuning(pipe, () => l40s({ b: 1, hq: 32, hkv: 8, d: 64, skv: 4096 })).path, "pipe");
  assert.equal(l40s({ b: 1, hq: 32, hkv: 8, d: 64, skv: 4096 }).path, "pipe");
  assert.equal(l40s({ b: 1, hq: 32, hkv: 8, d: 128, skv: 4096 }).path, "mma");
  refused(
    () => withTuning(pipe, () => l40s({ b: 1, hq: 16, hkv: 1, d: 128, skv: 64 })),
    "UNSUPPORTED",
    /attention\.decode=pipe cannot serve this call/,
  );
  // 8 (sequence, KV head) blocks: 33 splits of 2016 keys make 264, two per multiprocessor.
  assert.deepEqual(one.details, { splits: 33, chunk: 2016 });
  assert.deepEqual(plan({ b: 64, hq: 32, hkv: 8, d: 128, skv: 4096 }).details, { splits: 1, chunk: 4096 });
  const mla = plan({ b: 4, hq: 16, hkv: 1, d: 256, skv: 8192 });
  assert.deepEqual(mla.kernels.map((k) => k.name), ["attention.decode.mma<bfloat16, D256>"]);
  assert.equal(withTuning(pipe, () => plan({ b: 4, hq: 16, hkv: 1, d: 256 })).path, "pipe");
  assert.equal(
    withTuning({ "attention.decode": "tiled" }, () => plan({ b: 4, hq: 16, hkv: 1, d: 128 })).path,
    "tiled",
  );
  assert.equal(plan({ b: 4, hq: 32, hkv: 1, d: 128, sq: 1 }).path, "tiled");
  refused(
    () => withTuning({ "attention.decode": "warp" }, () => plan({ b: 1, hq: 16, hkv: 1, d: 128, skv: 64 })),
    "UNSUPPORTED",
    /attention\.decode=warp cannot serve this call/,
  );
  // A range is at least 256 keys: a short cache is not split past that.
  assert.equal(plan({ b: 1, hq: 8, hkv: 8, d: 64, skv: 600 }).details.splits, 2);
  assert.equal(plan({ b: 0, hq: 8, hkv: 8, d: 64, skv: 600 }).path, "empty");
  refused(() => plan({ b: 1, hq: 4, hkv: 4, d: 96, skv: 64 }), "UNSUPPORTED", /head dim 96/);
  refused(() => plan({ b: 1, hq: 32, hkv: 1, d: 256, skv: 64 }), "UNSUPPORTED", /32 query rows per KV head/);
  refused(
    () => withTuning({ "attention.decode": "mma" }, () => plan({ b: 1, hq: 32, hkv: 1, d: 64, skv: 64 })),
    "UNSUPPORTED",
    /attention\.decode=mma cannot serve this call/,
  );
});

Deno.test("explain: DSA decode takes wgmma at 64-head groups on Hopper, the mma.sync block at 512 + 64, else per item", () => {
  const plan = (q: Omit<PlanQuery, "gpu">) => explain({ gpu: "h200", ...q });
  const hopper = plan({ op: "sparse.dsa.decode" });
  assert.deepEqual(hopper.kernels.map((k) => k.name), ["sparse.dsa.decode.wgmma<bfloat16, D576>"]);
  assert.equal(plan({ op: "sparse.dsa.decode", dtype: "float16", d: 576, v: 512 }).path, "wgmma");
  // Groups that are not a multiple of 64 heads, and GPUs without sm_90a, take the mma.sync block.
  const mma = plan({ op: "sparse.dsa.decode", hq: 16 });
  assert.deepEqual(mma.kernels.map((k) => k.name), ["sparse.dsa.decode.mma<bfloat16, D576>"]);
  assert.equal(plan({ op: "sparse.dsa.decode", hq: 192, hkv: 2 }).path, "mma");
  assert.equal(explain({ gpu: "a100", op: "sparse.dsa.decode" }).path, "mma");
  // The lists split over blocks only when that finishes sooner (at batch 1 and 128 heads, 2 blocks of 64 heads
  // in 64 splits fill one wave of 128 blocks; at batch 128 and 16 heads two splits fill one wave of 264 blocks,
  // where three would leave a second wave half empty).
  assert.equal(plan({ op: "sparse.dsa.decode", b: 64, hq: 128, skv: 2048 }).details.splits, 1);
  assert.equal(plan({ op: "sparse.dsa.decode", b: 1, hq: 128, skv: 65536 }).details.splits, 64);
  assert.equal(plan({ op: "sparse.dsa.decode", b: 128, hq: 16, skv: 8192 }).details.splits, 2);
  const item = plan({ op: "sparse.dsa.decode", d: 192, v: 128 });
  assert.deepEqual(item.kernels.map((k) => k.name), ["sparse.dsa.decode.item<bfloat16>"]);
  assert.match(String(item.details.mma_ruled_out), /dim 128 \+ dimTail 64 \(it is built for 512 \+ 64\)/);
  assert.equal(plan({ op: "sparse.dsa.decode", dtype: "float32" }).path, "item");
  assert.equal(plan({ op: "sparse.dsa.decode", aligned: false }).path, "item");
  assert.equal(
    withTuning({ "sparse.dsa.decode": "item" }, () => plan({ op: "sparse.dsa.decode" })).path,
    "item",
  );
  refused(
    () => withTuning({ "sparse.dsa.decode": "mma" }, () => plan({ op: "sparse.dsa.decode", d: 192, v: 128 })),
    "UNSUPPORTED",
    /mma cannot serve this call: dim 128 \+ dimTail 64/,
  );
  // Pinned, each kernel plans its own blocks (the mma.sync block: 16 heads, two an SM).
  const wgmma = { "sparse.dsa.decode": "wgmma" };
  const pinned = withTuning(wgmma, () => plan({ op: "sparse.dsa.decode", b: 64, hq: 128, skv: 2048 }));
  assert.deepEqual(pinned.kernels.map((k) => k.name), ["sparse.dsa.decode.wgmma<bfloat16, D576>"]);
  assert.equal(pinned.details.splits, 1);
  assert.equal(
    withTuning(
      { "sparse.dsa.decode": "mma" },
      () => plan({ op: "sparse.dsa.decode", b: 1, hq: 128, skv: 65536 }),
    )
      .details.splits,
    32,
  );
  refused(
    () => withTuning(wgmma, () => plan({ op: "sparse.dsa.decode", hq: 20 })),
    "UNSUPPORTED",
    /wgmma cannot serve this call: 20 query heads per KV head \(it takes multiples of 64\)/,
  );
  refused(
    () => withTuning(wgmma, () => explain({ gpu: "a100", op: "sparse.dsa.decode" })),
    "UNSUPPORTED",
    /wgmma cannot serve this call: it needs a Hopper GPU/,
  );
});

Deno.test("explain: the indexer takes wgmma for float8 on Hopper, the mma.sync block for bfloat16, else per item", () => {
  const plan = (q: Omit<PlanQuery, "gpu">) => explain({ gpu: "h200", ...q });
  assert.deepEqual(plan({ op: "sparse.indexer", dtype: "float8_e4m3" }).kernels.map((k) => k.name), [
    "sparse.indexer.wgmma<float8_e4m3, D128>",
  ]);
  assert.equal(plan({ op: "sparse.indexer" }).path, "mma");
  assert.equal(
    withTuning({ "sparse.indexer": "mma" }, () => plan({ op: "sparse.indexer", dtype: "float8_e4m3" })).path,
    "mma",
  );
  const item = plan({ op: "sparse.indexer", hq: 32 });
  assert.deepEqual(item.kernels.map((k) => k.name), ["sparse.indexer.item<bfloat16>"]);
  assert.equal(item.details.mma_ruled_out, "32 heads of 128 dims (it is built for 64 of 128)");
  assert.equal(plan({ op: "sparse.indexer", aligned: false }).path, "item");
  assert.equal(plan({ op: "sparse.indexer", dtype: "float8_e4m3", aligned: false }).path, "item");
  // Both tensor-core kernels are Hopper-only: an A100 takes the per-item kernel.
  const a100 = explain({ gpu: "a100", op: "sparse.indexer", dtype: "float8_e4m3" });
  assert.equal(a100.path, "item");
  assert.equal(a100.details.mma_ruled_out, "it needs a Hopper GPU (sm_90a)");
  refused(
    () => withTuning({ "sparse.indexer": "mma" }, () => explain({ gpu: "a100", op: "sparse.indexer" })),
    "UNSUPPORTED",
    /sparse\.indexer=mma cannot serve this call: it needs a Hopper GPU/,
  );
  refused(
    () => withTuning({ "sparse.indexer": "mma" }, () => plan({ op: "sparse.indexer", d: 64 })),
    "UNSUPPORTED",
    /sparse\.indexer=mma cannot serve this call: 64 heads of 64 dims/,
  );
  refused(
    () => withTuning({ "sparse.indexer": "wgmma" }, () => plan({ op: "sparse.indexer" })),
    "UNSUPPORTED",
    /sparse\.indexer=wgmma cannot serve this call: it takes float8_e4m3/,
  );
});

Deno.test("explain: NSA's branches take the tiled block where it serves, else the per-item kernels", () => {
  const plan = (q: Omit<PlanQuery, "gpu">) => explain({ gpu: "h200", ...q });
  // NSA's groups of 16: the tensor-core block; groups of 4: the CUDA-core one.
  const mma = plan({ op: "sparse.nsa.selection", hq: 64, hkv: 4, d: 128 });
  assert.deepEqual(mma.kernels.map((k) => k.name), ["sparse.nsa.selection.mma<bfloat16, D128>"]);
  const tiled = plan({ op: "sparse.nsa.selection", hq: 16, hkv: 4, d: 128 });
  assert.deepEqual(tiled.kernels.map((k) => k.name), ["sparse.nsa.selection.tiled<bfloat16, D128>"]);
  const item = plan({ op: "sparse.nsa.compression", hq: 64, hkv: 4, d: 128, v: 64 });
  assert.equal(item.path, "item");
  assert.equal(item.details.tiled_ruled_out, "it needs K = V");
  assert.equal(plan({ op: "sparse.nsa.selection", hq: 64, hkv: 1, d: 128 }).path, "item");
  refused(
    () =>
      withTuning(
        { "sparse.nsa.selection": "mma" },
        () => plan({ op: "sparse.nsa.selection", hq: 32, hkv: 1, d: 64 }),
      ),
    "UNSUPPORTED",
    /mma cannot serve this call: 32 query heads per KV head/,
  );
  assert.equal(plan({ op: "sparse.nsa.selection", dtype: "float32", d: 64 }).path, "item");
  assert.equal(
    withTuning({ "sparse.nsa.selection": "item" }, () => plan({ op: "sparse.nsa.selection" })).path,
    "item",
  );
  refused(
    () => withTuning({ "sparse.nsa.selection": "tiled" }, () => plan({ op: "sparse.nsa.selection", d: 96 })),
    "UNSUPPORTED",
    /tiled cannot serve this call: head dim 96/,
  );
});
