// Every kernel of the registries (csrc/*/registry.ts) on the GPU: each row is pinned through the
// tuning table, run on fresh random inputs into NaN-poisoned buffers, held to its float64 oracle with
// the tolerance of the test files (linear_fixtures.ts, attention_cases.ts), and the plan of the call
// must name that row. A row the present GPU cannot run (an sm_90a kernel elsewhere) is reported as
// ignored, as is every row without a GPU.
import { checkDense, type DenseCase } from "./attention_dense_cases.ts";
import assert from "node:assert/strict";
import { expandRows, type KernelRow, rowName } from "../build/registry.ts";
import { REGISTRIES } from "../build/registries.ts";
import {
  assertClose,
  chunkGatedDeltaRule,
  chunkGatedDeltaRuleBackward,
  DeepSeekSparseAttentionDecodeWithKVCacheFwdOp,
  type DType,
  FP8LightningIndexerFwdOp,
  GatedDeltaNetBTHDFwdOp,
  GatedDeltaNetDecodeFwdOp,
  GroupedQueryAttentionDecodePagedWithKVCacheFwdOp,
  kernels,
  lastPlan,
  nsaChunkOffsets,
  NSACmpFwdVarlenOp,
  NSAFwdVarlenOp,
  nsaTokenIndices,
  setTuning,
  Tensor,
  tuning,
  type TuningSpec,
  withTuning,
} from "../mod.ts";
import { type AttentionCase, checkBackward, checkForward } from "./attention_cases.ts";
import { expectNoLeak, HAS_CUDA, withSeed } from "./helpers.ts";
import {
  type CaseSpec,
  DeltaCase,
  expectAgree,
  expectClose,
  host,
  pathTolerance,
  poisoned,
  tol,
} from "./linear_fixtures.ts";
import { deltaRuleReference } from "../reference/delta_rule.ts";
import { glaExercise } from "./gla_variants.ts";
import { kdaExercise } from "./kda_variants.ts";
import { pagedDecodeExercise } from "./paged_decode_variants.ts";
import { pagedChunkCase } from "./paged_chunk_variants.ts";
import { checkTopk, type TopkCase } from "./sparse_fixtures.ts";

const DEVICE = "cuda";
const RUNNABLE = new Set(HAS_CUDA ? kernels(DEVICE).filter((k) => k.runnable).map((k) => k.name) : []);

/** Runs `call` with the tuning table set to `spec` and checks that the plan it records names `row`. */
function pinned<T>(row: KernelRow, spec: TuningSpec, call: () => T): T {
  return withTuning(spec, () => {
    const result = call();
    const plan = lastPlan();
    const ran = plan?.kernels.map((k) => k.name) ?? [];
    assert.ok(
      ran.includes(rowName(row)),
      `${rowName(row)} did not run; the plan was ${JSON.stringify(plan)}`,
    );
    return result;
  });
}

// ---- the linear family ----

function linearSpec(row: KernelRow, extra: Partial<CaseSpec> = {}): CaseSpec {
  const d = row.d || 48;
  return {
    B: 2,
    T: 150, // two full chunks and a tail
    H: 3,
    HK: 3,
    K: d,
    V: row.d || 40,
    dtype: row.dtype as DType,
    gated: true,
    l2norm: true,
    ...extra,
  };
}

/** The forward of a case against the oracle (output and final state), under a tuning spec. */
function forwardCase(row: KernelRow, spec: CaseSpec, tuning: TuningSpec, seed: number): void {
  using c = new DeltaCase(DEVICE, spec, seed);
  const out = c.forwardBuffers();
  pinned(
    row,
    tuning,
    () => chunkGatedDeltaRule(c.q, c.k, c.v, c.g!, c.beta, { ...c.options(), outputFinalState: true, out }),
  );
  const ref = c.reference();
  const t = tol(spec.dtype);
  const what = `${rowName(row)} ${JSON.stringify(tuning)} ${JSON.stringify(spec)}`;
  const rows = spec.cuSeqlens ? spec.cuSeqlens.at(-1)! * spec.H * spec.V : ref.output.length;
  expectClose(host(out.output).subarray(0, rows), ref.output.subarray(0, rows), t.output, `output (${what})`);
  expectClose(out.finalState, ref.finalState, t.state, `final state (${what})`);
}

