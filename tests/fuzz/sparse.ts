// The fuzz catalog's generators for sparse attention: NSA's three branches on random packed sequences
// (empty and shorter than a block among them), DSA decode with padded top-k lists, the lightning indexer
// on bfloat16 and float8 inputs; refused: bad indices (out of range, listed twice, counts past the list,
// the wrong dtype), token indices that disagree with the offsets, key ranges past the keys, bad sizes.
import * as ak from "../../mod.ts";
import { type Case, PIN_REFUSAL, type Rng, type Scope } from "./cases.ts";
import { badTensor, caseMakers } from "./family.ts";

const nsa = caseMakers("NSA");

/** A random packing: N sequences of 0..max tokens, with their offsets, token indices and chunk offsets. */
function packing(rng: Rng, scope: Scope, bs: number, stride: number) {
  const N = rng.int(1, 3);
  const lengths = Array.from({ length: N }, () => rng.pick([0, rng.int(1, bs - 1), rng.int(bs, 3 * bs)]));
  const offsets = lengths.reduce((a, x) => [...a, a[a.length - 1] + x], [0]);
  const tokens = scope.keep(ak.nsaTokenIndices(offsets, { device: scope.device }));
  const chunks = scope.keep(ak.nsaChunkOffsets(offsets, bs, { stride, device: scope.device }));
  const chunkNum = (chunks.toArray() as Int32Array)[N];
  return { N, T: offsets[N], offsets, lengths, tokens, chunks, chunkNum };
}

