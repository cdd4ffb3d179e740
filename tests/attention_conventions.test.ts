// The library-wide conventions as softmax attention keeps them: every call names its layout (a
// missing one is refused with the list; shapes that contradict it are refused naming it); "bhsd" gives
// the numbers "bshd" gives; isCausal is false unless asked, op classes included; a forward result runs
// its own backward, which equals the explicit backward; an explicit backward whose options contradict
// the forward that produced its LSE is refused; cuSeqlens is taken in every form; caller buffers
// survive the disposal of results.
import assert from "node:assert/strict";
import {
  assertClose,
  attention,
  attentionBackward,
  AttnkitError,
  type Device,
  GroupedQueryAttentionBwdOp,
  GroupedQueryAttentionDenseFwdOp,
  GroupedQueryAttentionFwdOp,
  GroupedQueryAttentionPrefillVarlenFwdOp,
  GroupedQueryAttentionSlidingWindowFwdOp,
  GroupedQueryAttentionSlidingWindowVarlenFwdOp,
  MultiHeadAttentionBwdOp,
  MultiHeadAttentionFwdOp,
  type Tensor,
  Tensor as T,
} from "../mod.ts";
import { resetLayoutWarning } from "../ops/layout.ts";
import { deviceTest, expectNoLeak } from "./helpers.ts";

function refuses(fn: () => unknown, pattern: RegExp): void {
  assert.throws(fn, (e: unknown) => {
    if (!(e instanceof AttnkitError)) throw e;
    if (e.code !== "INVALID_ARGUMENT" || !pattern.test(e.message)) {
      throw new Error(`unexpected refusal: ${e.code} ${e.message}\n  expected ${pattern}`);
    }
    return true;
  });
}

const LIST = /layout is required \(no layout is assumed\); expected one of "bshd" \[batch, seq, heads, dim\]/;

function bits(t: Tensor): Uint16Array | Float32Array {
  return t.dtype === "float32" ? t.toArray() as Float32Array : t.toRawBits();
}

// The same random q, k, v in both dense layouts (bhsd made from bshd by a device permute).
function bothLayouts(device: Device, seqQ: number, seqKv: number) {
  const made: Tensor[] = [];
  const keep = (t: Tensor) => (made.push(t), t);
  const q = keep(T.randn([2, seqQ, 4, 64], { dtype: "bfloat16", device, seed: 11 }));
  const k = keep(T.randn([2, seqKv, 2, 64], { dtype: "bfloat16", device, seed: 12 }));
  const v = keep(T.randn([2, seqKv, 2, 64], { dtype: "bfloat16", device, seed: 13 }));
  const dO = keep(T.randn([2, seqQ, 4, 64], { dtype: "bfloat16", device, seed: 14 }));
  const toBhsd = (t: Tensor) => keep(t.permute([0, 2, 1, 3]));
  return {
    bshd: { q, k, v, dO },
    bhsd: { q: toBhsd(q), k: toBhsd(k), v: toBhsd(v), dO: toBhsd(dO) },
    [Symbol.dispose]() {
      for (const t of made) t.dispose();
    },
  };
}