/**
 * The backward of a case against the oracle, under a tuning spec. `saved`: from the states the
 * forward saved, the row checked in the forward's plan ("forward") or the backward's ("backward"),
 * twice from the same saves.
 */
function backwardCase(
  row: KernelRow,
  spec: CaseSpec,
  tuning: TuningSpec,
  seed: number,
  saved?: "forward" | "backward",
): void {
  using c = new DeltaCase(DEVICE, spec, seed);
  const { dOutput, dFinalState } = c.cotangents(seed);
  const forward = () =>
    chunkGatedDeltaRule(c.q, c.k, c.v, c.g!, c.beta, { ...c.options(), saveForBackward: true });
  using r = saved === "forward"
    ? pinned(row, tuning, forward)
    : saved
    ? withTuning(tuning, forward)
    : undefined;
  if (saved) assert.ok(r?.saved?.stored, `${rowName(row)}: the forward saved no states`);
  const ref = c.referenceBackward(dOutput, dFinalState);
  const t = tol(spec.dtype);
  // A backward reads the saves and leaves them as they were: a second one from the same saves, into
  // freshly poisoned buffers, must give the same gradients.
  for (let pass = 1; pass <= (saved ? 2 : 1); ++pass) {
    const out = c.backwardBuffers();
    const backward = () =>
      chunkGatedDeltaRuleBackward(dOutput, c.q, c.k, c.v, c.g!, c.beta, {
        ...c.options(),
        dFinalState,
        out,
        saved: r?.saved,
      });
    if (saved === "forward") withTuning(tuning, backward);
    else pinned(row, tuning, backward);
    const what = `${rowName(row)} ${JSON.stringify(tuning)}${saved ? ` saved, backward ${pass}` : ""} ${
      JSON.stringify(spec)
    }`;
    expectClose(out.dq, ref.dq, t.dqkv, `dq (${what})`);
    expectClose(out.dk, ref.dk, t.dqkv, `dk (${what})`);
    expectClose(out.dv, ref.dv, t.dqkv, `dv (${what})`);
    expectClose(out.dbeta, ref.dbeta, t.dsmall, `dbeta (${what})`);
    expectClose(out.dg!, ref.dg, t.dsmall, `dg (${what})`);
    expectClose(out.dInitialState!, ref.dInitialState, t.dsmall, `dInitialState (${what})`);
  }
}

const PACKED: Partial<CaseSpec> = { B: 1, T: 260, cuSeqlens: [0, 70, 70, 200, 201] };

function linearForwardState(row: KernelRow, seed: number): void {
  const pin = {
    "linear.fwd.path": "fast",
    "linear.fwd.state": row.variant,
    "linear.fwd.state.tile": row.tile,
  };
  forwardCase(row, linearSpec(row), pin, seed);
  forwardCase(row, linearSpec(row, { ...PACKED, HK: 1, l2norm: false }), pin, seed + 100);
  // The same kernel reading and writing a state pool's slots (the paged prefill).
  pagedChunkCase(row, linearSpec(row, { B: 3 }), pin, seed + 500);
  pagedChunkCase(row, linearSpec(row, { ...PACKED, HK: 1 }), pin, seed + 600);
  if (row.variant === "mma") return;
  // The Hopper kernels: the pass split into segments, the other loads, and the states they save.
  forwardCase(row, linearSpec(row, { T: 700 }), { ...pin, "linear.fwd.segments": 3 }, seed + 200);
  pagedChunkCase(row, linearSpec(row, { B: 3, T: 700 }), { ...pin, "linear.fwd.segments": 3 }, seed + 700);
  if (row.variant === "split") {
    forwardCase(row, linearSpec(row), { ...pin, "linear.fwd.loads": "cp.async" }, seed + 300);
  }
  backwardCase(row, linearSpec(row), pin, seed + 400, "forward");
}

