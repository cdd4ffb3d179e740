// Bad input to the delta-rule functions, ops and C entries: every argument kind is refused with an
// AttnkitError (INVALID_ARGUMENT) that names the argument; nothing leaks after successful calls,
// dispose, or errors thrown after the op allocated its results and temporaries.
import assert from "node:assert/strict";
import { encodeDescriptor } from "../ffi/descriptor.ts";
import { native, unwrap } from "../ffi/library.ts";
import { DeltaFlags } from "../ffi/symbols_linear.ts";
import {
  AttnkitError,
  chunkDeltaRule,
  type ChunkDeltaRuleOptions,
  chunkGatedDeltaRule,
  chunkGatedDeltaRuleBackward,
  DeltaNetBwdOp,
  DeltaNetDecodeFwdOp,
  DeltaNetFwdOp,
  DeltaNetOp,
  type DeltaRuleBackwardOptions,
  type Device,
  type DType,
  GatedDeltaNetBHTDFwdOp,
  GatedDeltaNetBwdOp,
  GatedDeltaNetDecodeFwdOp,
  GatedDeltaNetOp,
  GatedDeltaNetPrefillBTHDFwdOp,
  recurrentGatedDeltaRule,
  Tensor,
} from "../mod.ts";
import { deviceTest, expectNoLeak, HAS_CUDA } from "./helpers.ts";

const BSHD = { layout: "bshd" } as const;
const BHSD = { layout: "bhsd" } as const;

/** Asserts fn throws an INVALID_ARGUMENT AttnkitError whose message matches `pattern`. */
function refuses(fn: () => unknown, pattern: RegExp, what = pattern.source): void {
  assert.throws(fn, (e: unknown) => {
    if (!(e instanceof AttnkitError)) throw new Error(`${what}: threw ${e} instead of an AttnkitError`);
    if (e.code !== "INVALID_ARGUMENT") throw new Error(`${what}: code ${e.code} (${e.message})`);
    if (!pattern.test(e.message)) {
      throw new Error(`${what}: message "${e.message}" does not match ${pattern}`);
    }
    return true;
  });
}

/** Valid inputs of a small gated problem (BTHD), and a disposer. */
function inputs(device: Device, dtype: DType = "bfloat16") {
  const made: Tensor[] = [];
  const t = (x: Tensor) => (made.push(x), x);
  const x = {
    q: t(Tensor.randn([1, 12, 2, 16], { dtype, device, seed: 1 })),
    k: t(Tensor.randn([1, 12, 2, 16], { dtype, device, seed: 2, std: 0.25 })),
    v: t(Tensor.randn([1, 12, 4, 8], { dtype, device, seed: 3 })),
    g: t(Tensor.rand([1, 12, 4], { device, seed: 4, low: -0.3, high: 0 })),
    beta: t(Tensor.rand([1, 12, 4], { device, seed: 5 })),
    dO: t(Tensor.randn([1, 12, 4, 8], { dtype, device, seed: 6 })),
    make: t,
    [Symbol.dispose]() {
      for (const m of made) m.dispose();
    },
  };
  return x;
}