deviceTest(
  "attention: a missing layout is refused with the list, everywhere",
  (device) =>
    expectNoLeak(device, () => {
      using q = T.randn([1, 8, 2, 64], { dtype: "bfloat16", device, seed: 1 });
      refuses(() => attention(q, q, q, {} as never), LIST);
      refuses(() => attention(q, q, q, undefined as never), LIST);
      refuses(() => attention(q, q, q, { isCausal: true } as never), /^attention: layout is required/);
      refuses(() => attentionBackward(q, q, q, q, q, q, { isCausal: true } as never), LIST);
      const sizes = { batch: 1, heads: 2, headsKv: 2, seqLen: 8, dim: 64 };
      const mhaSizes = { batch: 1, heads: 2, seqLen: 8, dim: 64 };
      const packed = { batch: 1, heads: 2, headsKv: 2, dim: 64 };
      const constructors: [string, () => unknown, RegExp][] = [
        ["GroupedQueryAttentionFwdOp", () => new GroupedQueryAttentionFwdOp(sizes as never), LIST],
        ["GroupedQueryAttentionBwdOp", () => new GroupedQueryAttentionBwdOp(sizes as never), LIST],
        ["MultiHeadAttentionFwdOp", () => new MultiHeadAttentionFwdOp(mhaSizes as never), LIST],
        ["MultiHeadAttentionBwdOp", () => new MultiHeadAttentionBwdOp(mhaSizes as never), LIST],
        ["GroupedQueryAttentionDenseFwdOp", () => new GroupedQueryAttentionDenseFwdOp({} as never), LIST],
        [
          "GroupedQueryAttentionDenseFwdOp",
          () => new GroupedQueryAttentionDenseFwdOp(undefined as never),
          LIST,
        ],
        [
          "GroupedQueryAttentionSlidingWindowFwdOp",
          () => new GroupedQueryAttentionSlidingWindowFwdOp(sizes as never),
          LIST,
        ],
        [
          "GroupedQueryAttentionSlidingWindowVarlenFwdOp",
          () => new GroupedQueryAttentionSlidingWindowVarlenFwdOp(packed as never),
          /layout is required \(no layout is assumed\); expected one of "thd" \[totalTokens, heads, dim\]/,
        ],
        [
          "GroupedQueryAttentionPrefillVarlenFwdOp",
          () =>
            new GroupedQueryAttentionPrefillVarlenFwdOp({ ...packed, maxSeqlenQ: 8, maxSeqlenK: 8 } as never),
          /layout is required .*"thd"/,
        ],
      ];
      for (const [name, make, pattern] of constructors) {
        refuses(make, new RegExp(`^${name}: ${pattern.source.replace(/^\^/, "")}`));
      }
      // a dense op refuses "thd", a packed op a dense layout
      refuses(
        () => new GroupedQueryAttentionFwdOp({ ...sizes, layout: "thd" as never }),
        /layout got "thd"; expected one of "bshd" .*, "bhsd"/,
      );
      refuses(
        () =>
          new GroupedQueryAttentionPrefillVarlenFwdOp({
            ...packed,
            maxSeqlenQ: 8,
            maxSeqlenK: 8,
            layout: "bshd" as never,
          }),
        /layout got "bshd"; expected one of "thd"/,
      );
    }),
);