function linearWyFactors(row: KernelRow, seed: number): void {
  // The general path's factors against the CPU backend's (itself held to the oracle's residuals in
  // linear_ops.test.ts).
  factorsAgainstCpu(row, seed, { "linear.fwd.path": "general" }, pathTolerance("float32"));
}

/** The fp32 WY factors Aw, Au of a forward with `pin` (which must run the row) against the CPU backend's. */
function factorsAgainstCpu(row: KernelRow, seed: number, pin: TuningSpec, relRms: number): void {
  const spec = linearSpec(row, { B: 1, initialState: false });
  const factors = (device: "cpu" | "cuda") => {
    using c = new DeltaCase(device, spec, seed);
    const { B, T, H, V } = spec;
    const out = {
      output: c.own(poisoned([B, T, H, V], spec.dtype, device)),
      chunkStates: c.own(poisoned([B, H, Math.ceil(T / 64) + 1, spec.K, V], "float32", device)),
      aw: c.own(poisoned([B, H, T, 64], "float32", device)),
      au: c.own(poisoned([B, H, T, 64], "float32", device)),
    };
    const run = () =>
      new GatedDeltaNetBTHDFwdOp({ useQkL2norm: true }).forward(c.q, c.k, c.v, c.g!, c.beta, out);
    if (device === "cuda") pinned(row, pin, run);
    else run();
    return { aw: host(out.aw), au: host(out.au) };
  };
  const gpu = factors("cuda"), cpu = factors("cpu");
  expectAgree(gpu.aw, cpu.aw, relRms, `${rowName(row)} aw`);
  expectAgree(gpu.au, cpu.au, relRms, `${rowName(row)} au`);
}

function linearForwardPrep(row: KernelRow, seed: number): void {
  const pin = { "linear.fwd.path": "fast", "linear.fwd.prep": row.variant };
  forwardCase(row, linearSpec(row), pin, seed);
  // Packed sequences (chunks cut short, an empty sequence), without the L2 norm.
  forwardCase(row, linearSpec(row, { ...PACKED, HK: 1, l2norm: false }), pin, seed + 100);
  // The factors' fp32 outputs: K K^T summed in another order than the CPU's, so held to 1e-3, which
  // still catches any misplaced element.
  factorsAgainstCpu(row, seed + 200, pin, 1e-3);
  // A and w saved for the backward (the Hopper rows: their state kernels save).
  if (row.variant === "wgmma") backwardCase(row, linearSpec(row), pin, seed + 400, "forward");
}

function linearDecode(row: KernelRow, seed: number): void {
  const states: DType[] = row.dtype === "float32" ? ["float32"] : ["float32", row.dtype as DType];
  for (const stateDtype of states) {
    // K from the row (the tile kernel's), V 96: whole and partial column slices.
    const spec = linearSpec(row, { T: 1, K: row.d || 64, V: 96 });
    using c = new DeltaCase(DEVICE, spec, seed);
    const { B, H, K, V } = spec;
    const squeeze = (t: Tensor, shape: number[]) => c.own(t.reshape(shape));
    const state = c.own(c.initialState!.cast(stateDtype));
    const output = c.own(poisoned([B, H, V], spec.dtype, DEVICE));
    const r = pinned(
      row,
      { "linear.decode": row.variant },
      () =>
        new GatedDeltaNetDecodeFwdOp({ useQkL2norm: true }).forward(
          squeeze(c.q, [B, H, K]),
          squeeze(c.k, [B, H, K]),
          squeeze(c.v, [B, H, V]),
          squeeze(c.g!, [B, H]),
          squeeze(c.beta, [B, H]),
          state,
          { output },
        ),
    );
    c.own(r.newState);
    const ref = deltaRuleReference(c.hostInputs);
    const t = stateDtype === "float32" ? tol(spec.dtype).state : tol(stateDtype).state;
    expectClose(output, ref.output, tol(spec.dtype).output, `${rowName(row)} output (${stateDtype} state)`);
    expectClose(r.newState, ref.finalState, 2 * t, `${rowName(row)} state (${stateDtype} state)`);
  }
}

