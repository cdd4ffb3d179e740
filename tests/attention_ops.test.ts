// The attention op classes (construct once, call many) against the float64 oracle under the
// FlashAttention rule of tests/attention_cases.ts, with their defaults (isCausal false), their own
// options, both dense layouts, and their call checks (layout required, sizes fixed at construction,
// dtype fixed by the first call).
import assert from "node:assert/strict";
import {
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
  Tensor,
} from "../mod.ts";
import { type AttentionCase, checkBackward, checkForward, type ForwardRunner } from "./attention_cases.ts";
import { deviceTest, expectNoLeak, withSeed } from "./helpers.ts";

function refuses(fn: () => unknown, pattern: RegExp): void {
  assert.throws(
    fn,
    (e: unknown) => e instanceof AttnkitError && e.code === "INVALID_ARGUMENT" && pattern.test(e.message),
  );
}

// Two calls of one op on fresh inputs: the op is built once.
async function twice(device: Device, c: AttentionCase, run: ForwardRunner, lse = true) {
  await withSeed((seed) => checkForward(device, c, seed, run, lse));
  await withSeed((seed) => checkForward(device, c, seed, run, lse));
}

/** An op's layout, sizes and mask options, as its constructor takes them. */
interface OpConfig {
  layout: "bshd" | "bhsd" | "thd";
  batch?: number;
  heads: number;
  headsKv?: number;
  seqLen?: number;
  dim: number;
  isCausal?: boolean;
  windowSizeLeft?: number;
  windowSizeRight?: number;
  scale?: number;
  softcap?: number;
}

/**
 * The oracle's case for an op built with `config`: the same sizes and mask under AttentionCase's
 * names (headsKv defaults to heads, as MHA's; a varlen op's lengths come in `extra`).
 */
function caseOf(
  dtype: AttentionCase["dtype"],
  config: OpConfig,
  extra: Partial<AttentionCase> = {},
): AttentionCase {
  const { layout, batch, heads, headsKv = heads, seqLen, dim, isCausal, scale, softcap } = config;
  const dense = layout === "thd" ? {} : { batch, seqQ: seqLen, layout };
  const window = { windowLeft: config.windowSizeLeft, windowRight: config.windowSizeRight };
  return { dtype, heads, headsKv, dim, ...dense, causal: isCausal, ...window, scale, softcap, ...extra };
}

deviceTest("MultiHeadAttentionFwdOp: causal, output and LSE", async (device) => {
  const config = { layout: "bshd", batch: 2, heads: 4, seqLen: 100, dim: 64, isCausal: true } as const;
  const op = new MultiHeadAttentionFwdOp(config);
  const c = caseOf("bfloat16", config);
  await twice(device, c, (x, out) => op.forward(x.q, x.k, x.v, out)[Symbol.dispose]());
});

deviceTest("MultiHeadAttentionFwdOp: layout bhsd, not causal by default", async (device) => {
  const config = { layout: "bhsd", batch: 2, heads: 3, seqLen: 70, dim: 64 } as const;
  const op = new MultiHeadAttentionFwdOp(config);
  assert.equal(op.mask.causal, false);
  const c = caseOf("float16", config);
  await twice(device, c, (x, out) => op.forward(x.q, x.k, x.v, out)[Symbol.dispose]());
});

deviceTest("GroupedQueryAttentionFwdOp: scale and softcap", async (device) => {
  const sizes = { batch: 1, heads: 8, headsKv: 2, seqLen: 80, dim: 128 };
  const config = { layout: "bshd", ...sizes, scale: 0.2, softcap: 4 } as const;
  const op = new GroupedQueryAttentionFwdOp(config);
  const c = caseOf("float16", config, { qStd: 2 });
  await twice(device, c, (x, out) => op.forward(x.q, x.k, x.v, out)[Symbol.dispose]());
});