deviceTest(
  "attention: shapes that contradict the layout are refused, naming it",
  (device) =>
    expectNoLeak(device, () => {
      // bhsd tensors ([B, H, S, D]) with grouped heads and Sq != Skv, read as bshd
      using q = T.randn([1, 8, 100, 64], { dtype: "bfloat16", device, seed: 1 });
      using kv = T.randn([1, 2, 60, 64], { dtype: "bfloat16", device, seed: 2 });
      refuses(
        () => attention(q, kv, kv, { layout: "bshd" }),
        /q: the query heads \(100\) must be a multiple of the KV heads of k \(60\) .*\(layout "bshd" reads \[batch, seq, heads, dim\]\)/,
      );
      using r = attention(q, kv, kv, { layout: "bhsd" }); // the right layout runs
      assert.deepEqual(r.output.shape, [1, 8, 100, 64]);
      // D mismatch between q and k names the layout too
      using k32 = T.randn([1, 2, 60, 32], { dtype: "bfloat16", device, seed: 3 });
      refuses(
        () => attention(q, k32, k32, { layout: "bhsd" }),
        /k: expected shape \[B=1, Hkv=2, Skv=60, D=64\], got \[1, 2, 60, 32\] \(D is 64\) \(layout "bhsd" reads \[batch, heads, seq, dim\]\)/,
      );
      // packed tensors with a dense layout, dense tensors with "thd"
      using packed = T.randn([10, 2, 64], { dtype: "bfloat16", device, seed: 4 });
      refuses(
        () => attention(packed, packed, packed, { layout: "bhsd" }),
        /q: expected rank 4 \[batch, heads, seq, dim\] for layout "bhsd", got \[10, 2, 64\]; packed inputs take layout "thd"/,
      );
      refuses(
        () => attention(q, kv, kv, { layout: "thd", cuSeqlensQ: [0, 1], cuSeqlensK: [0, 1] }),
        /q: expected rank 3 \[totalTokens, heads, dim\] with cuSeqlens for layout "thd", got \[1, 8, 100, 64\]/,
      );
      // an op class built for bshd refuses bhsd tensors, naming its layout
      const op = new GroupedQueryAttentionFwdOp({
        layout: "bshd",
        batch: 1,
        heads: 8,
        headsKv: 2,
        seqLen: 100,
        dim: 64,
      });
      refuses(
        () => op.forward(q, q, q),
        /q: expected shape \[1, 100, 8, 64\], got \[1, 8, 100, 64\] \(layout "bshd" reads/,
      );
    }),
);

deviceTest(
  "attention: tensors that look read in the other layout warn once",
  (device) =>
    expectNoLeak(device, () => {
      const warnings: string[] = [];
      const warn = console.warn;
      console.warn = (...args: unknown[]) => void warnings.push(args.join(" "));
      try {
        resetLayoutWarning();
        // [B, H, S, D] tensors, 4 query and 2 KV heads over 32 positions, read as "bshd"
        using q = T.randn([1, 4, 32, 64], { dtype: "bfloat16", device, seed: 1 });
        using kv = T.randn([1, 2, 32, 64], { dtype: "bfloat16", device, seed: 2 });
        attention(q, kv, kv, { layout: "bshd" })[Symbol.dispose]();
        attention(q, kv, kv, { layout: "bshd" })[Symbol.dispose]();
        attention(q, kv, kv, { layout: "bhsd" })[Symbol.dispose]();
      } finally {
        console.warn = warn;
      }
      assert.equal(warnings.length, 1);
      assert.match(
        warnings[0],
        /^attnkit: attention: q has 4 positions and 32 heads, k 2 positions and 32 heads as layout "bshd" .* pass layout: "bhsd"/,
      );
    }),
);

deviceTest(
  "attention: bhsd tensors with layout bhsd give the numbers bshd gives",
  (device) =>
    expectNoLeak(device, () => {
      using x = bothLayouts(device, 37, 53);
      const options = { isCausal: true, windowSizeLeft: 20, softcap: 3 };
      using a = attention(x.bshd.q, x.bshd.k, x.bshd.v, { ...options, layout: "bshd", returnLse: true });
      using b = attention(x.bhsd.q, x.bhsd.k, x.bhsd.v, { ...options, layout: "bhsd", returnLse: true });
      using ga = a.backward(x.bshd.dO, { deterministic: true });
      using gb = b.backward(x.bhsd.dO, { deterministic: true });
      const pairs: [string, Tensor, Tensor][] = [
        ["output", a.output, b.output],
        ["lse", a.lse, b.lse],
        ["dq", ga.dq, gb.dq],
        ["dk", ga.dk, gb.dk],
        ["dv", ga.dv, gb.dv],
      ];
      for (const [name, bshd, bhsd] of pairs) {
        using asBshd = name === "lse" ? bhsd.clone() : bhsd.permute([0, 2, 1, 3]);
        if (device === "cpu") {
          assert.deepEqual(
            bits(asBshd),
            bits(bshd),
            `${name}: the CPU backend reads both layouts the same way`,
          );
        } else {
          // A kernel may pick another tile order for strided reads; rounding may differ, nothing more.
          assertClose(asBshd, bshd, { relRms: 5e-3, name });
        }
      }
    }),
);

deviceTest(
  "attention: isCausal defaults to false, functional and op classes alike",
  (device) =>
    expectNoLeak(device, () => {
      const sizes = { layout: "bshd", batch: 1, heads: 2, headsKv: 1, seqLen: 24, dim: 64 } as const;
      const mhaSizes = { layout: "bshd", batch: 1, heads: 2, seqLen: 24, dim: 64 } as const;
      const packed = { layout: "thd", batch: 1, heads: 2, headsKv: 1, dim: 64 } as const;
      const ops = [
        new GroupedQueryAttentionFwdOp(sizes),
        new GroupedQueryAttentionBwdOp(sizes),
        new MultiHeadAttentionFwdOp(mhaSizes),
        new MultiHeadAttentionBwdOp(mhaSizes),
        new GroupedQueryAttentionDenseFwdOp({ layout: "bshd" }),
        new GroupedQueryAttentionSlidingWindowFwdOp(sizes),
        new GroupedQueryAttentionSlidingWindowVarlenFwdOp(packed),
        new GroupedQueryAttentionPrefillVarlenFwdOp({ ...packed, maxSeqlenQ: 24, maxSeqlenK: 24 }),
      ];
      for (const op of ops) assert.equal(op.mask.causal, false, op.constructor.name);
      // and the numbers: every op equals the non-causal functional call, not the causal one
      using q = T.randn([1, 24, 2, 64], { dtype: "float16", device, seed: 5 });
      using kv = T.randn([1, 24, 1, 64], { dtype: "float16", device, seed: 6 });
      using full = attention(q, kv, kv, { layout: "bshd" });
      using causal = attention(q, kv, kv, { layout: "bshd", isCausal: true });
      assert.notDeepEqual(bits(full.output), bits(causal.output));
      using viaOp = (ops[0] as GroupedQueryAttentionFwdOp).forward(q, kv, kv);
      using viaDense = (ops[4] as GroupedQueryAttentionDenseFwdOp).forward(q, kv, kv);
      using viaWindow = (ops[5] as GroupedQueryAttentionSlidingWindowFwdOp).forward(q, kv, kv);
      for (const o of [viaOp.output, viaDense, viaWindow]) assert.deepEqual(bits(o), bits(full.output));
    }),
);

deviceTest(
  "attention: result.backward(dO) equals the explicit backward",
  (device) =>
    expectNoLeak(device, () => {
      using q = T.randn([2, 33, 4, 64], { dtype: "bfloat16", device, seed: 1 });
      using k = T.randn([2, 47, 2, 64], { dtype: "bfloat16", device, seed: 2 });
      using v = T.randn([2, 47, 2, 64], { dtype: "bfloat16", device, seed: 3 });
      using dO = T.randn([2, 33, 4, 64], { dtype: "bfloat16", device, seed: 4 });
      const options = { layout: "bshd", isCausal: true, windowSizeLeft: 9, scale: 0.11, softcap: 4 } as const;
      using r = attention(q, k, v, options); // returnLse not asked: the result keeps it anyway
      assert.equal(r.lse, undefined);
      using own = r.backward(dO, { deterministic: true });
      using withLse = attention(q, k, v, { ...options, returnLse: true });
      using explicit = attentionBackward(dO, q, k, v, withLse.output, withLse.lse, {
        ...options,
        deterministic: true,
      });
      for (const name of ["dq", "dk", "dv"] as const) {
        assert.deepEqual(bits(own[name]), bits(explicit[name]), name);
      }
      // packed, with host offsets, and the op classes' results
      using p = T.randn([30, 2, 64], { dtype: "float16", device, seed: 5 });
      using dP = T.randn([30, 2, 64], { dtype: "float16", device, seed: 6 });
      const thd = {
        layout: "thd",
        cuSeqlensQ: [0, 7, 30],
        cuSeqlensK: new Int32Array([0, 7, 30]),
        isCausal: true,
      } as const;
      using rp = attention(p, p, p, { ...thd, returnLse: true });
      using gp = rp.backward(dP, { deterministic: true });
      using ep = attentionBackward(dP, p, p, p, rp.output, rp.lse, { ...thd, deterministic: true });
      assert.deepEqual(bits(gp.dq), bits(ep.dq));
      const sizes = {
        layout: "bhsd",
        batch: 2,
        heads: 4,
        headsKv: 2,
        seqLen: 33,
        dim: 64,
        softcap: 2,
      } as const;
      using qh = q.permute([0, 2, 1, 3]);
      using kh = T.randn([2, 2, 33, 64], { dtype: "bfloat16", device, seed: 7 });
      using dOh = dO.permute([0, 2, 1, 3]);
      using ro = new GroupedQueryAttentionFwdOp(sizes).forward(qh, kh, kh);
      using go = ro.backward(dOh, { deterministic: true });
      using eo = new GroupedQueryAttentionBwdOp({ ...sizes, deterministic: true }).backward(
        dOh,
        qh,
        kh,
        kh,
        ro.output,
        ro.lse,
      );
      assert.deepEqual(bits(go.dk), bits(eo.dk));
    }),
);

deviceTest(
  "attention: an explicit backward refuses options that contradict the forward",
  (device) =>
    expectNoLeak(device, () => {
      using q = T.randn([1, 16, 2, 64], { dtype: "bfloat16", device, seed: 1 });
      using kv = T.randn([1, 16, 1, 64], { dtype: "bfloat16", device, seed: 2 });
      const fwd = { layout: "bshd", isCausal: true, softcap: 5 } as const;
      using r = attention(q, kv, kv, { ...fwd, returnLse: true });
      const o = r.output, lse = r.lse;
      const contradictions: [object, RegExp][] = [
        [
          { layout: "bshd", softcap: 5 },
          /^attentionBackward: isCausal: the forward that produced lse ran with isCausal: true, this call has isCausal: false/,
        ],
        [
          { ...fwd, softcap: 0 },
          /softcap: the forward that produced lse ran with softcap: 5, this call has softcap: 0/,
        ],
        [{ layout: "bshd", isCausal: true }, /softcap: the forward that produced lse ran with softcap: 5/],
        [
          { ...fwd, scale: 0.5 },
          /scale: the forward that produced lse ran with scale: 0\.125, this call has scale: 0\.5/,
        ],
        [
          { ...fwd, windowSizeLeft: 3 },
          /windowSizeLeft: the forward that produced lse ran with windowSizeLeft: -1 \(unlimited\), this call has windowSizeLeft: 3/,
        ],
      ];
      for (const [options, pattern] of contradictions) {
        refuses(() => attentionBackward(o, q, kv, kv, o, lse, options as never), pattern);
      }
      // the forward's own options, and an equivalent spelling of its mask, are accepted
      attentionBackward(o, q, kv, kv, o, lse, { ...fwd, scale: 0.125 })[Symbol.dispose]();
      attentionBackward(o, q, kv, kv, o, lse, { layout: "bshd", windowSizeRight: 0, softcap: 5 })
        [Symbol.dispose]();
      // known by its output when the LSE is not the forward's own
      using lseCopy = lse.clone();
      refuses(
        () => attentionBackward(o, q, kv, kv, o, lseCopy, { layout: "bshd" }),
        /isCausal: the forward that produced output ran with isCausal: true/,
      );
      // layout: square tensors fit both orders, so only the record can tell
      using sq = T.randn([1, 8, 8, 64], { dtype: "bfloat16", device, seed: 3 });
      using rs = attention(sq, sq, sq, { layout: "bhsd", returnLse: true });
      refuses(
        () => attentionBackward(sq, sq, sq, sq, rs.output, rs.lse, { layout: "bshd" }),
        /layout: the forward that produced lse ran with layout: "bhsd", this call has layout: "bshd"/,
      );
      // packed: other offsets with the same totals
      using p = T.randn([12, 2, 64], { dtype: "bfloat16", device, seed: 4 });
      const thd = { layout: "thd", cuSeqlensQ: [0, 5, 12], cuSeqlensK: [0, 5, 12] } as const;
      using rp = attention(p, p, p, { ...thd, returnLse: true });
      using cuDevice = T.from(new Int32Array([0, 6, 12]), { device });
      refuses(
        () => attentionBackward(p, p, p, p, rp.output, rp.lse, { ...thd, cuSeqlensQ: cuDevice }),
        /cuSeqlensQ: the forward that produced lse ran with cuSeqlensQ: \[0, 5, 12\], this call has cuSeqlensQ: \[0, 6, 12\]/,
      );
      attentionBackward(p, p, p, p, rp.output, rp.lse, {
        ...thd,
        cuSeqlensK: new BigInt64Array([0n, 5n, 12n]),
      })
        [Symbol.dispose]();
      // the backward op classes check the same way
      const bwd = new GroupedQueryAttentionBwdOp({
        layout: "bshd",
        batch: 1,
        heads: 2,
        headsKv: 1,
        seqLen: 16,
        dim: 64,
      });
      refuses(
        () => bwd.backward(o, q, kv, kv, o, lse),
        /^GroupedQueryAttentionBwdOp: isCausal: the forward that produced lse ran with isCausal: true/,
      );
    }),
);

deviceTest(
  "attention: a result's backward refuses disposed inputs and a disposed result",
  (device) =>
    expectNoLeak(device, () => {
      using kv = T.randn([1, 16, 1, 64], { dtype: "float16", device, seed: 2 });
      using dO = T.randn([1, 16, 2, 64], { dtype: "float16", device, seed: 3 });
      const q = T.randn([1, 16, 2, 64], { dtype: "float16", device, seed: 1 });
      const r = attention(q, kv, kv, { layout: "bshd" });
      q.dispose();
      refuses(
        () => r.backward(dO),
        /^attention\(\.\.\.\)\.backward: q: disposed after the forward; backward\(\) reads the forward's tensors/,
      );
      r[Symbol.dispose]();
      r[Symbol.dispose](); // twice is harmless
      refuses(() => r.backward(dO), /the forward's result was disposed/);
      using q2 = T.randn([1, 16, 2, 64], { dtype: "float16", device, seed: 1 });
      using r2 = attention(q2, kv, kv, { layout: "bshd" });
      refuses(() => r2.backward(dO, { isCausal: true } as never), /unknown option 'isCausal'/);
      refuses(() => r2.backward(kv), /dO: expected shape \[1, 16, 2, 64\]/);
    }),
);

deviceTest(
  "attention: caller out buffers survive the disposal of results",
  (device) =>
    expectNoLeak(device, () => {
      using q = T.randn([1, 16, 2, 64], { dtype: "bfloat16", device, seed: 1 });
      using dO = T.randn([1, 16, 2, 64], { dtype: "bfloat16", device, seed: 2 });
      using output = T.empty([1, 16, 2, 64], { dtype: "bfloat16", device });
      using lse = T.empty([1, 2, 16], { device });
      using dq = T.empty([1, 16, 2, 64], { dtype: "bfloat16", device });
      using dk = T.empty([1, 16, 2, 64], { dtype: "bfloat16", device });
      {
        using r = attention(q, q, q, {
          layout: "bshd",
          isCausal: true,
          returnLse: true,
          out: { output, lse },
        });
        assert.equal(r.output, output);
        assert.equal(r.lse, lse);
        using g = r.backward(dO, { out: { dq, dk } });
        assert.equal(g.dq, dq);
        assert.equal(g.dv.disposed, false);
      }
      for (const t of [output, lse, dq, dk]) assert.equal(t.disposed, false);
      const before = bits(output);
      {
        using _again = attention(q, q, q, { layout: "bshd", isCausal: true, out: { output } });
        using _g = attentionBackward(dO, q, q, q, output, lse, {
          layout: "bshd",
          isCausal: true,
          out: { dq },
        });
      }
      assert.deepEqual(bits(output), before);
      assert.equal(dq.disposed, false);
      const op = new MultiHeadAttentionFwdOp({ layout: "bshd", batch: 1, heads: 2, seqLen: 16, dim: 64 });
      op.forward(q, q, q, { output, lse })[Symbol.dispose]();
      assert.equal(output.disposed || lse.disposed, false);
    }),
);

deviceTest(
  "attention: cuSeqlens as number[], Int32Array, BigInt64Array, int32 and int64 tensors",
  (device) =>
    expectNoLeak(device, () => {
      using q = T.randn([21, 4, 64], { dtype: "bfloat16", device, seed: 1 });
      using kv = T.randn([26, 2, 64], { dtype: "bfloat16", device, seed: 2 });
      const cuQ = [0, 4, 4, 21], cuK = [0, 9, 10, 26];
      using cuQ32 = T.from(new Int32Array(cuQ), { device });
      using cuK64 = T.from(BigInt64Array.from(cuK, BigInt), { device });
      const forms: [unknown, unknown][] = [
        [cuQ, cuK],
        [new Int32Array(cuQ), BigInt64Array.from(cuK, BigInt)],
        [cuQ32, cuK64],
      ];
      let reference: Uint16Array | undefined;
      for (const [a, b] of forms) {
        using r = attention(q, kv, kv, {
          layout: "thd",
          cuSeqlensQ: a as number[],
          cuSeqlensK: b as number[],
          isCausal: true,
        });
        const got = r.output.toRawBits();
        if (reference) assert.deepEqual(got, reference);
        reference = got;
        using g = r.backward(r.output); // the offsets (uploaded or narrowed) live as long as the result
        assert.deepEqual(g.dk.shape, [26, 2, 64]);
      }
      const varlen = new GroupedQueryAttentionPrefillVarlenFwdOp({
        layout: "thd",
        batch: 3,
        heads: 4,
        headsKv: 2,
        dim: 64,
        maxSeqlenQ: 17,
        maxSeqlenK: 16,
        isCausal: true,
        validateInputs: true,
      });
      using viaOp = varlen.forward(q, kv, kv, cuQ32, cuK64);
      assert.deepEqual(viaOp.toRawBits(), reference);
      refuses(
        () => varlen.forward(q, kv, kv, [0, 4, 4, 21], [0, 9, 26, 26]),
        /cuSeqlensK: sequence 1 has 17 tokens, more than maxSeqlenK \(16\)/,
      );
    }),
);