function linearBackward(row: KernelRow, seed: number): void {
  const pin: Record<string, string | number> = { "linear.bwd.path": "fast" };
  if (row.stage === "linear.bwd.states" || row.stage === "linear.bwd.dstates") {
    pin[`${row.stage}.tile`] = row.tile;
  }
  if (row.stage === "linear.bwd.dstates") pin["linear.bwd.dstates"] = row.variant;
  if (row.stage === "linear.bwd.grads") pin["linear.bwd.grads"] = row.variant;
  if (row.stage === "linear.bwd.general") {
    const spec = linearSpec(row, { K: 48, V: 40 });
    backwardCase(row, spec, { "linear.bwd.path": "general" }, seed);
    backwardCase(
      row,
      linearSpec(row, { ...PACKED, HK: 1, K: 32, V: 32 }),
      { "linear.bwd.path": "general" },
      seed + 1,
    );
    return;
  }
  backwardCase(row, linearSpec(row), pin, seed);
  backwardCase(row, linearSpec(row, { ...PACKED, HK: 1, l2norm: false }), pin, seed + 100);
  // From the states a Hopper forward saved (prep then computes gc and P only; no states stage).
  const hopper = kernels(DEVICE).some((k) => k.runnable && k.arch === "sm90a");
  if (hopper && (row.d === 128 || row.d === 256) && row.stage !== "linear.bwd.states") {
    backwardCase(row, linearSpec(row), pin, seed + 200, "backward");
  }
}

// ---- the attention family ----

function attentionCases(row: KernelRow): AttentionCase[] {
  const dtype = row.dtype as "float16" | "bfloat16";
  // The general kernels are built per head-dim bucket: a head dim below the bucket is padded.
  const dims = row.variant === "general" ? [row.d, row.d - 24] : [row.d];
  return dims.flatMap((dim) => [
    { dtype, heads: 6, headsKv: 2, dim, batch: 2, seqQ: 200, seqKv: 200, causal: true },
    { dtype, heads: 3, headsKv: 3, dim, lengthsQ: [0, 130, 33], lengthsKv: [40, 130, 77], windowLeft: 50 },
  ]);
}

async function attentionForward(row: KernelRow, seed: number): Promise<void> {
  if (row.dtype === "float8_e4m3") {
    // The 8-bit forward through the dense op (float8 inputs with scales), several tiles, GQA, causal.
    const c: DenseCase = {
      input: "float8_e4m3",
      dtype: "bfloat16",
      layout: "bshd",
      B: 2,
      Sq: 200,
      Skv: 260,
      H: 6,
      Hkv: 2,
      D: row.d,
      causal: true,
    };
    return await withTuningAsync({ "attention.fwd": row.variant }, () => {
      checkDense(DEVICE, c, seed);
      return Promise.resolve();
    }, row);
  }
  for (const c of attentionCases(row)) {
    await withTuningAsync({ "attention.fwd": row.variant }, () => checkForward(DEVICE, c, seed), row);
  }
}

async function attentionBackward(row: KernelRow, seed: number): Promise<void> {
  for (const c of attentionCases(row)) {
    await withTuningAsync({ "attention.bwd": row.variant }, () => checkBackward(DEVICE, c, seed), row);
  }
}

// checkForward / checkBackward are async only through their leak check: the tuning stays set across.
async function withTuningAsync(spec: TuningSpec, fn: () => Promise<void>, row: KernelRow): Promise<void> {
  const previous = tuning().current;
  setTuning(spec);
  try {
    await fn();
    const ran = lastPlan()?.kernels.map((k) => k.name) ?? [];
    // The forward's plan when checking a forward; the backward's last when checking a backward.
    assert.ok(ran.includes(rowName(row)), `${rowName(row)} did not run: ${JSON.stringify(lastPlan())}`);
  } finally {
    setTuning(previous);
  }
}