deviceTest("MultiHeadAttentionBwdOp and GroupedQueryAttentionBwdOp: gradients", async (device) => {
  const mhaConfig = { layout: "bshd", batch: 1, heads: 2, seqLen: 64, dim: 64, isCausal: true } as const;
  const mha = new MultiHeadAttentionBwdOp({ ...mhaConfig, deterministic: true });
  await withSeed((seed) =>
    checkBackward(
      device,
      caseOf("bfloat16", mhaConfig),
      seed,
      true,
      (x, a, out) => mha.backward(a.dOut, x.q, x.k, x.v, a.output, a.lse, out)[Symbol.dispose](),
    )
  );
  const gqaSizes = { batch: 2, heads: 4, headsKv: 1, seqLen: 50, dim: 96 };
  const gqaConfig = {
    layout: "bshd",
    ...gqaSizes,
    windowSizeLeft: 7,
    windowSizeRight: 3,
    softcap: 2,
  } as const;
  const gqa = new GroupedQueryAttentionBwdOp(gqaConfig);
  await withSeed((seed) =>
    checkBackward(
      device,
      caseOf("float16", gqaConfig, { qStd: 2 }),
      seed,
      false,
      (x, a, out) => gqa.backward(a.dOut, x.q, x.k, x.v, a.output, a.lse, out)[Symbol.dispose](),
    )
  );
});

deviceTest(
  "GroupedQueryAttentionDenseFwdOp: rectangular, window, softcap; shapes per call",
  async (device) => {
    const op = new GroupedQueryAttentionDenseFwdOp({
      layout: "bshd",
      isCausal: true,
      windowSizeLeft: 24,
      softcap: 5,
    });
    const run: ForwardRunner = (x, out) => op.forward(x.q, x.k, x.v, out);
    const base = { heads: 8, headsKv: 1, dim: 64, causal: true, windowLeft: 24, softcap: 5 } as const;
    await withSeed((seed) =>
      checkForward(device, { ...base, dtype: "bfloat16", batch: 1, seqQ: 17, seqKv: 90 }, seed, run)
    );
    await withSeed((seed) =>
      checkForward(device, { ...base, dtype: "bfloat16", batch: 2, seqQ: 90, seqKv: 40 }, seed, run)
    );
  },
);

deviceTest("GroupedQueryAttentionSlidingWindowFwdOp: causal window", async (device) => {
  const sizes = { batch: 1, heads: 4, headsKv: 2, seqLen: 130, dim: 64 };
  const config = { layout: "bshd", ...sizes, isCausal: true, windowSizeLeft: 15 } as const;
  const op = new GroupedQueryAttentionSlidingWindowFwdOp(config);
  await twice(device, caseOf("float16", config), (x, out) => op.forward(x.q, x.k, x.v, out), false);
});

const RAGGED = { lengthsQ: [5, 0, 1, 40], lengthsKv: [9, 3, 0, 40] };

deviceTest("GroupedQueryAttentionPrefillVarlenFwdOp: causal packed prefill", async (device) => {
  const config = { layout: "thd", batch: 4, heads: 4, headsKv: 1, dim: 128, isCausal: true } as const;
  const op = new GroupedQueryAttentionPrefillVarlenFwdOp({
    ...config,
    maxSeqlenQ: 40,
    maxSeqlenK: 40,
    validateInputs: true,
  });
  const c = caseOf("bfloat16", config, RAGGED);
  // device int32 offsets, then host offsets
  await withSeed((seed) =>
    checkForward(device, c, seed, (x, out) => {
      using cuQ = Tensor.from(new Int32Array(x.geometry.qStart), { device });
      using cuK = Tensor.from(new Int32Array(x.geometry.kvStart), { device });
      op.forward(x.q, x.k, x.v, cuQ, cuK, out);
    })
  );
  await withSeed((seed) =>
    checkForward(device, c, seed, (x, out) => {
      op.forward(x.q, x.k, x.v, x.geometry.qStart, x.geometry.kvStart, out);
    })
  );
});

