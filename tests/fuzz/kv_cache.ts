// The fuzz catalog's generator for decode over a KV cache: the four decode op classes on small random
// caches (contiguous and paged, some sequences empty, indices checked or trusted), and certainly invalid calls: block tables with a
// page past the cache, a negative page in use, a table too narrow for a length, lengths past the cache,
// bad tensors and options.
import * as ak from "../../mod.ts";
import { type Case, PIN_REFUSAL, type Rng, type Scope } from "./cases.ts";
import { badTensor, caseMakers } from "./family.ts";

const { valid, invalid } = caseMakers("kv-cache decode");

/** A random decode call's pieces; `table` names each sequence's pages, -1 past its last. */
function decodeCall(rng: Rng, scope: Scope) {
  const gqa = rng.chance(0.5), paged = rng.chance(0.5);
  const B = rng.int(1, 3), Hkv = rng.int(1, 2), H = gqa ? Hkv * rng.int(1, 3) : Hkv;
  const D = rng.pick([16, 64]), Sq = gqa ? 1 : rng.int(1, 3), pageSize = rng.pick([4, 16]);
  const dtype = rng.pick<ak.DType>(["bfloat16", "float16"]);
  const lengths = Array.from({ length: B }, () => rng.pick([0, 1, rng.int(1, 40)]));
  const width = Math.max(1, ...lengths.map((l) => Math.ceil(l / pageSize)));
  const pages = B * width;
  const table = lengths.map((_, b) => Array.from({ length: width }, (_, p) => b * width + p));
  const Skv = paged ? pages * pageSize : Math.max(1, ...lengths);
  const kvShape = paged ? [Skv, Hkv, D] : [B, Skv, Hkv, D];
  const q = scope.randn(gqa ? [B, H, D] : [B, Sq, H, D], dtype, 1);
  const k = scope.randn(kvShape, dtype, 2), v = scope.randn(kvShape, dtype, 3);
  const int32 = (x: number[] | number[][]) =>
    scope.keep(ak.Tensor.from(x, { dtype: "int32", device: scope.device }));
  const sizes = { batch: B, heads: H, seqlenKv: Skv, dim: D };
  const make = (extra: Record<string, unknown> = {}) => {
    if (gqa) {
      const o = { ...sizes, headsKv: Hkv, softcap: rng.pick([undefined, 0, 10]), ...extra };
      return paged
        ? new ak.GroupedQueryAttentionDecodePagedWithKVCacheFwdOp({ pageSize, ...o } as never)
        : new ak.GroupedQueryAttentionDecodeWithKVCacheFwdOp(o as never);
    }
    const o = { ...sizes, seqlenQ: Sq, isCausal: rng.chance(0.5), ...extra };
    return paged
      ? new ak.MultiHeadAttentionDecodePagedWithKVCacheFwdOp({ pageSize, ...o } as never)
      : new ak.MultiHeadAttentionDecodeWithKVCacheFwdOp(o as never);
  };
  const run = (
    op: ReturnType<typeof make>,
    args: { q?: unknown; k?: unknown; lengths?: unknown; table?: unknown } = {},
  ) => {
    const call = op.forward as (...a: unknown[]) => ak.Tensor;
    const lens = "lengths" in args ? args.lengths : int32(lengths);
    const t = "table" in args ? args.table : int32(table);
    return scope.keep(
      call.call(op, "q" in args ? args.q : q, "k" in args ? args.k : k, v, lens, ...(paged ? [t] : [])),
    );
  };
  return { gqa, paged, B, H, D, Sq, pageSize, lengths, table, width, pages, q, k, int32, make, run };
}