// The split-key decode at the row's dtype and head dim, paged with a cache long enough to split, against the
// same call on the CPU backend (which runs the same block's phases, under the same pin, and is held to the
// float64 oracle in tests/attention_decode.test.ts). Query rows per KV head: 8 for the tensor-core blocks, 4
// for the others.
function attentionDecodeExercise(row: KernelRow, seed: number): void {
  const dtype = row.dtype as "float16" | "bfloat16", D = row.d, Hkv = 2, pageSize = 64, B = 3;
  const H = row.variant === "mma" || row.variant === "pipe" ? 16 : 8;
  const lengths = [1500, 65, 0];
  const pages = Math.ceil(1500 / pageSize) + 2, maxPages = pages;
  const table = Int32Array.from({ length: B * maxPages }, (_, i) => (i * 7) % (B * maxPages));
  const run = (device: "cuda" | "cpu") => {
    const op = new GroupedQueryAttentionDecodePagedWithKVCacheFwdOp({
      batch: B,
      heads: H,
      headsKv: Hkv,
      seqlenKv: B * maxPages * pageSize,
      dim: D,
      pageSize,
      softcap: 30,
    });
    using q = Tensor.randn([B, H, D], { dtype, device, seed });
    using k = Tensor.randn([B * maxPages * pageSize, Hkv, D], { dtype, device, seed: seed + 1 });
    using v = Tensor.randn([B * maxPages * pageSize, Hkv, D], { dtype, device, seed: seed + 2 });
    using lens = Tensor.from(lengths, { dtype: "int32", device });
    using blocks = Tensor.from(table, { shape: [B, maxPages], device });
    using o = op.forward(q, k, v, lens, blocks);
    return o.toArray() as Float32Array;
  };
  const previous = tuning().current;
  setTuning({ "attention.decode": row.variant });
  try {
    const got = run("cuda");
    const ran = lastPlan()?.kernels.map((k) => k.name) ?? [];
    assert.ok(ran.includes(rowName(row)), `${rowName(row)} did not run: ${JSON.stringify(lastPlan())}`);
    assertClose(got, run("cpu"), { relRms: dtype === "bfloat16" ? 1e-2 : 2e-3, name: rowName(row) });
  } finally {
    setTuning(previous);
  }
}

// The row's kernel pinned on CUDA (and seen to run), its outputs against the same call on the CPU backend.
function pinnedAgainstCpu(
  row: KernelRow,
  dtype: string,
  run: (device: "cuda" | "cpu") => Float32Array,
): void {
  const got = withTuning({ [row.stage]: row.variant }, () => run("cuda"));
  const ran = lastPlan()?.kernels.map((k) => k.name) ?? [];
  assert.ok(ran.includes(rowName(row)), `${rowName(row)} did not run: ${JSON.stringify(lastPlan())}`);
  const tol = dtype === "float32" ? 1e-5 : dtype === "bfloat16" ? 1e-2 : 2e-3;
  assertClose(got, run("cpu"), { relRms: tol, name: rowName(row) });
}

// NSA's block selection with the row's kernel pinned, held to the float64 oracle's importance (the checks of
// tests/sparse_nsa.test.ts): two packed sequences over several 32-block steps, 16 heads in groups of 8.
function topkExercise(row: KernelRow, seed: number): void {
  const dtype = row.dtype as "float32" | "float16" | "bfloat16";
  const c: TopkCase = {
    lengths: [400, 77],
    heads: 16,
    group: 8,
    dim: row.d || 32,
    bs: 8,
    selected: 12,
    dtype,
    out: true,
  };
  checkTopk(DEVICE, c, seed, { [row.stage]: row.variant });
  const ran = lastPlan()?.kernels.map((k) => k.name) ?? [];
  assert.ok(ran.includes(rowName(row)), `${rowName(row)} did not run: ${JSON.stringify(lastPlan())}`);
}