/** NSA's compressed, selection and selected branches. */
export function nsaCases(rng: Rng, scope: Scope, bad: boolean): Case {
  const bs = rng.pick([4, 8]),
    Hkv = rng.int(1, 2),
    G = rng.pick([1, 2, 4]),
    H = Hkv * G,
    D = rng.pick([8, 16, 64]);
  const dtype = rng.pick<ak.DType>(["bfloat16", "float16", "float32"]);
  const bc = rng.pick([bs, bs / 2]);
  const p = packing(rng, scope, bs, bc);
  const q = scope.randn([p.T, H, D], dtype, 1);
  const kCmp = scope.randn([p.chunkNum, Hkv, D], dtype, 2),
    vCmp = scope.randn([p.chunkNum, Hkv, D], dtype, 3);
  const k = scope.randn([p.T, Hkv, D], dtype, 4), v = scope.randn([p.T, Hkv, D], dtype, 5);
  const S = rng.int(1, 4);
  const shared = { cSeqLen: p.T, heads: H, group: G, chunkNum: p.chunkNum, bs };
  const cmp = (
    o: Record<string, unknown> = {},
    args: unknown[] = [q, kCmp, vCmp, p.offsets, p.chunks, p.tokens],
  ) => {
    const op = new ak.NSACmpFwdVarlenOp({ ...shared, seqNum: p.N, dimK: D, dimV: D, ...o } as never);
    const r = (op.forward as (...a: unknown[]) => ak.OutputWithLse).call(op, ...args);
    scope.keep(r.output);
    return scope.keep(r.lse);
  };
  // Selection needs bc = bs: its compressed rows come from a packing with that stride.
  const topk = (o: Record<string, unknown> = {}) => {
    const op = new ak.NSATopkVarlenOp({ ...shared, seqNum: p.N, dim: D, selectedBlockNum: S, ...o } as never);
    const lse = scope.rand([p.T, H], 7, -1, 1);
    return scope.keep(op.forward(q, kCmp, lse, p.offsets, p.chunks, p.tokens));
  };
  // Valid lists: each query's own block, then block 0, then -1.
  const ownBlocks = () => {
    const list = new Int32Array(p.T * Hkv * S).fill(-1);
    for (let n = 0; n < p.N; n++) {
      for (let t = p.offsets[n]; t < p.offsets[n + 1]; t++) {
        const b = Math.floor((t - p.offsets[n]) / bs);
        for (let h = 0; h < Hkv; h++) {
          list[(t * Hkv + h) * S] = b;
          if (S > 1 && b > 0) list[(t * Hkv + h) * S + 1] = 0;
        }
      }
    }
    return list;
  };
  const blocks = (list: Int32Array) =>
    scope.keep(ak.Tensor.from(list, { shape: [p.T, Hkv, S], device: scope.device }));
  const selected = (
    list: unknown,
    counts: unknown,
    o: Record<string, unknown> = {},
    tokens: unknown = p.tokens,
  ) => {
    const op = new ak.NSAFwdVarlenOp({
      batch: p.N,
      heads: H,
      cSeqLen: p.T,
      dim: D,
      blockSize: bs,
      groups: G,
      selectedBlocks: S,
      isCausal: rng.chance(0.8),
      ...o,
    } as never);
    return scope.keep(
      (op.forward as (...a: unknown[]) => ak.Tensor).call(op, q, k, v, list, counts, p.offsets, tokens),
    );
  };
  // The per-item kernels serve every call; the blocks (CUDA cores, tensor cores) 16-bit inputs at head dim 64
  // here (a pin where one cannot serve is refused, naming why).
  const blockPin = () => rng.pick([undefined, "item", "tiled", "mma"]);
  const blockServes = dtype !== "float32" && D === 64;
  const refusal = (pin: string | undefined) =>
    pin && pin !== "item" && !blockServes ? PIN_REFUSAL : undefined;
  if (!bad) {
    switch (rng.int(0, 2)) {
      case 0: {
        const pin = blockPin();
        return nsa.valid(
          `compressed ${dtype} bs${bs} G${G} D${D}${pin ? ` ${pin} pinned` : ""}`,
          () =>
            cmp({
              bc: bc === bs ? rng.pick([undefined, bs]) : bc,
              kernelMap: pin ? { "sparse.nsa.compression": pin } : undefined,
            }),
          true,
          refusal(pin),
        );
      }
      case 1: {
        if (bc !== bs) return nsa.invalid("selection with bc != bs", () => topk({ bc }));
        // The per-item kernel serves every call; the tensor-core one 16-bit inputs at head dim 64 here (a
        // pin where it cannot serve is refused, naming why).
        const pin = rng.pick([undefined, "item", "mma"]);
        const serves = dtype !== "float32" && D === 64;
        return nsa.valid(
          `selection ${dtype} D${D} S${S}${pin ? ` ${pin} pinned` : ""}`,
          () => topk({ kernelMap: pin ? { "sparse.nsa.topk": pin } : undefined }),
          true,
          pin === "mma" && !serves ? PIN_REFUSAL : undefined,
        );
      }
      default: {
        const pin = blockPin();
        return nsa.valid(
          `selected ${dtype} S${S} D${D}${pin ? ` ${pin} pinned` : ""}`,
          () =>
            selected(
              blocks(ownBlocks()),
              rng.pick([undefined, 1, S]),
              pin ? { kernelMap: { "sparse.nsa.selection": pin } } : {},
            ),
          true,
          refusal(pin),
        );
      }
    }
  }
  const some = p.T > 0 && p.lengths.some((l) => l > 0);
  switch (rng.int(0, 5)) {
    case 0: {
      if (!some) return nsa.invalid("blockCounts past the list", () => selected(blocks(ownBlocks()), S + 1));
      const list = ownBlocks();
      list[0] = rng.pick([-2, 1 << 20]);
      return nsa.invalid("block out of range", () => selected(blocks(list), undefined));
    }
    case 1: {
      if (!some || S < 2) return nsa.invalid("negative blockCounts", () => selected(blocks(ownBlocks()), -1));
      const list = ownBlocks();
      list[1] = list[0];
      return nsa.invalid("block listed twice", () => selected(blocks(list), undefined));
    }
    case 2:
      return nsa.invalid("bad blockIndices", () =>
        selected(
          rng.chance(0.5)
            ? scope.keep(blocks(ownBlocks()).cast("int64"))
            : badTensor(rng, scope, blocks(ownBlocks()), "blockIndices"),
          undefined,
        ));
    case 3: {
      if (p.T === 0) return nsa.invalid("bad q", () => cmp({}, [badTensor(rng, scope, q, "q"), kCmp, vCmp]));
      const wrong = scope.keep(ak.Tensor.zeros([p.T, 2], { dtype: "int32", device: scope.device }));
      const last = p.lengths.findLastIndex((l) => l > 0);
      return last === 0 && p.lengths[0] === 1
        ? nsa.invalid(
          "bad tokenIndices shape",
          () => selected(blocks(ownBlocks()), undefined, {}, scope.randn([3], "float32", 9)),
        )
        : nsa.invalid(
          "tokenIndices against the offsets",
          () => selected(blocks(ownBlocks()), undefined, {}, wrong),
        );
    }
    case 4:
      return nsa.invalid(
        "bad chunkOffsets",
        () =>
          cmp({}, [
            q,
            kCmp,
            vCmp,
            p.offsets,
            rng.pick<unknown>([[0], [1, ...new Array(p.N).fill(1)], "x"]),
            p.tokens,
          ]),
      );
    default:
      return nsa.invalid(
        "bad sizes",
        () =>
          cmp(
            rng.pick<Record<string, unknown>>([
              { group: H + 1 },
              { bs: 0 },
              { bc: 2 * bs },
              {
                accumDtype: "float16",
              },
              {
                tune: "yes",
              },
              { kernelMap: { "sparse.nsa.selection": "item" } },
              { scale: -1 },
            ]),
          ),
      );
  }
}

