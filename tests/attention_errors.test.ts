// Bad input is refused with an AttnkitError naming the argument and what was expected, both by the
// TypeScript ops and by the C entries themselves (called directly here); nothing leaks on refusal;
// NaN never passes a check, and a NaN input row comes out NaN, not silently finite.
import assert from "node:assert/strict";
import { native, unwrap } from "../ffi/library.ts";
import { attention, attentionBackward, AttnkitError, type Device, Tensor } from "../mod.ts";
import { expectFlashRule, makeInputs } from "./attention_cases.ts";
import { deviceTest, expectNoLeak } from "./helpers.ts";
import { attentionForward, FLOAT64, samePrecision } from "../reference/attention.ts";

function refuses(fn: () => unknown, pattern: RegExp): void {
  assert.throws(fn, (e: unknown) => {
    if (!(e instanceof AttnkitError)) return false;
    if (e.code !== "INVALID_ARGUMENT" || !pattern.test(e.message)) {
      throw new Error(`unexpected refusal: ${e.code} ${e.message}`);
    }
    return true;
  });
}

function tensors(device: Device) {
  const q = Tensor.randn([2, 8, 4, 64], { dtype: "bfloat16", device, seed: 1 });
  const kv = Tensor.randn([2, 8, 2, 64], { dtype: "bfloat16", device, seed: 2 });
  return {
    q,
    kv,
    [Symbol.dispose]() {
      q.dispose();
      kv.dispose();
    },
  };
}