// An NSA branch with the row's kernel pinned, against the same call on the CPU backend (held to the float64
// oracle in tests/sparse_nsa.test.ts): three packed sequences, 8 heads in groups of 4.
function nsaExercise(row: KernelRow, seed: number): void {
  const dtype = row.dtype as "float32" | "float16" | "bfloat16", D = row.d || 32, bs = 16, H = 8, G = 4;
  const offsets = [0, 150, 151, 230];
  const T = offsets[3];
  const run = (device: "cuda" | "cpu") => {
    using tokens = nsaTokenIndices(offsets, { device }), chunks = nsaChunkOffsets(offsets, bs, { device });
    const C = (chunks.toArray() as Int32Array)[3];
    using q = Tensor.randn([T, H, D], { dtype, device, seed });
    using k = Tensor.randn([T, H / G, D], { dtype, device, seed: seed + 1 });
    using v = Tensor.randn([T, H / G, D], { dtype, device, seed: seed + 2 });
    using kCmp = Tensor.randn([C, H / G, D], { dtype, device, seed: seed + 3 });
    using vCmp = Tensor.randn([C, H / G, D], { dtype, device, seed: seed + 4 });
    const sizes = { seqNum: 3, cSeqLen: T, heads: H, group: G, chunkNum: C, bs };
    if (row.stage === "sparse.nsa.compression") {
      using r = new NSACmpFwdVarlenOp({ ...sizes, dimK: D, dimV: D }).forward(
        q,
        kCmp,
        vCmp,
        offsets,
        chunks,
        tokens,
      );
      return r.output.toArray() as Float32Array;
    }
    const list = Int32Array.from({ length: T * (H / G) * 3 }, (_, i) => [0, -1, 2, 5, 1, 3][i % 6]);
    using blocks = Tensor.from(list, { shape: [T, H / G, 3], device });
    const op = new NSAFwdVarlenOp({
      batch: 3,
      heads: H,
      cSeqLen: T,
      dim: D,
      blockSize: bs,
      groups: G,
      selectedBlocks: 3,
      checkIndices: false,
    });
    using o = op.forward(q, k, v, blocks, undefined, offsets, tokens);
    return o.toArray() as Float32Array;
  };
  pinnedAgainstCpu(row, dtype, run);
}

// DSA decode with the row's kernel pinned, against the same call on the CPU backend (held to the float64
// oracle in tests/sparse_dsa_indexer.test.ts): DeepSeek's 512 + 64 columns (the shape the tensor-core row is
// built for), 20 heads (a group of 16 and one of 4), 96 listed rows with padding.
function dsaExercise(row: KernelRow, seed: number): void {
  const dtype = row.dtype as "float32" | "float16" | "bfloat16";
  // The Hopper kernel takes groups of a multiple of 64 heads: 128 (two of its blocks' head tiles).
  const heads = row.variant === "wgmma" ? 128 : 20;
  const sizes = {
    batch: 2,
    heads,
    seqLen: 2,
    seqLenKv: 150,
    dim: 512,
    dimTail: 64,
    topk: 96,
    qStartIndexS: 120,
    checkIndices: false,
  };
  const list = Int32Array.from({ length: 2 * 2 * 96 }, (_, i) => i % 7 === 3 ? -1 : (i * 37) % 150);
  const run = (device: "cuda" | "cpu") => {
    using q = Tensor.randn([2, 2, heads, 576], { dtype, device, seed });
    using kv = Tensor.randn([2, 150, 1, 576], { dtype, device, seed: seed + 1 });
    using indices = Tensor.from(list, { shape: [2, 2, 1, 96], device });
    using o = new DeepSeekSparseAttentionDecodeWithKVCacheFwdOp(sizes).forward(q, kv, indices);
    return o.toArray() as Float32Array;
  };
  pinnedAgainstCpu(row, dtype, run);
}