deviceTest("delta rule functions refuse bad tensors, naming the argument", (device) => {
  using x = inputs(device);
  const { q, k, v, g, beta } = x;
  const f = (over: Partial<Record<"q" | "k" | "v" | "g" | "beta", unknown>>, options: object = BSHD) => {
    const pick = (name: keyof typeof over, fallback: Tensor) =>
      (name in over ? over[name] : fallback) as Tensor;
    return () =>
      chunkGatedDeltaRule(
        pick("q", q),
        pick("k", k),
        pick("v", v),
        pick("g", g),
        pick("beta", beta),
        options as ChunkDeltaRuleOptions,
      );
  };
  refuses(f({ q: null }), /q: expected a Tensor/);
  refuses(
    f({ q: x.make(Tensor.zeros([1, 12, 2, 16], { dtype: "float64", device })) }),
    /q: expected dtype float16 \| bfloat16 \| float32/,
  );
  refuses(
    f({ k: x.make(Tensor.zeros([1, 12, 2, 16], { dtype: "float32", device })) }),
    /k: expected dtype bfloat16 \(same as q\)/,
  );
  refuses(f({ k: x.make(Tensor.zeros([1, 12, 1, 16], { dtype: "bfloat16", device })) }), /k: expected shape/);
  refuses(f({ v: x.make(Tensor.zeros([1, 11, 4, 8], { dtype: "bfloat16", device })) }), /v: expected shape/);
  refuses(
    f({
      q: x.make(Tensor.zeros([1, 12, 3, 16], { dtype: "bfloat16", device })),
      k: x.make(Tensor.zeros([1, 12, 3, 16], { dtype: "bfloat16", device })),
    }),
    /v: its 4 value heads must be a positive multiple of the 3 query\/key heads of q/,
  );
  refuses(
    f({ v: x.make(Tensor.zeros([1, 12, 4, 300], { dtype: "bfloat16", device })) }),
    /v: head dimension V must be in 1\.\.256/,
  );
  refuses(
    f({
      q: x.make(Tensor.zeros([1, 12, 2, 257], { dtype: "bfloat16", device })),
      k: x.make(Tensor.zeros([1, 12, 2, 257], { dtype: "bfloat16", device })),
    }),
    /q: head dimension K must be in 1\.\.256/,
  );
  refuses(
    f({ beta: x.make(Tensor.zeros([1, 12, 2], { device })) }),
    /beta: expected shape.*\(layout "bshd" reads/,
  );
  refuses(f({ beta: x.make(Tensor.zeros([1, 12, 4], { dtype: "int32", device })) }), /beta: expected dtype/);
  refuses(f({ g: undefined }), /g: expected a Tensor/);
  refuses(f({ g: x.make(Tensor.zeros([1, 12, 4, 1], { device })) }), /g: expected shape/);
  refuses(f({ g: x.make(Tensor.zeros([1, 12, 4], { dtype: "bool", device })) }), /g: expected dtype/);
  const disposed = Tensor.zeros([1, 12, 4], { device });
  disposed.dispose();
  refuses(f({ beta: disposed }), /beta: the tensor was disposed/);
});

deviceTest("delta rule functions refuse bad options, packed offsets, states and buffers", (device) => {
  using x = inputs(device);
  const { q, k, v, g, beta, dO } = x;
  const run = (options: object) => () =>
    chunkGatedDeltaRule(q, k, v, g, beta, { ...BSHD, ...options } as ChunkDeltaRuleOptions);
  refuses(
    () => chunkGatedDeltaRule(q, k, v, g, beta, null as unknown as ChunkDeltaRuleOptions),
    /options: expected an object/,
  );
  refuses(run({ chunkSize: 48 }), /chunkSize: expected 32, 64, 128, got 48/);
  refuses(
    () => recurrentGatedDeltaRule(q, k, v, g, beta, { ...BSHD, chunkSize: 64 } as ChunkDeltaRuleOptions),
    /chunkSize: the recurrent form/,
  );
  refuses(run({ scale: NaN }), /scale: expected a finite number/);
  const cu = (values: number[], dtype: DType = "int32") =>
    x.make(Tensor.from(Float64Array.from(values), { dtype, device }));
  refuses(run({ cuSeqlens: cu([0, 12], "float32") }), /cuSeqlens: expected dtype int32 \| int64/);
  refuses(run({ cuSeqlens: cu([0]) }), /cuSeqlens: expected shape \[N \+ 1\] with N >= 1/);
  refuses(
    run({ cuSeqlens: [0] }),
    /cuSeqlens: expected shape \[N \+ 1\] with N >= 1 sequences, got 1 offsets/,
  );
  refuses(run({ cuSeqlens: [0, 1.5, 12] }), /cuSeqlens: expected non-negative int32 offsets/);
  refuses(
    run({ cuSeqlens: new BigInt64Array([0n, 2n ** 40n]) }),
    /cuSeqlens: expected non-negative int32 offsets/,
  );
  refuses(run({ cuSeqlens: "0,12" }), /cuSeqlens: expected offsets as a number\[\]/);
  refuses(run({ cuSeqlens: [0, 13] }), /cu_seqlens: the last offset 13 exceeds the 12 tokens of q/);
  refuses(run({ cuSeqlens: cu([1, 12]) }), /cu_seqlens: must start at 0, got 1/);
  refuses(run({ cuSeqlens: cu([0, 8, 5, 12]) }), /cu_seqlens: must be nondecreasing/);
  refuses(run({ cuSeqlens: cu([0, 13]) }), /cu_seqlens: the last offset 13 exceeds the 12 tokens of q/);
  refuses(
    run({
      cuSeqlens: cu([0, 6, 12], "int64"),
      initialState: x.make(Tensor.zeros([1, 4, 16, 8], { device })),
    }),
    /initialState: expected shape \[2, 4, 16, 8\]/,
  );
  refuses(
    run({ initialState: x.make(Tensor.zeros([1, 4, 16, 8], { dtype: "bfloat16", device })) }),
    /initialState: expected dtype float32/,
  );
  refuses(
    run({ initialState: x.make(Tensor.zeros([1, 4, 8, 16], { device })) }),
    /initialState: expected shape/,
  );
  refuses(
    run({ out: { output: x.make(Tensor.zeros([1, 12, 4, 8], { device })) } }),
    /out.output: expected dtype bfloat16, got float32/,
  );
  refuses(
    run({ out: { finalState: x.make(Tensor.zeros([1, 4, 16, 9], { device })) } }),
    /out.finalState: expected shape/,
  );
  {
    using q2 = Tensor.randn([2, 12, 2, 16], { dtype: "bfloat16", device });
    using k2 = Tensor.randn([2, 12, 2, 16], { dtype: "bfloat16", device });
    using v2 = Tensor.randn([2, 12, 4, 8], { dtype: "bfloat16", device });
    using g2 = Tensor.zeros([2, 12, 4], { device });
    using b2 = Tensor.zeros([2, 12, 4], { device });
    refuses(
      () => chunkGatedDeltaRule(q2, k2, v2, g2, b2, { ...BSHD, cuSeqlens: cu([0, 12]) }),
      /q: packed input \(cuSeqlens given\) needs batch size 1, got 2/,
    );
  }
  const back = (dOutput: Tensor, options: object = {}) => () =>
    chunkGatedDeltaRuleBackward(
      dOutput,
      q,
      k,
      v,
      g,
      beta,
      { ...BSHD, ...options } as DeltaRuleBackwardOptions,
    );
  refuses(
    back(x.make(Tensor.zeros([1, 12, 4, 8], { device }))),
    /dOutput: expected dtype bfloat16 \(same as q\)/,
  );
  refuses(
    back(x.make(Tensor.zeros([1, 12, 4, 9], { dtype: "bfloat16", device }))),
    /dOutput: expected shape/,
  );
  refuses(
    back(dO, { dFinalState: x.make(Tensor.zeros([1, 4, 16, 16], { device })) }),
    /dFinalState: expected shape/,
  );
  refuses(
    back(dO, { out: { dq: x.make(Tensor.zeros([1, 12, 4, 16], { dtype: "bfloat16", device })) } }),
    /out.dq: expected shape/,
  );
  refuses(
    back(dO, { out: { dbeta: x.make(Tensor.zeros([1, 12, 4], { dtype: "bfloat16", device })) } }),
    /out.dbeta: expected dtype float32/,
  );
  refuses(
    back(dO, { out: { dg: x.make(Tensor.zeros([1, 12, 4], { dtype: "float16", device })) } }),
    /out.dg: expected dtype float32/,
  );
  refuses(() => chunkDeltaRule(q, k, v, beta, { ...BSHD, out: { output: q } }), /out.output: expected shape/);
});

deviceTest("delta rule op classes refuse bad options and inputs", (device) => {
  using x = inputs(device);
  const { q, k, v, g, beta } = x;
  refuses(
    () => new DeltaNetFwdOp({ ...BHSD, chunkSize: 100 }),
    /DeltaNetFwdOp: chunkSize: expected 32, 64, 128/,
  );
  refuses(
    () => new GatedDeltaNetOp({ ...BHSD, scale: "big" as unknown as number }),
    /scale: expected a finite number/,
  );
  refuses(
    () => new GatedDeltaNetBHTDFwdOp({ useQkL2norm: 1 as unknown as boolean }),
    /useQkL2norm: expected a boolean/,
  );
  refuses(
    () => new GatedDeltaNetDecodeFwdOp({ inPlace: "yes" as unknown as boolean }),
    /inPlace: expected a boolean/,
  );
  refuses(() => new GatedDeltaNetPrefillBTHDFwdOp({ chunkSize: 16 }), /chunkSize: expected 32, 64, 128/);
  refuses(() => new GatedDeltaNetOp(BHSD).backward(x.dO), /GatedDeltaNetOp: backward: call forward first/);
  refuses(() => new DeltaNetOp(BHSD).forward(q, k, v, g), /DeltaNetOp: v: expected shape/);
  // BHTD ops read [B, H, T, D]: the BTHD tensors here have the wrong v.
  refuses(
    () => new GatedDeltaNetBHTDFwdOp().forward(q, k, v, g, beta),
    /v: expected shape|beta: expected shape/,
  );
  {
    using qh = q.permute([0, 2, 1, 3]);
    using kh = k.permute([0, 2, 1, 3]);
    using vh = v.permute([0, 2, 1, 3]);
    using gh = g.permute([0, 2, 1]);
    using bh = beta.permute([0, 2, 1]);
    using dOh = x.dO.permute([0, 2, 1, 3]);
    using S = Tensor.zeros([1, 4, 3, 16, 8], { device }); // 12 tokens in chunks of 64 need 2 entries
    refuses(
      () => new GatedDeltaNetBwdOp(BHSD).backward(dOh, qh, kh, vh, gh, bh, S),
      /S: expected shape \[1, 4, 2, 16, 8\]/,
    );
    refuses(() => new DeltaNetBwdOp(BHSD).backward(dOh, qh, kh, vh, bh, x.dO), /S: expected dtype float32/);
  }
  const step = {
    q: x.make(Tensor.randn([3, 2, 16], { dtype: "bfloat16", device })),
    k: x.make(Tensor.randn([3, 2, 16], { dtype: "bfloat16", device })),
    v: x.make(Tensor.randn([3, 4, 8], { dtype: "bfloat16", device })),
    g: x.make(Tensor.zeros([3, 4], { device })),
    beta: x.make(Tensor.zeros([3, 4], { device })),
  };
  const decode = new GatedDeltaNetDecodeFwdOp();
  // The step above from a bad state.
  const fromState = (state: Tensor) => () => decode.forward(step.q, step.k, step.v, step.g, step.beta, state);
  refuses(
    fromState(x.make(Tensor.zeros([3, 4, 16, 16], { device }))),
    /state: expected shape \[3, 4, 16, 8\]/,
  );
  refuses(
    fromState(x.make(Tensor.zeros([3, 4, 16, 8], { dtype: "float16", device }))),
    /state: expected dtype float32 or bfloat16/,
  );
  refuses(
    () => decode.forward(step.q, step.k, step.v, undefined as unknown as Tensor, step.beta, step.g),
    /g: expected a Tensor/,
  );
  refuses(
    () => new DeltaNetDecodeFwdOp().forward(step.q, step.k, step.v, step.v, step.g),
    /beta: expected shape \[B=3, H=4\]/,
  );
  refuses(
    () =>
      new GatedDeltaNetDecodeFwdOp({ inPlace: true }).forward(
        step.q,
        step.k,
        step.v,
        step.g,
        step.beta,
        x.make(Tensor.zeros([3, 4, 16, 8], { device })),
        {
          newState: x.make(Tensor.zeros([3, 4, 16, 8], { device })),
        },
      ),
    /out.newState: not used in place/,
  );
});

// Descriptors the TS layer would never make, straight to the C entries.
deviceTest(
  "delta rule C entries validate what they are given (layouts, flags, chunk outputs, overlap)",
  (device) => {
    using x = inputs(device, "float32");
    const { q, k, v, g, beta } = x;
    const N = null;
    using out = Tensor.empty([1, 12, 4, 8], { device });
    const fwd = (over: Record<string, Uint8Array<ArrayBuffer> | null | number>) => () =>
      unwrap(
        native().ak_delta_rule_fwd(
          (("q" in over) ? over.q : q.descriptor()) as Uint8Array<ArrayBuffer> | null,
          k.descriptor(),
          v.descriptor(),
          (("g" in over) ? over.g : g.descriptor()) as Uint8Array<ArrayBuffer> | null,
          beta.descriptor(),
          N,
          (over.cu ?? N) as Uint8Array<ArrayBuffer> | null,
          0.25,
          (over.chunk ?? 64) as number,
          (over.flags ?? DeltaFlags.GATED) as number,
          out.descriptor(),
          N,
          (over.states ?? N) as Uint8Array<ArrayBuffer> | null,
          (over.aw ?? N) as Uint8Array<ArrayBuffer> | null,
          N,
          (over.saved ?? N) as Uint8Array<ArrayBuffer> | null,
          (over.written ?? N) as Uint8Array<ArrayBuffer> | null,
        ),
      );
    fwd({})(); // the valid call works
    refuses(fwd({ q: null }), /q: expected a tensor, got none/);
    refuses(
      fwd({ q: q.viewDescriptor([1, 12, 2, 8], [384, 32, 16, 2]) }),
      /q: the last dimension must be contiguous/,
    );
    refuses(
      fwd({ q: q.viewDescriptor([1, 12, 2, 16], [384, -32, 16, 1]) }),
      /q: strides must be non-negative/,
    );
    refuses(fwd({ flags: 8 | DeltaFlags.GATED }), /flags: unknown bits/);
    refuses(fwd({ flags: 0 }), /g: given, but flags lack AK_DELTA_GATED/);
    refuses(fwd({ g: null }), /g: expected a tensor \[B, T, H\] because flags include AK_DELTA_GATED/);
    refuses(fwd({ chunk: 48 }), /chunk_size: expected 32, 64 or 128, got 48/);
    using cu = Tensor.from(Int32Array.from([0, 12]), { device });
    using states = Tensor.empty([1, 4, 2, 16, 8], { device });
    using aw = Tensor.empty([1, 4, 12, 64], { device });
    refuses(
      fwd({ cu: cu.descriptor(), states: states.descriptor() }),
      /chunk_states: only available for fixed-length input/,
    );
    refuses(
      fwd({ flags: DeltaFlags.GATED | DeltaFlags.RECURRENT, aw: aw.descriptor() }),
      /aw: only available for the chunked algorithm/,
    );
    refuses(fwd({ states: aw.descriptor() }), /chunk_states: expected shape \[1, 4, 2, 16, 8\]/);
    // The saved-for-backward buffer: 1-D, dtype of q, H NCS (K V + 64 V + 64 * 64 + 64 K) =
    // 4 * 1 * (128 + 512 + 4096 + 1024) elements.
    using saved = Tensor.empty([23040], { device });
    using small = Tensor.empty([23039], { device });
    const written = new Int32Array([7]);
    fwd({ saved: saved.descriptor(), written: new Uint8Array(written.buffer) })();
    assert.ok(written[0] === 0 || written[0] === 1, `saved_written: got ${written[0]}`);
    refuses(fwd({ saved: saved.descriptor() }), /saved_written: expected a pointer because saved is given/);
    refuses(
      fwd({ saved: small.descriptor(), written: new Uint8Array(written.buffer) }),
      /saved: expected at least 23040 elements/,
    );
    refuses(
      fwd({ saved: aw.descriptor(), written: new Uint8Array(written.buffer) }),
      /saved: expected a 1-D buffer, got shape \[1, 4, 12, 64\]/,
    );
    // A view that starts 4 bytes into a buffer: refused before its size is looked at.
    using wide = Tensor.empty([39937], { device });
    const unaligned = encodeDescriptor({
      ptr: Deno.UnsafePointer.offset(wide.pointer!, 4),
      dtype: 0,
      deviceType: wide.deviceId.type,
      deviceIndex: wide.deviceId.index,
      shape: [39936],
      strides: [1],
    });
    refuses(
      fwd({ saved: unaligned, written: new Uint8Array(written.buffer) }),
      /saved: expected a 16-byte aligned buffer/,
    );
    // Decode: new_state must be state itself or apart from it.
    using sq = Tensor.randn([1, 1, 4], { device });
    using sv = Tensor.randn([1, 1, 4], { device });
    using sb = Tensor.rand([1, 1], { device });
    using so = Tensor.empty([1, 1, 4], { device });
    using pool = Tensor.zeros([2, 1, 4, 4], { device });
    const state = pool.viewDescriptor([1, 1, 4, 4], [16, 16, 4, 1]);
    const shifted = encodeDescriptor({
      ptr: Deno.UnsafePointer.offset(pool.pointer!, 8 * 4),
      dtype: 0,
      deviceType: pool.deviceId.type,
      deviceIndex: pool.deviceId.index,
      shape: [1, 1, 4, 4],
      strides: [16, 16, 4, 1],
    });
    const decode = (newState: Uint8Array<ArrayBuffer>) => () =>
      unwrap(
        native().ak_delta_rule_decode(
          sq.descriptor(),
          sq.descriptor(),
          sv.descriptor(),
          N,
          sb.descriptor(),
          state,
          0.5,
          0,
          so.descriptor(),
          newState,
        ),
      );
    decode(state)(); // in place is allowed
    refuses(decode(shifted), /new_state: must be the same memory as state \(in place\) or not overlap it/);
  },
);

Deno.test({
  name: "delta rule functions refuse tensors on different devices",
  ignore: !HAS_CUDA,
  fn: () => {
    using x = inputs("cuda");
    using beta = Tensor.rand([1, 12, 4]);
    refuses(
      () => chunkGatedDeltaRule(x.q, x.k, x.v, x.g, beta, BSHD),
      /beta: expected device cuda:0 \(same as q\), got cpu/,
    );
  },
});

deviceTest(
  "delta rule: no leaks after results are disposed or after errors thrown mid-call",
  async (device) => {
    using x = inputs(device);
    const { q, k, v, g, beta, dO } = x;
    // Inputs that make the op allocate temporaries (bfloat16 g and beta are cast to float32).
    using g16 = g.cast("bfloat16");
    using b16 = beta.cast("bfloat16");
    using h0 = Tensor.zeros([1, 4, 16, 8], { device });
    await expectNoLeak(device, () => {
      using a = chunkGatedDeltaRule(q, k, v, g16, b16, { ...BSHD, initialState: h0, outputFinalState: true });
      using b = recurrentGatedDeltaRule(q, k, v, g, beta, { ...BSHD, outputFinalState: true });
      using grads = chunkGatedDeltaRuleBackward(dO, q, k, v, g16, b16, {
        ...BSHD,
        initialState: h0,
        dFinalState: h0,
      });
      using ops = new GatedDeltaNetOp(BHSD);
      using qh = q.permute([0, 2, 1, 3]);
      using kh = k.permute([0, 2, 1, 3]);
      using vh = v.permute([0, 2, 1, 3]);
      using gh = g16.permute([0, 2, 1]);
      using bh = b16.permute([0, 2, 1]);
      using dOh = dO.permute([0, 2, 1, 3]);
      using o = ops.forward(qh, kh, vh, gh, bh);
      using og = ops.backward(dOh);
      using fwd = new GatedDeltaNetBHTDFwdOp().forward(qh, kh, vh, gh, bh);
      using bwd = new GatedDeltaNetBwdOp(BHSD).backward(dOh, qh, kh, vh, gh, bh, fwd.chunkStates);
      using pre = new GatedDeltaNetPrefillBTHDFwdOp().forward(q, k, v, g, beta);
      using s = Tensor.zeros([1, 4, 16, 8], { device });
      using q1 = Tensor.randn([1, 2, 16], { dtype: "bfloat16", device });
      using v1 = Tensor.randn([1, 4, 8], { dtype: "bfloat16", device });
      using g1 = Tensor.zeros([1, 4], { dtype: "bfloat16", device });
      const step = new GatedDeltaNetDecodeFwdOp().forward(q1, q1, v1, g1, g1, s);
      step.output.dispose();
      step.newState.dispose();
      assert.ok([a, b, grads, o, og, fwd, bwd, pre].length > 0);
    });
    // Errors the C entry finds after the op allocated its results and temporaries. (A fresh q: the
    // one above ran forwards without cuSeqlens, and a backward contradicting them is refused early.)
    using bad = Tensor.from(Int32Array.from([0, 9, 4, 12]), { device });
    using badStates = Tensor.zeros([3, 4, 16, 8], { device });
    using qFresh = q.clone();
    await expectNoLeak(device, () => {
      refuses(
        () =>
          chunkGatedDeltaRule(q, k, v, g16, b16, {
            ...BSHD,
            cuSeqlens: bad,
            initialState: badStates,
            outputFinalState: true,
          }),
        /cu_seqlens: must be nondecreasing/,
      );
      refuses(
        () =>
          chunkGatedDeltaRuleBackward(dO, qFresh, k, v, g16, b16, {
            ...BSHD,
            cuSeqlens: bad,
            initialState: badStates,
          }),
        /cu_seqlens: must be nondecreasing/,
      );
      const op = new GatedDeltaNetOp(BHSD);
      using qh = q.permute([0, 2, 1, 3]);
      using kh = k.permute([0, 2, 1, 3]);
      using vh = v.permute([0, 2, 1, 3]);
      using gh = g16.permute([0, 2, 1]);
      using bh = b16.permute([0, 2, 1]);
      refuses(() => op.forward(qh, kh, vh, gh, bh, { output: q }), /out.output: expected shape/);
      assert.ok(!op.holdsInputs, "a failed forward keeps nothing");
      op.forward(qh, kh, vh, gh, bh).dispose();
      using wrong = Tensor.zeros([1, 4, 12, 8], { device });
      refuses(() => op.backward(wrong), /dOutput: expected dtype bfloat16/);
      assert.ok(!op.holdsInputs, "a failed backward still releases the inputs");
    });
  },
);
