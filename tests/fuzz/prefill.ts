// The fuzz catalog's generator for the canonical packed prefill: 16-bit and float8_e4m3 inputs with their
// scales, uniform and ragged offsets; refused: lengths past the maxima, scales of the wrong shape or dtype,
// mixed input dtypes, an output dtype that is not the inputs', bad options.
import * as ak from "../../mod.ts";
import type { Case, Rng, Scope } from "./cases.ts";
import { badTensor, caseMakers } from "./family.ts";

const { valid, invalid } = caseMakers("canonical prefill");

/** Valid prefill calls, and calls the op refuses. */
export function prefillCases(rng: Rng, scope: Scope, bad: boolean): Case {
  const B = rng.int(1, 3), Hkv = rng.int(1, 2), H = Hkv * rng.int(1, 2), D = rng.pick([16, 64]);
  const input = rng.pick<ak.DType>(["float8_e4m3", "bfloat16", "float16"]);
  const dtype = input === "float8_e4m3" ? rng.pick(["bfloat16", "float16"] as const) : input as "bfloat16";
  const lengths = () => Array.from({ length: B }, () => rng.int(0, 12));
  const [lq, lk] = [lengths(), lengths()];
  const cu = (l: number[]) => l.reduce((a, x) => [...a, a[a.length - 1] + x], [0]);
  const [cuQ, cuK] = [cu(lq), cu(lk)];
  const q = scope.randn([cuQ[B], H, D], input, 1);
  const k = scope.randn([cuK[B], Hkv, D], input, 2), v = scope.randn([cuK[B], Hkv, D], input, 3);
  const scale = scope.rand([B, Hkv], 4, 0.5, 1.5);
  const options = {
    batch: B,
    heads: H,
    headsKv: Hkv,
    dim: D,
    maxSeqlenQ: Math.max(1, ...lq),
    maxSeqlenKv: Math.max(1, ...lk),
    dtype,
    isCausal: rng.chance(0.5),
    softcap: rng.pick([undefined, 5]),
  };
  const run = (o: Record<string, unknown>, args: { q?: unknown; s?: unknown; cuQ?: number[] } = {}) => {
    const op = new ak.GroupedQueryAttentionPrefillFwdOp(o as never);
    const s = ("s" in args ? args.s : scale) as ak.Tensor;
    return scope.keep(
      op.forward(("q" in args ? args.q : q) as ak.Tensor, k, v, args.cuQ ?? cuQ, cuK, s, scale, scale),
    );
  };
  if (!bad) return valid(`${input} -> ${dtype}`, () => run(options));
  switch (rng.int(0, 4)) {
    case 0:
      return invalid("length past maxSeqlenQ", () =>
        run({ ...options, maxSeqlenQ: Math.max(1, ...lq) }, {
          q: scope.randn([cuQ[B] + Math.max(1, ...lq) + 1, H, D], input, 5),
          cuQ: [...cuQ.slice(0, B), cuQ[B] + Math.max(1, ...lq) + 1],
        }));
    case 1:
      return invalid(
        "bad scale",
        () =>
          run(options, {
            s: rng.pick<unknown>([scope.rand([B, Hkv + 1], 6), scope.randn([B, Hkv], "bfloat16", 7), null]),
          }),
      );
    case 2:
      return invalid(
        "mixed input dtypes",
        () =>
          run(options, { q: scope.randn([cuQ[B], H, D], input === "float16" ? "bfloat16" : "float16", 8) }),
      );
    case 3:
      return input === "float8_e4m3"
        ? invalid("output dtype", () => run({ ...options, dtype: "float32" }))
        : invalid("output dtype", () =>
          run({ ...options, dtype: input === "bfloat16" ? "float16" : "bfloat16" }));
    default:
      return invalid(
        "bad options",
        () =>
          run({
            ...options,
            ...rng.pick<Record<string, unknown>>([{ backend: "fa3" }, { smScale: -1 }, { scale: 1 }, {
              validateUniformCuSeqlens: 1,
            }, { maxSeqlenKv: -1 }]),
          }),
      );
  }
}

const dense = caseMakers("dense transforms");