const dsa = caseMakers("DSA decode");

/** DeepSeek sparse attention decode over a latent cache with padded top-k lists. */
export function dsaCases(rng: Rng, scope: Scope, bad: boolean): Case {
  const B = rng.int(0, 2),
    Sq = rng.int(1, 3),
    Skv = rng.int(1, 24),
    Hkv = rng.int(1, 2),
    H = Hkv * rng.int(1, 4);
  // DeepSeek's 512 + 64 (the tensor-core block's shape) now and then, small dims otherwise.
  const latent = rng.chance(0.15);
  const dim = latent ? 512 : rng.pick([16, 32]), tail = latent ? 64 : rng.pick([0, 8]);
  const topk = rng.int(1, latent ? 70 : 8), stride = rng.pick([1, 2, 4]);
  const dtype = rng.pick<ak.DType>(["bfloat16", "float16", "float32"]);
  const q = scope.randn([B, Sq, H, dim + tail], dtype, 1),
    kv = scope.randn([B, Skv, Hkv, dim + tail], dtype, 2);
  // Distinct rows, then padding (-1 or Skv).
  const list = new Int32Array(B * Sq * Hkv * topk);
  for (let r = 0; r < B * Sq * Hkv; r++) {
    for (let e = 0; e < topk; e++) list[r * topk + e] = e < Skv && rng.chance(0.8) ? e : rng.pick([-1, Skv]);
  }
  const indices = scope.keep(ak.Tensor.from(list, { shape: [B, Sq, Hkv, topk], device: scope.device }));
  const sizes = {
    batch: B,
    heads: H,
    seqLen: Sq,
    seqLenKv: Skv,
    dim,
    dimTail: tail,
    topk,
    strideKv: stride,
    headsKv: Hkv,
    qStartIndexS: rng.int(0, Skv * stride),
    isCausal: rng.chance(0.7),
  };
  const run = (o: Record<string, unknown>, ix: unknown = indices, query: unknown = q) => {
    const op = new ak.DeepSeekSparseAttentionDecodeWithKVCacheFwdOp(o as never);
    return scope.keep((op.forward as (...a: unknown[]) => ak.Tensor).call(op, query, kv, ix));
  };
  if (!bad) {
    const map = rng.chance(0.2) ? { kernelMap: { "sparse.dsa.decode": rng.pick(["auto", "item"]) } } : {};
    return dsa.valid(`${dtype} D${dim}+${tail} topk${topk} stride${stride}`, () => run({ ...sizes, ...map }));
  }
  switch (rng.int(0, 4)) {
    case 0: {
      if (B === 0 || topk < 2 || Skv < 1) {
        return dsa.invalid("bad indices", () => run(sizes, badTensor(rng, scope, indices, "indices")));
      }
      const twice = list.slice();
      twice[0] = twice[1] = 0;
      return dsa.invalid(
        "a row listed twice",
        () =>
          run(sizes, scope.keep(ak.Tensor.from(twice, { shape: [B, Sq, Hkv, topk], device: scope.device }))),
      );
    }
    case 1:
      return dsa.invalid("int64 indices", () => run(sizes, scope.keep(indices.cast("int64"))));
    case 2:
      return dsa.invalid("bad q", () => run(sizes, indices, badTensor(rng, scope, q, "q")));
    case 3:
      // The tensor-core block forced where it cannot serve (float32, or not 512 + 64), or an unknown key.
      return dsa.invalid("a kernelMap that cannot serve", () =>
        run({
          ...sizes,
          kernelMap: rng.chance(0.5) && (dtype === "float32" || !latent)
            ? { "sparse.dsa.decode": rng.pick(["mma", "wgmma"]) }
            : rng.pick<Record<string, string>>([{ "sparse.dsa.decode": "tiled" }, {
              "attention.decode": "mma",
            }]),
        }));
    default:
      return dsa.invalid(
        "bad sizes",
        () =>
          run({
            ...sizes,
            ...rng.pick<Record<string, unknown>>([
              { headsKv: H + 1 },
              { strideKv: 0 },
              { qStartIndexS: -1 },
              {
                smScale: NaN,
              },
              { dimTail: -1 },
              { topk: 0 },
            ]),
          }),
      );
  }
}