// The lightning indexer with the row's kernel pinned, against the same call on the CPU backend (held to the
// float64 oracle in tests/sparse_dsa_indexer.test.ts): 64 heads of 128 dims (the tensor-core row's shape),
// 5 queries (a pair with one query), 600 keys (two chunks of 512, a partial tile), key scales, empty and
// partial ranges. Agreement: relRms 1e-3 (float8 sums on the tensor cores keep about 14 bits).
function indexerExercise(row: KernelRow, seed: number): void {
  const dtype = row.dtype as "bfloat16" | "float8_e4m3", Sq = 5, Sk = 600;
  const ks = Int32Array.from([0, 10, 300, 599, 0]), ke = Int32Array.from([600, 10, 560, 600, 64]);
  const run = (device: "cuda" | "cpu") => {
    using qWide = Tensor.randn([Sq, 64, 128], { device, seed });
    using kWide = Tensor.randn([Sk, 128], { device, seed: seed + 1 });
    using q = qWide.cast(dtype);
    using k = kWide.cast(dtype);
    using w = Tensor.randn([Sq, 64], { device, seed: seed + 2 });
    using scale = Tensor.rand([Sk], { device, seed: seed + 3, low: 0.5, high: 2 });
    using lo = Tensor.from(ks, { device });
    using hi = Tensor.from(ke, { device });
    using logits = new FP8LightningIndexerFwdOp().forward(q, k, w, lo, hi, scale);
    return Float32Array.from(logits.toArray() as Float32Array, (x) => (Number.isFinite(x) ? x : 0));
  };
  const got = withTuning({ [row.stage]: row.variant }, () => run("cuda"));
  const ran = lastPlan()?.kernels.map((k) => k.name) ?? [];
  assert.ok(ran.includes(rowName(row)), `${rowName(row)} did not run: ${JSON.stringify(lastPlan())}`);
  assertClose(got, run("cpu"), { relRms: 1e-3, name: rowName(row) });
}

// ---- one test a row ----

function exercise(row: KernelRow, seed: number): void | Promise<void> {
  switch (row.stage) {
    case "linear.fwd.prep":
      return linearForwardPrep(row, seed);
    case "linear.fwd.state":
      return linearForwardState(row, seed);
    case "linear.fwd.recurrent":
      forwardCase(row, linearSpec(row), { "linear.fwd.path": "general" }, seed);
      return forwardCase(
        row,
        linearSpec(row, { ...PACKED, HK: 1 }),
        { "linear.fwd.path": "general" },
        seed + 1,
      );
    case "linear.fwd.wy":
      return linearWyFactors(row, seed);
    case "linear.decode":
      return linearDecode(row, seed);
    case "attention.fwd":
      return attentionForward(row, seed);
    case "attention.bwd":
      return attentionBackward(row, seed);
    case "attention.decode":
      return attentionDecodeExercise(row, seed);
    case "sparse.nsa.compression":
    case "sparse.nsa.selection":
      return nsaExercise(row, seed);
    case "sparse.nsa.topk":
      return topkExercise(row, seed);
    case "sparse.dsa.decode":
      return dsaExercise(row, seed);
    case "sparse.indexer":
      return indexerExercise(row, seed);
    case "linear.paged_decode":
      return pagedDecodeExercise(row, seed);
    default:
      if (row.stage.startsWith("linear.bwd.")) return linearBackward(row, seed);
      if (row.stage.startsWith("linear.gla.")) return glaExercise(row, seed);
      if (row.stage.startsWith("linear.kda.")) return kdaExercise(row, seed);
      throw new Error(`no exercise for stage ${row.stage}`);
  }
}

for (const row of expandRows(REGISTRIES)) {
  const name = rowName(row);
  const ignore = !RUNNABLE.has(name);
  const why = !HAS_CUDA ? " (no GPU: skipped)" : ignore ? " (not built for this GPU: skipped)" : "";
  Deno.test({
    name: `variant ${name} [cuda]${why}`,
    ignore,
    fn: () => expectNoLeak(DEVICE, () => withSeed((seed) => exercise(row, seed))),
  });
}