/** The dense op's float8 inputs and fused RoPE: valid calls, and inconsistent inputs and options. */
export function denseTransformCases(rng: Rng, scope: Scope, bad: boolean): Case {
  const { valid, invalid } = dense;
  const B = rng.int(1, 2), Hkv = rng.int(1, 2), H = Hkv * rng.int(1, 2), D = rng.pick([16, 64, 128]);
  const Skv = rng.int(1, 9), Sq = rng.int(1, Skv);
  const fp8 = rng.chance(0.5), rope = rng.chance(0.5) || !fp8;
  const dtype = rng.pick(["bfloat16", "float16"] as const), input: ak.DType = fp8 ? "float8_e4m3" : dtype;
  const rotaryDim = rng.pick([undefined, 8]);
  const half = (rotaryDim ?? D) / 2;
  const q = scope.randn([B, Sq, H, D], input, 1);
  const k = scope.randn([B, Skv, Hkv, D], input, 2), v = scope.randn([B, Skv, Hkv, D], input, 3);
  const s = scope.rand([B, Hkv], 4, 0.5, 1.5);
  const cos = scope.randn([Skv + rng.int(0, 2), half], dtype, 5),
    sin = scope.randn(cos.shape as number[], dtype, 6);
  const options = {
    layout: "bshd" as const,
    isCausal: rng.chance(0.5),
    dtype,
    ...(rope
      ? {
        posEncodingMode: "rope" as const,
        rotaryDim,
        ropeLayout: rng.pick(["neox", "interleaved"] as const),
      }
      : {}),
  };
  const run = (o: Record<string, unknown>, a: unknown[]) =>
    scope.keep(
      (new ak.GroupedQueryAttentionDenseFwdOp(o as never).forward as (...x: unknown[]) => ak.Tensor)(
        q,
        k,
        v,
        ...a,
      ),
    );
  const args = [
    fp8 ? s : undefined,
    fp8 ? s : undefined,
    fp8 ? s : undefined,
    rope ? cos : undefined,
    rope ? sin : undefined,
  ];
  if (!bad) return valid(`${fp8 ? "float8" : dtype}${rope ? " + RoPE" : ""}`, () => run(options, args));
  switch (rng.int(0, 4)) {
    case 4: {
      // float8 scales of the wrong shape or dtype, or k not in float8 like q.
      const wrong = rng.pick(["shape", "dtype", "k"] as const);
      const scale = wrong === "shape"
        ? scope.rand([B, Hkv + 1], 8, 0.5, 1.5)
        : wrong === "dtype"
        ? scope.randn([B, Hkv], "float16", 8)
        : s;
      const k16 = scope.randn([B, Skv, Hkv, D], dtype, 9);
      return invalid(`float8 ${wrong}`, () =>
        scope.keep(
          (new ak.GroupedQueryAttentionDenseFwdOp({ layout: "bshd", dtype }).forward as (
            ...x: unknown[]
          ) => ak.Tensor)(
            scope.randn([B, Sq, H, D], "float8_e4m3", 10),
            wrong === "k" ? k16 : scope.randn([B, Skv, Hkv, D], "float8_e4m3", 11),
            scope.randn([B, Skv, Hkv, D], "float8_e4m3", 12),
            scale,
            s,
            s,
          ),
        ));
    }
    case 0:
      return invalid(
        "a scale missing or extra",
        () => run(options, [fp8 ? undefined : s, s, s, ...args.slice(3)]),
      );
    case 1:
      return invalid(
        "a table missing or extra",
        () => run(options, [...args.slice(0, 3), rope ? undefined : cos, sin]),
      );
    case 2:
      return invalid(
        "short table",
        () =>
          run(options, [...args.slice(0, 3), scope.randn([Skv - 1 < 1 ? 0 : Skv - 1, half], dtype, 7), sin]),
      );
    default:
      return invalid(
        "bad RoPE options",
        () =>
          run({
            ...options,
            ...rng.pick<Record<string, unknown>>([
              { posEncodingMode: "alibi" },
              { posEncodingMode: "rope", rotaryDim: 3 },
              { posEncodingMode: "none", rotaryDim: 8 },
              { posEncodingMode: "rope", ropeLayout: "gptj" },
            ]),
          }, args),
      );
  }
}