deviceTest("attention refuses bad tensors, naming the argument", (device) =>
  expectNoLeak(device, () => {
    using t = tensors(device);
    const { q, kv } = t;
    using f32 = Tensor.randn([2, 8, 4, 64], { device, seed: 3 });
    using half = Tensor.randn([2, 8, 2, 64], { dtype: "float16", device, seed: 3 });
    using six = Tensor.randn([2, 8, 6, 64], { dtype: "bfloat16", device, seed: 4 });
    using four = Tensor.randn([2, 8, 4, 64], { dtype: "bfloat16", device, seed: 4 });
    using d12 = Tensor.randn([2, 8, 4, 12], { dtype: "bfloat16", device, seed: 4 });
    using d264 = Tensor.randn([1, 2, 1, 264], { dtype: "bfloat16", device, seed: 4 });
    using rank3 = Tensor.randn([8, 4, 64], { dtype: "bfloat16", device, seed: 4 });
    using batch3 = Tensor.randn([3, 8, 2, 64], { dtype: "bfloat16", device, seed: 4 });
    const L = { layout: "bshd" } as const;
    refuses(
      () => attention(f32, kv, kv, L),
      /^attention: q: expected dtype float16 \| bfloat16, got float32/,
    );
    refuses(() => attention(q, half, half, L), /k: expected dtype bfloat16 \(same as q\), got float16/);
    refuses(
      () => attention(six, four, four, L),
      /q: the query heads \(6\) must be a multiple of the KV heads of k \(4\) .*\(layout "bshd" reads/,
    );
    refuses(
      () => attention(d12, d12, d12, L),
      /q: head dim D must be a multiple of 8 between 8 and 256, got 12/,
    );
    refuses(
      () => attention(d264, d264, d264, L),
      /q: head dim D must be a multiple of 8 between 8 and 256, got 264/,
    );
    refuses(
      () => attention(rank3, kv, kv, L),
      /q: expected rank 4 \[batch, seq, heads, dim\] for layout "bshd", got \[8, 4, 64\]; packed inputs take layout "thd"/,
    );
    refuses(
      () => attention(q, batch3, batch3, L),
      /k: expected shape \[B=2, Skv, Hkv, D=64\], got \[3, 8, 2, 64\] \(B is 2\) \(layout "bshd" reads \[batch, seq, heads, dim\]\)/,
    );
    refuses(
      () => attention(q, kv, q, L),
      /v: expected shape \[B=2, Skv=8, Hkv=2, D=64\], got \[2, 8, 4, 64\]/,
    );
    refuses(
      () => attention(q, kv, kv, { layout: "bthd" as "bshd" }),
      /layout got "bthd"; expected one of "bshd" \[batch, seq, heads, dim\], "bhsd" \[batch, heads, seq, dim\], "thd"/,
    );
    refuses(
      () => attention(q, kv, kv, { ...L, windowSizeLeft: -2 }),
      /windowSizeLeft: expected -1 \(unlimited\)/,
    );
    refuses(
      () => attention(q, kv, kv, { ...L, windowSizeRight: 1.5 }),
      /windowSizeRight: expected -1 \(unlimited\)/,
    );
    refuses(() => attention(q, kv, kv, { ...L, softcap: NaN }), /softcap: expected a finite number >= 0/);
    refuses(() => attention(q, kv, kv, { ...L, scale: -1 }), /scale: expected a finite number > 0/);
    for (const name of ["smScale", "softmaxScale", "softmax_scale", "sm_scale"]) {
      refuses(
        () => attention(q, kv, kv, { ...L, [name]: 0.1 }),
        new RegExp(`unknown option '${name}' \\(did you mean 'scale'\\?\\)`),
      );
    }
    refuses(
      () => attention(q, kv, kv, { ...L, isCausal: 1 as unknown as boolean }),
      /isCausal: expected a boolean/,
    );
    using wrongOut = Tensor.empty([2, 8, 4, 32], { dtype: "bfloat16", device });
    refuses(
      () => attention(q, kv, kv, { ...L, out: { output: wrongOut } }),
      /output: expected shape \[2, 8, 4, 64\]/,
    );
    using wrongLse = Tensor.empty([2, 4, 8], { dtype: "bfloat16", device });
    refuses(
      () => attention(q, kv, kv, { ...L, out: { lse: wrongLse } }),
      /lse: expected dtype float32, got bfloat16/,
    );
    const gone = Tensor.randn([2, 8, 4, 64], { dtype: "bfloat16", device, seed: 5 });
    gone.dispose();
    refuses(() => attention(gone, kv, kv, L), /q: the tensor was disposed/);
  }));

deviceTest("attentionBackward refuses mismatched forward results", (device) =>
  expectNoLeak(device, () => {
    using t = tensors(device);
    const { q, kv } = t;
    const L = { layout: "bshd" } as const;
    using fwd = attention(q, kv, kv, { ...L, returnLse: true });
    using lse16 = Tensor.empty([2, 4, 8], { dtype: "bfloat16", device });
    using lseShort = Tensor.empty([2, 4, 7], { device });
    using dO16 = Tensor.randn([2, 8, 4, 64], { dtype: "float16", device, seed: 6 });
    const o = fwd.output;
    refuses(() => attentionBackward(o, q, kv, kv, o, lse16, L), /lse: expected dtype float32/);
    refuses(() => attentionBackward(o, q, kv, kv, o, lseShort, L), /lse: expected shape \[2, 4, 8\]/);
    refuses(
      () => attentionBackward(dO16, q, kv, kv, o, fwd.lse, L),
      /dO: expected dtype bfloat16 \(same as q\)/,
    );
    refuses(() => attentionBackward(o, q, kv, kv, kv, fwd.lse, L), /o: expected shape \[2, 8, 4, 64\]/);
    refuses(
      () => attentionBackward(o, q, kv, kv, o, fwd.lse, { ...L, deterministic: "yes" as unknown as boolean }),
      /deterministic: expected a boolean/,
    );
    refuses(
      () => attentionBackward(o, q, kv, kv, o, fwd.lse, undefined as never),
      /layout is required \(no layout is assumed\)/,
    );
  }));

deviceTest(
  "attention refuses bad cu_seqlens (TypeScript and C checks), without leaks",
  (device) =>
    expectNoLeak(device, () => {
      using q = Tensor.randn([10, 2, 64], { dtype: "float16", device, seed: 1 });
      using kv = Tensor.randn([12, 1, 64], { dtype: "float16", device, seed: 2 });
      using cuF32 = Tensor.from([0, 10], { dtype: "float32", device });
      using cu2d = Tensor.from([[0, 10]], { dtype: "int32", device });
      const T = { layout: "thd" } as const;
      refuses(
        () => attention(q, kv, kv, { ...T, cuSeqlensQ: [0, 10] }),
        /cuSeqlensK: layout "thd" \(packed sequences\) needs both cuSeqlensQ and cuSeqlensK/,
      );
      refuses(() => attention(q, kv, kv, T), /cuSeqlensQ: layout "thd" \(packed sequences\) needs both/);
      refuses(
        () => attention(q, kv, kv, { layout: "bshd", cuSeqlensQ: [0, 10], cuSeqlensK: [0, 12] }),
        /cuSeqlensQ: given with layout "bshd"; packed sequences take layout "thd"/,
      );
      refuses(
        () => attention(q, kv, kv, { ...T, cuSeqlensQ: cuF32, cuSeqlensK: [0, 12] }),
        /cuSeqlensQ: expected dtype int32 \| int64, got float32/,
      );
      refuses(
        () => attention(q, kv, kv, { ...T, cuSeqlensQ: cu2d, cuSeqlensK: [0, 12] }),
        /cuSeqlensQ: expected shape \[N \+ 1\] with N >= 0, got \[1, 2\]/,
      );
      refuses(
        () => attention(q, kv, kv, { ...T, cuSeqlensQ: "0,10" as never, cuSeqlensK: [0, 12] }),
        /cuSeqlensQ: expected offsets as a number\[\], Int32Array, BigInt64Array or an int32\/int64 Tensor, got "0,10"/,
      );
      refuses(
        () => attention(q, kv, kv, { ...T, cuSeqlensQ: [0, 5, 10], cuSeqlensK: [0, 12] }),
        /cuSeqlensK: expected 3 entries \(same as cuSeqlensQ\), got 2/,
      );
      refuses(
        () => attention(q, kv, kv, { ...T, cuSeqlensQ: [0, -1, 10], cuSeqlensK: [0, 6, 12] }),
        /non-negative int32/,
      );
      refuses(
        () =>
          attention(q, kv, kv, { ...T, cuSeqlensQ: new BigInt64Array([0n, 2n ** 40n]), cuSeqlensK: [0, 12] }),
        /cuSeqlensQ: expected non-negative int32 offsets, got \[0, 1099511627776\]/,
      );
      // Content checks happen in the C entry (it reads cu_seqlens on the host).
      refuses(
        () =>
          attention(q, kv, kv, {
            ...T,
            cuSeqlensQ: [0, 6, 5, 10],
            cuSeqlensK: [0, 1, 6, 12],
            returnLse: true,
          }),
        /^attention: cu_seqlens_q: must be nondecreasing, but entry 2 \(5\) is below entry 1 \(6\)/,
      );
      refuses(
        () => attention(q, kv, kv, { ...T, cuSeqlensQ: [1, 10], cuSeqlensK: [0, 12] }),
        /cu_seqlens_q: must start at 0, got 1/,
      );
      refuses(
        () => attention(q, kv, kv, { ...T, cuSeqlensQ: [0, 10], cuSeqlensK: [0, 11] }),
        /cu_seqlens_kv: the last entry \(11\) must equal the number of packed tokens in k \(12\)/,
      );
      refuses(
        () => attention(q, kv, kv, { ...T, cuSeqlensQ: [0, 9], cuSeqlensK: [0, 12] }),
        /cu_seqlens_q: the last entry \(9\) must equal the number of packed tokens in q \(10\)/,
      );
    }),
);

// Calls ak_attention_fwd directly with descriptors, so the C entry's own checks are exercised.
function nativeForward(
  q: Uint8Array<ArrayBuffer>,
  k: Uint8Array<ArrayBuffer>,
  v: Uint8Array<ArrayBuffer>,
  output: Uint8Array<ArrayBuffer> | null,
  lse: Uint8Array<ArrayBuffer> | null,
  opts: {
    flags?: number;
    left?: number;
    right?: number;
    scale?: number;
    softcap?: number;
    cuQ?: Uint8Array | null;
  } = {},
): void {
  unwrap(
    native().ak_attention_fwd(
      q,
      k,
      v,
      opts.cuQ ?? null,
      null,
      opts.scale ?? 0.125,
      opts.softcap ?? 0,
      opts.flags ?? 0,
      opts.left ?? -1,
      opts.right ?? -1,
      output,
      lse,
    ),
  );
}

deviceTest("ak_attention_fwd checks its arguments itself", (device) =>
  expectNoLeak(device, () => {
    using t = tensors(device);
    const { q, kv } = t;
    using out = Tensor.empty([2, 8, 4, 64], { dtype: "bfloat16", device });
    using lse = Tensor.empty([2, 4, 8], { device });
    using six = Tensor.randn([2, 8, 6, 64], { dtype: "bfloat16", device, seed: 4 });
    const K4 = q.descriptor(); // 4 heads: 6 query heads cannot be grouped over them
    using out6 = Tensor.empty([2, 8, 6, 64], { dtype: "bfloat16", device });
    const Q = q.descriptor(), K = kv.descriptor(), O = out.descriptor(), L = lse.descriptor();
    refuses(
      () => nativeForward(six.descriptor(), K4, K4, out6.descriptor(), null),
      /^ak_attention_fwd: q: the query heads \(6\) must be a multiple of the KV heads of k \(4\)/,
    );
    // A view whose head dim has stride 2 (reading every other element) is not contiguous.
    const strided = q.viewDescriptor([2, 8, 4, 32], [2048, 256, 64, 2]);
    using out32 = Tensor.empty([2, 8, 4, 32], { dtype: "bfloat16", device });
    refuses(
      () => {
        const k32 = kv.viewDescriptor([2, 8, 2, 32], [1024, 128, 64, 1]); // the first half of each head
        nativeForward(strided, k32, k32, out32.descriptor(), null);
      },
      /q: the last \(head\) dimension must be contiguous \(stride 1\), got stride 2/,
    );
    refuses(() => nativeForward(Q, K, K, null, null), /output: expected a tensor, got none/);
    refuses(() => nativeForward(Q, K, K, O, null, { flags: 4 }), /flags: unknown bits in 4/);
    refuses(
      () => nativeForward(Q, K, K, O, null, { left: -3 }),
      /window_left: expected -1 \(unlimited\) or a size >= 0/,
    );
    refuses(
      () => nativeForward(Q, K, K, O, null, { scale: 0 }),
      /sm_scale: expected a finite positive number/,
    );
    refuses(() => nativeForward(Q, K, K, O, null, { softcap: -1 }), /softcap: expected a finite number >= 0/);
    refuses(() => nativeForward(Q, K, K, O, O), /lse: expected dtype float32, got bfloat16/);
    refuses(
      () => nativeForward(Q, K, K, O, lse.viewDescriptor([2, 4, 7], [32, 8, 1])),
      /lse: expected shape \[B, Hq, Sq\]/,
    );
    refuses(
      () => nativeForward(Q, K, K, O, lse.viewDescriptor([2, 4, 8], [1, 2, 8])),
      /lse: expected a contiguous tensor/,
    );
    using cu = Tensor.from(new Int32Array([0, 8]), { device });
    refuses(
      () => nativeForward(Q, K, K, O, null, { cuQ: cu.descriptor() }),
      /cu_seqlens_kv: expected a tensor because cu_seqlens_q is given/,
    );
    // Causal with a right window > 0 is clamped to the causal bound (documented), not refused.
    using clamped = Tensor.empty([2, 8, 4, 64], { dtype: "bfloat16", device });
    nativeForward(Q, K, K, O, L, { flags: 1, right: 0 });
    nativeForward(Q, K, K, clamped.descriptor(), null, { flags: 1, right: 5 });
    assert.deepEqual(clamped.toRawBits(), out.toRawBits());
  }));

deviceTest(
  "NaN never passes: unwritten (poisoned) or NaN outputs fail the rule",
  (device) =>
    expectNoLeak(device, () => {
      const c = { dtype: "bfloat16", batch: 1, seqQ: 16, heads: 2, headsKv: 1, dim: 64 } as const;
      using inputs = makeInputs(device, c, 7);
      const oracle = attentionForward(inputs.problem, FLOAT64).output;
      const plain = attentionForward(inputs.problem, samePrecision(c.dtype)).output;
      using poisoned = Tensor.full(inputs.q.shape, NaN, { dtype: c.dtype, device });
      assert.throws(
        () =>
          expectFlashRule("output", poisoned.toArray() as Float32Array, oracle, plain, "forward", c.dtype),
        /NaN/,
      );
      using o = attention(inputs.q, inputs.k, inputs.v, inputs.options);
      const values = o.output.toArray() as Float32Array;
      expectFlashRule("output", values, oracle, plain, "forward", c.dtype);
      values[37] = NaN;
      assert.throws(() => expectFlashRule("output", values, oracle, plain, "forward", c.dtype), /NaN/);
    }),
);

deviceTest(
  "a NaN in q makes its own row NaN and leaves the others finite",
  (device) =>
    expectNoLeak(device, () => {
      const host = new Float32Array(1 * 8 * 2 * 64).map((_, i) => Math.sin(i));
      host[(3 * 2 + 1) * 64 + 5] = NaN; // row 3, head 1, dim 5
      using q = Tensor.from(host, { dtype: "bfloat16", device, shape: [1, 8, 2, 64] });
      using kv = Tensor.randn([1, 8, 1, 64], { dtype: "bfloat16", device, seed: 3 });
      using r = attention(q, kv, kv, { layout: "bshd", returnLse: true });
      const o = r.output.toArray() as Float32Array, lse = r.lse.toArray() as Float32Array;
      for (let row = 0; row < 8; row++) {
        for (let h = 0; h < 2; h++) {
          const bad = row === 3 && h === 1;
          const slice = o.subarray((row * 2 + h) * 64, (row * 2 + h + 1) * 64);
          assert.ok(slice.every((x) => Number.isNaN(x) === bad), `output row ${row} head ${h}`);
          assert.equal(Number.isNaN(lse[h * 8 + row]), bad, `lse row ${row} head ${h}`);
        }
      }
    }),
);