deviceTest("GroupedQueryAttentionSlidingWindowVarlenFwdOp: window on both sides", async (device) => {
  const sizes = { batch: 4, heads: 2, headsKv: 2, dim: 64 };
  const config = { layout: "thd", ...sizes, windowSizeLeft: 4, windowSizeRight: 2 } as const;
  const op = new GroupedQueryAttentionSlidingWindowVarlenFwdOp(config);
  await twice(device, caseOf("float16", config, RAGGED), (x, out) => {
    using cuQ = Tensor.from(BigInt64Array.from(x.geometry.qStart, BigInt), { device }); // int64 offsets
    using cuK = Tensor.from(new Int32Array(x.geometry.kvStart), { device });
    op.forward(x.q, x.k, x.v, cuQ, cuK, 40, out);
  }, false);
});

deviceTest(
  "attention op classes: sizes fixed at construction, dtype fixed by the first call",
  (device) =>
    expectNoLeak(device, () => {
      const L = { layout: "bshd" } as const;
      refuses(
        () => new GroupedQueryAttentionFwdOp({ ...L, batch: 1, heads: 6, headsKv: 4, seqLen: 8, dim: 64 }),
        /heads: 6 query heads are not a multiple of headsKv \(4\)/,
      );
      refuses(
        () => new MultiHeadAttentionFwdOp({ ...L, batch: 1, heads: 2, seqLen: 8, dim: 100 }),
        /dim: expected a multiple of 8/,
      );
      refuses(
        () => new MultiHeadAttentionBwdOp({ ...L, batch: 0, heads: 2, seqLen: 8, dim: 64 }),
        /batch: expected an integer >= 1/,
      );
      refuses(
        () => new GroupedQueryAttentionDenseFwdOp({ ...L, windowSizeLeft: -2 }),
        /windowSizeLeft: expected -1 \(unlimited\) or an integer size >= 0, got -2/,
      );
      refuses(
        () => new GroupedQueryAttentionDenseFwdOp({ ...L, softcap: -1 }),
        /softcap: expected a finite number >= 0/,
      );
      refuses(
        () => new GroupedQueryAttentionDenseFwdOp({ ...L, scale: 0 }),
        /scale: expected a finite number > 0/,
      );
      refuses(
        () => new GroupedQueryAttentionDenseFwdOp({ ...L, smScale: 0.1 } as never),
        /unknown option 'smScale' \(did you mean 'scale'\?\)/,
      );

      const op = new MultiHeadAttentionFwdOp({ ...L, batch: 1, heads: 2, seqLen: 8, dim: 64 });
      using q = Tensor.randn([1, 8, 2, 64], { dtype: "bfloat16", device, seed: 1 });
      using wrong = Tensor.randn([1, 9, 2, 64], { dtype: "bfloat16", device, seed: 1 });
      using half = Tensor.randn([1, 8, 2, 64], { dtype: "float16", device, seed: 1 });
      refuses(
        () => op.forward(wrong, q, q),
        /MultiHeadAttentionFwdOp: q: expected shape \[1, 8, 2, 64\], got \[1, 9, 2, 64\] \(layout "bshd" reads/,
      );
      op.forward(q, q, q)[Symbol.dispose]();
      refuses(() => op.forward(half, half, half), /first called with bfloat16; got float16/);

      const varlen = new GroupedQueryAttentionPrefillVarlenFwdOp({
        layout: "thd",
        batch: 2,
        heads: 2,
        headsKv: 2,
        dim: 64,
        maxSeqlenQ: 4,
        maxSeqlenK: 8,
        validateInputs: true,
      });
      using pq = Tensor.randn([8, 2, 64], { dtype: "bfloat16", device, seed: 2 });
      using cu = Tensor.from(new Int32Array([0, 3, 8]), { device });
      refuses(
        () => varlen.forward(pq, pq, pq, cu, cu),
        /cuSeqlensQ: sequence 1 has 5 tokens, more than maxSeqlenQ \(4\)/,
      );
      using cu3 = Tensor.from(new Int32Array([0, 8]), { device });
      refuses(() => varlen.forward(pq, pq, pq, cu3, cu3), /cuSeqlensQ: expected shape \[3\], got \[2\]/);
    }),
);