/** Valid decode steps, and calls no decode op accepts. */
export function kvCacheCases(rng: Rng, scope: Scope, bad: boolean): Case {
  const c = decodeCall(rng, scope);
  const name = `${c.gqa ? "GQA" : "MHA"} ${c.paged ? "paged" : "contiguous"}`;
  if (!bad) {
    const checkIndices = rng.pick([undefined, true, false]);
    const kernelMap = rng.pick([undefined, { "attention.decode": rng.pick(["tiled", "warp", "mma"]) }]);
    return valid(
      `${name}${checkIndices === false ? " unchecked" : ""}${kernelMap ? " pinned" : ""}`,
      () => c.run(c.make({ checkIndices, kernelMap })),
      true,
      kernelMap && PIN_REFUSAL,
    );
  }
  switch (rng.int(0, 5)) {
    case 0: {
      // A page past the cache, or a negative one, where a sequence with keys reads.
      const b = c.lengths.findIndex((l) => l > 0);
      if (!c.paged || b < 0) {
        return invalid(`${name}(length past the cache)`, () =>
          c.run(c.make(), {
            lengths: c.int32(c.lengths.map((l, i) => (i === 0 ? c.width * c.pageSize + 1 : l))),
          }));
      }
      const table = c.table.map((r) => [...r]);
      table[b][0] = rng.pick([c.pages, c.pages + 7, -1, -5]);
      return invalid(`${name}(block table: bad page)`, () => c.run(c.make(), { table: c.int32(table) }));
    }
    case 1: {
      // A table too narrow for the longest sequence, or the wrong batch.
      const longest = Math.max(...c.lengths);
      if (!c.paged || longest <= c.pageSize) {
        return invalid(
          `${name}(realSeqlenKv shape)`,
          () => c.run(c.make(), { lengths: c.int32([...c.lengths, 1]) }),
        );
      }
      const narrow = c.table.map((r) => r.slice(0, Math.ceil(longest / c.pageSize) - 1));
      return invalid(`${name}(block table too narrow)`, () => c.run(c.make(), { table: c.int32(narrow) }));
    }
    case 2:
      return invalid(`${name}(bad q)`, () => c.run(c.make(), { q: badTensor(rng, scope, c.q, "q") }));
    case 3:
      return invalid(`${name}(bad k)`, () => c.run(c.make(), { k: badTensor(rng, scope, c.k, "k") }));
    case 4:
      return invalid(
        `${name}(bad lengths)`,
        () =>
          c.run(c.make(), {
            lengths: rng.pick<unknown>([
              [1, 2],
              scope.keep(ak.Tensor.from(c.lengths, { device: scope.device })),
              c.int32(c.lengths.map((l) => -1 - l)),
              ...(c.paged ? [undefined] : []),
            ]),
          }),
      );
    default:
      return invalid(
        `${name}(bad options)`,
        () =>
          c.run(
            c.make(
              rng.pick<Record<string, unknown>>([
                { dim: 12 },
                { batch: 0 },
                { seqlenKv: 0 },
                { scale: 0.1 },
                { causal: true },
                { checkIndices: rng.pick<unknown>(["no", 1, null]) },
                {
                  kernelMap: rng.pick<unknown>([{ "attention.decode": "fast" }, {
                    "attention.fwd": "general",
                  }, 3]),
                },
                { tune: "yes" },
                c.gqa ? { smScale: -1 } : { isCausal: 1 },
                c.paged ? { pageSize: rng.pick([0, -1, 2.5]) } : { pageSize: 4 },
              ]),
            ),
          ),
      );
  }
}

const mla = caseMakers("MLA decode");

/** MLA decode on small latents and DeepSeek's: valid calls, and bad shapes, dtypes and sizes. */
export function mlaCases(rng: Rng, scope: Scope, bad: boolean): Case {
  // Now and then DeepSeek-V3's 512 + 64 (the tensor-core block) with up to two groups of 16 heads.
  const latent = rng.chance(0.15);
  const B = rng.int(1, 2), Hkv = rng.int(1, 2), H = Hkv * (latent ? rng.int(1, 20) : rng.int(1, 3));
  const S = latent ? rng.int(1, 70) : rng.int(1, 9);
  const D = latent ? 512 : rng.pick([16, 32]), P = latent ? 64 : rng.pick([0, 8]);
  const dtype = rng.pick<ak.DType>(["bfloat16", "float16"]);
  const q = scope.randn([B, H, D], dtype, 1), qPe = scope.randn([B, H, P], dtype, 2);
  const k = scope.randn([B, S, Hkv, D], dtype, 3), kPe = scope.randn([B, S, Hkv, P], dtype, 4);
  const sizes = { batch: B, heads: H, headsKv: Hkv, seqlenKv: S, dim: D, peDim: P };
  const run = (o: Record<string, unknown>, args: unknown[] = [q, qPe, k, kPe]) => {
    const op = new ak.MultiHeadLatentAttentionDecodeWithKVCacheFwdOp(o as never);
    return scope.keep((op.forward as (...a: unknown[]) => ak.Tensor).call(op, ...args));
  };
  if (!bad) return mla.valid(`${dtype} D${D}+${P}`, () => run(sizes));
  switch (rng.int(0, 2)) {
    case 0:
      return mla.invalid("bad k", () => run(sizes, [q, qPe, badTensor(rng, scope, k, "k"), kPe]));
    case 1:
      return mla.invalid(
        "mixed dtypes",
        () =>
          run(sizes, [
            q,
            qPe,
            k,
            scope.randn([B, S, Hkv, P], dtype === "float16" ? "bfloat16" : "float16", 5),
          ]),
      );
    default:
      return mla.invalid(
        "bad sizes",
        () =>
          run({
            ...sizes,
            ...rng.pick<Record<string, unknown>>([{ dim: 0 }, { peDim: -1 }, { headsKv: H + 1 }, {
              scale: 1,
            }]),
          }),
      );
  }
}