const indexer = caseMakers("lightning indexer");

/** The indexer on bfloat16 / float8 inputs with random key ranges. */
export function indexerCases(rng: Rng, scope: Scope, bad: boolean): Case {
  // Now and then DeepSeek's 64 heads of 128 dims (the tensor-core kernels), with more than one tile of keys.
  const latent = rng.chance(0.15);
  const Sq = rng.int(0, 5), Sk = rng.int(0, latent ? 150 : 20);
  const H = latent ? 64 : rng.int(1, 4), D = latent ? 128 : rng.pick([16, 32]);
  const dtype = rng.pick<ak.DType>(["bfloat16", "float8_e4m3"]);
  const q = scope.keep(scope.randn([Sq, H, D], "float32", 1).cast(dtype));
  const k = scope.keep(scope.randn([Sk, D], "float32", 2).cast(dtype));
  const w = scope.rand([Sq, H], 3, -1, 1), kScale = scope.rand([Sk], 4, 0.5, 2);
  const lo = Int32Array.from({ length: Sq }, () => rng.int(0, Sk));
  const hi = lo.map((l) => rng.int(l, Sk));
  const ks = scope.keep(ak.Tensor.from(lo, { device: scope.device }));
  const ke = scope.keep(ak.Tensor.from(hi, { device: scope.device }));
  const run = (
    o: Record<string, unknown>,
    args: unknown[] = [q, k, w, ks, ke, rng.pick([undefined, kScale])],
  ) => {
    const op = new ak.FP8LightningIndexerFwdOp(o as never);
    return scope.keep((op.forward as (...a: unknown[]) => ak.Tensor).call(op, ...args));
  };
  const clean = rng.chance(0.5);
  if (!bad) {
    const map = rng.chance(0.2) ? { kernelMap: { "sparse.indexer": rng.pick(["auto", "item"]) } } : {};
    return indexer.valid(
      `${dtype} H${H} D${D} clean ${clean}`,
      () => run({ cleanLogits: clean, ...map }),
      !clean,
    );
  }
  switch (rng.int(0, 4)) {
    case 0: {
      const past = scope.keep(
        ak.Tensor.from(new Int32Array(Math.max(Sq, 1)).fill(Sk + 1), { device: scope.device }),
      );
      return Sq === 0
        ? indexer.invalid("bad weights", () => run({}, [q, k, badTensor(rng, scope, w, "weights"), ks, ke]))
        : indexer.invalid("key range past the keys", () => run({}, [q, k, w, ks, past]));
    }
    case 1:
      return indexer.invalid(
        "mixed dtypes",
        () =>
          run({}, [
            q,
            scope.keep(
              scope.randn([Sk, D], "float32", 5).cast(dtype === "bfloat16" ? "float8_e4m3" : "bfloat16"),
            ),
            w,
            ks,
            ke,
          ]),
      );
    case 3:
      // The tensor-core block forced where it cannot serve, or a key of another op.
      return indexer.invalid("a kernelMap that cannot serve", () =>
        run({
          kernelMap: !latent && rng.chance(0.5)
            ? { "sparse.indexer": rng.pick(["mma", "wgmma"]) }
            : rng.pick<Record<string, string>>([{ "sparse.indexer": "tiled" }, {
              "sparse.dsa.decode": "mma",
            }]),
        }));
    case 2:
      return indexer.invalid(
        "float16 q",
        () => run({}, [scope.randn([Sq, H, D], "float16", 6), k, w, ks, ke]),
      );
    default:
      return indexer.invalid(
        "bad options",
        () =>
          run(
            rng.pick<Record<string, unknown>>([{ config: { block: 64 } }, { cleanLogits: 1 }, {
              clean: true,
            }]),
          ),
      );
  }
}