const paged = caseMakers("paged prefill");

/** The paged prefill with append: valid chunks into shuffled pages; refused: bad tables, lengths, caches. */
export function pagedPrefillCases(rng: Rng, scope: Scope, bad: boolean): Case {
  const B = rng.int(1, 3), Hkv = rng.int(1, 2), H = Hkv * rng.int(1, 2), D = rng.pick([16, 32]);
  const P = rng.pick([1, 4, 8]),
    maxPages = rng.int(1, 4),
    dtype = rng.pick<ak.DType>(["bfloat16", "float16"]);
  const cacheDtype = rng.pick<ak.DType>([dtype, "float8_e4m3"]);
  const cached = Array.from({ length: B }, () => rng.int(0, maxPages * P));
  const chunk = cached.map((c) => rng.int(0, maxPages * P - c));
  const cu = chunk.reduce((a, x) => [...a, a[a.length - 1] + x], [0]);
  const q = scope.randn([cu[B], H, D], dtype, 1);
  const kNew = scope.randn([cu[B], Hkv, D], dtype, 2), vNew = scope.randn([cu[B], Hkv, D], dtype, 3);
  const pages = () => scope.keep(scope.randn([B * maxPages * P, Hkv, D], "float32", 4).cast(cacheDtype));
  const kPages = pages(), vPages = pages();
  const scale = scope.rand([B, Hkv], 5, 0.5, 2);
  // Each request owns its own pages, in a rotated order.
  const shift = rng.int(0, B * maxPages - 1);
  const entries = Int32Array.from({ length: B * maxPages }, (_, i) => (i + shift) % (B * maxPages));
  const table = (e: Int32Array) =>
    scope.keep(ak.Tensor.from(e, { shape: [B, maxPages], device: scope.device }));
  const lengths = (c: number[]) => scope.keep(ak.Tensor.from(Int32Array.from(c), { device: scope.device }));
  const options = {
    batch: B,
    heads: H,
    headsKv: Hkv,
    maxPagesPerReq: maxPages,
    pageSize: P,
    dim: D,
    cacheDtype,
    isCausal: rng.chance(0.8),
    fuseRope: rng.chance(0.5),
  };
  const run = (o: Record<string, unknown>, t = table(entries), c = lengths(cached), s: unknown = scale) => {
    const op = new ak.GroupedQueryAttentionPrefillPagedWithKVCacheFwdOp(o as never);
    return scope.keep(
      op.forward(
        q,
        kNew,
        vNew,
        kPages,
        vPages,
        s as ak.Tensor,
        s as ak.Tensor,
        cu,
        c,
        t,
        Math.max(0, ...chunk),
      ),
    );
  };
  if (!bad) return paged.valid(`${dtype} cache ${cacheDtype} page ${P}`, () => run(options));
  switch (rng.int(0, 3)) {
    case 0: {
      const e = entries.slice();
      e[0] = rng.pick([-1, B * maxPages, 1 << 30]);
      // Entry [0, 0] is read whenever request 0 holds a key; else the lengths are past the table.
      return cached[0] + chunk[0] > 0
        ? paged.invalid("page out of range", () => run(options, table(e)))
        : paged.invalid("lengths past the table", () =>
          run(options, undefined, lengths(cached.map(() => maxPages * P + 1))));
    }
    case 1:
      return paged.invalid(
        "bad blockTable",
        () => run(options, badTensor(rng, scope, table(entries), "blockTable") as ak.Tensor),
      );
    case 2:
      return cacheDtype === "float8_e4m3"
        ? paged.invalid("float8 cache without scales", () => run(options, undefined, undefined, null))
        : paged.invalid(
          "scale of the wrong shape",
          () => run(options, undefined, undefined, scope.rand([B + 1, Hkv], 6)),
        );
    default:
      return paged.invalid(
        "bad options",
        () =>
          run({
            ...options,
            ...rng.pick<Record<string, unknown>>([
              { rotaryDim: 3, fuseRope: true },
              { ropeBase: 1e4, fuseRope: false },
              {
                cacheDtype: "float32",
              },
              { pageSize: 0 },
              { ropeLayout: "gptj", fuseRope: true },
            ]),
          }),
      );
  }
}
