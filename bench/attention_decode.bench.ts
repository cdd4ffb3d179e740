/**
 * `deno bench` for softmax-attention decode over a KV cache (`deno task bench`): one query token per
 * sequence against its cached keys, `GroupedQueryAttentionDecodeWithKVCacheFwdOp` on a contiguous cache
 * (`[B, Skv, Hkv, D]`) and `GroupedQueryAttentionDecodePagedWithKVCacheFwdOp` on a paged one
 * (`[B Skv, Hkv, D]` in pages of 64 rows, the block table sequence b's pages in order, `b Skv / 64` on).
 *
 * Shapes: on the CPU backend B2_Skv1024_H8_KV2_D128; on CUDA (when present) those of
 * bench/decode_side_by_side.ts, H 32, Hkv 8, D 128 with B x Skv = 1 x 65536, 64 x 4096 and 256 x 2048.
 * Inputs bfloat16 `randn` q, k, v; every sequence's length the full Skv (int32); the default call (lengths
 * and block table read back and checked). The ops return a new output (they take no `out`), freed after
 * each call; each call waits for the device, so a time is the wall time per call.
 *
 * After the run a table gives GB/s of K and V read once, `2 B Skv Hkv D 2` bytes (as the side-by-side
 * script and cli/flops.ts's `leastBytes` count decode).
 *
 * @module
 */
import {
  cudaAvailable,
  type Device,
  type DType,
  dtypeSize,
  GroupedQueryAttentionDecodePagedWithKVCacheFwdOp,
  GroupedQueryAttentionDecodeWithKVCacheFwdOp,
  Tensor,
} from "../mod.ts";
import { benchRates, once, type RatedCase } from "./wall_time.ts";

interface Shape {
  B: number;
  Skv: number;
  H: number;
  Hkv: number;
  D: number;
}

const PAGE = 64;

/** The name the side-by-side records use, e.g. `B64_Skv4096_H32_KV8_D128`. */
const shapeName = (s: Shape) => `B${s.B}_Skv${s.Skv}_H${s.H}_KV${s.Hkv}_D${s.D}`;

function defineCases(device: Device, shapes: Shape[], dtype: DType): RatedCase[] {
  const cases: RatedCase[] = [];
  for (const s of shapes) {
    const { B, Skv, H, Hkv, D } = s;
    const sizes = { batch: B, heads: H, headsKv: Hkv, dim: D };
    const bytes = 2 * B * Skv * Hkv * D * dtypeSize(dtype);
    const common = once(() => ({
      q: Tensor.randn([B, H, D], { dtype, device, seed: 1 }),
      lengths: Tensor.full([B], Skv, { dtype: "int32", device }),
    }));
    const contiguous = once(() => ({
      ...common(),
      k: Tensor.randn([B, Skv, Hkv, D], { dtype, device, seed: 2 }),
      v: Tensor.randn([B, Skv, Hkv, D], { dtype, device, seed: 3 }),
    }));
    const op = new GroupedQueryAttentionDecodeWithKVCacheFwdOp({ ...sizes, seqlenKv: Skv });
    cases.push({
      name: `GroupedQueryAttentionDecodeWithKVCacheFwdOp decode ${shapeName(s)} ${dtype} [${device}]`,
      device,
      bytes,
      prepare: contiguous,
      run: () => {
        const x = contiguous();
        op.forward(x.q, x.k, x.v, x.lengths).dispose();
      },
    });
    const pages = Skv / PAGE;
    const paged = once(() => ({
      ...common(),
      k: Tensor.randn([B * Skv, Hkv, D], { dtype, device, seed: 2 }),
      v: Tensor.randn([B * Skv, Hkv, D], { dtype, device, seed: 3 }),
      table: Tensor.from(Int32Array.from({ length: B * pages }, (_, i) => i), { shape: [B, pages], device }),
    }));
    const pagedOp = new GroupedQueryAttentionDecodePagedWithKVCacheFwdOp({
      ...sizes,
      seqlenKv: B * Skv,
      pageSize: PAGE,
    });
    cases.push({
      name: `GroupedQueryAttentionDecodePagedWithKVCacheFwdOp decode ${
        shapeName(s)
      }_page${PAGE} ${dtype} [${device}]`,
      device,
      bytes,
      prepare: paged,
      run: () => {
        const x = paged();
        pagedOp.forward(x.q, x.k, x.v, x.lengths, x.table).dispose();
      },
    });
  }
  return cases;
}

const cases = defineCases("cpu", [{ B: 2, Skv: 1024, H: 8, Hkv: 2, D: 128 }], "bfloat16");
if (cudaAvailable()) {
  const anchors = [[1, 65536], [64, 4096], [256, 2048]].map(([B, Skv]) => ({
    B,
    Skv,
    H: 32,
    Hkv: 8,
    D: 128,
  }));
  cases.push(...defineCases("cuda", anchors, "bfloat16"));
}

benchRates(cases);
