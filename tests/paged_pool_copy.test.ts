// The paged chunked prefill's pool copies and padding rows at the C ABI (ak_state_pool_copy,
// ak_zero_padding_rows) against their host rules: slots of several sizes (whole and partial tiles of the
// CUDA kernels, an odd size that takes the element path), slots apart (aligned and not), float32 and
// bfloat16 pools, states contiguous or as the transposed view of [N, H, K, V]; padding, fresh and
// unselected slots; padding rows of several widths and dtypes zeroed, every other byte untouched; bad
// indices refused before anything is written.
//
// Tolerance rule: the copies are exact (bfloat16 -> float32 widens, float32 -> bfloat16 rounds to nearest
// even as roundBf16 does) and zeroing writes zero bits, so everything is compared bit for bit.
import assert from "node:assert/strict";
import { native, unwrap } from "../ffi/library.ts";
import { type Device, type DType, Tensor } from "../mod.ts";
import { roundBf16 } from "../reference/mod.ts";
import { deviceTest, expectNoLeak, refuses, withSeed } from "./helpers.ts";
import { generator, normals } from "./oracle_checks.ts";

const GATHER = 0, SCATTER = 1;

function sameBits(what: string, got: ArrayLike<number>, want: ArrayLike<number>) {
  assert.equal(got.length, want.length, `${what}: length`);
  for (let i = 0; i < want.length; i++) {
    assert.ok(Object.is(got[i], want[i]), `${what}[${i}]: got ${got[i]}, expected ${want[i]}`);
  }
}

function poolCopy(
  pool: Uint8Array<ArrayBuffer>,
  indices: Tensor,
  hasInitial: Tensor | null,
  states: Uint8Array<ArrayBuffer>,
  mode: number,
) {
  unwrap(
    native().ak_state_pool_copy(
      pool,
      indices.descriptor(),
      hasInitial?.descriptor() ?? null,
      states,
      mode,
    ),
    "ak_state_pool_copy",
  );
}

/** A pool [slots, H, V, K] whose slots lie `gap` elements apart, as a view of one flat tensor. */
interface Dims {
  H: number;
  V: number;
  K: number;
  gap: number;
}

const DIMS: Dims[] = [
  { H: 2, V: 24, K: 16, gap: 0 }, // a partial tile
  { H: 4, V: 64, K: 64, gap: 0 }, // whole tiles
  { H: 1, V: 5, K: 3, gap: 0 }, // an odd slot: element by element
  { H: 3, V: 40, K: 33, gap: 0 }, // partial 32 x 32 tiles when transposed
  { H: 2, V: 24, K: 16, gap: 4 }, // slots apart, still 16-byte aligned
  { H: 2, V: 24, K: 16, gap: 1 }, // slots apart, unaligned
];

function copyCase(device: Device, d: Dims, poolDtype: "float32" | "bfloat16", kv: boolean, seed: number) {
  const rnd = generator(seed);
  const { H, V, K } = d;
  const S = H * V * K, stride = S + d.gap, slots = 7;
  // Live, padding, live, padding, live but fresh, live; slot 0 and slot 3 unselected.
  const indices = [4, 0, 6, -2, 1, 2];
  const fresh = [false, false, false, false, true, false];
  const N = indices.length;
  using store = Tensor.from(normals(rnd, slots * stride), { dtype: poolDtype, device });
  const pool = store.viewDescriptor([slots, H, V, K], [stride, V * K, K, 1]);
  const before = store.toArray() as Float32Array;
  using idx = Tensor.from(indices, { dtype: "int32", device });
  using flags = Tensor.from(fresh.map((f) => (f ? 0 : 1)), { dtype: "bool", device });
  // Element (n, h, v, k) of the states in their layout.
  const at = (n: number, h: number, v: number, k: number) => n * S + h * V * K + (kv ? k * V + v : v * K + k);
  const statesOf = (t: Tensor) => kv ? t.viewDescriptor([N, H, V, K], [S, K * V, 1, V]) : t.descriptor();
  const shape = kv ? [N, H, K, V] : [N, H, V, K];
  const what = `H${H} V${V} K${K} gap ${d.gap} ${poolDtype}${kv ? " kv" : ""}`;

  using gathered = Tensor.from(new Float32Array(N * S).fill(NaN), { shape, device });
  poolCopy(pool, idx, flags, statesOf(gathered), GATHER);
  const want = new Float32Array(N * S);
  for (let n = 0; n < N; n++) {
    if (indices[n] <= 0 || fresh[n]) continue;
    for (let h = 0; h < H; h++) {
      for (let v = 0; v < V; v++) {
        for (let k = 0; k < K; k++) {
          want[at(n, h, v, k)] = before[indices[n] * stride + h * V * K + v * K + k];
        }
      }
    }
  }
  sameBits(`gather ${what}`, gathered.toArray() as Float32Array, want);

  // The scatter ignores hasInitialState: a fresh slot receives its state too.
  const next = normals(rnd, N * S);
  using states = Tensor.from(next, { shape, device });
  poolCopy(pool, idx, flags, statesOf(states), SCATTER);
  const expected = before.slice();
  for (let n = 0; n < N; n++) {
    if (indices[n] <= 0) continue;
    for (let h = 0; h < H; h++) {
      for (let v = 0; v < V; v++) {
        for (let k = 0; k < K; k++) {
          const x = next[at(n, h, v, k)];
          expected[indices[n] * stride + h * V * K + v * K + k] = poolDtype === "bfloat16" ? roundBf16(x) : x;
        }
      }
    }
  }
  sameBits(`scatter ${what}`, store.toArray() as Float32Array, expected);
}

deviceTest(
  "state pool copies move every selected slot exactly, in both state layouts, and nothing else",
  (device) =>
    expectNoLeak(device, () =>
      withSeed((seed) => {
        let i = 0;
        for (const d of DIMS) {
          for (const poolDtype of ["float32", "bfloat16"] as const) {
            for (const kv of [false, true]) copyCase(device, d, poolDtype, kv, seed + i++);
          }
        }
      })),
);

deviceTest(
  "state pool copies refuse bad indices and layouts before writing anything",
  (device) =>
    expectNoLeak(device, () => {
      const [H, V, K] = [2, 8, 4];
      using store = Tensor.from(Float32Array.from({ length: 3 * H * V * K }, (_, i) => i), {
        shape: [3, H, V, K],
        device,
      });
      const pool = store.descriptor();
      const before = store.toArray() as Float32Array;
      using states = Tensor.ones([2, H, V, K], { device });
      const int32 = (x: number[]) => Tensor.from(x, { dtype: "int32", device });
      for (const direction of [GATHER, SCATTER]) {
        for (
          const [bad, pattern] of [
            [[1, 3], /state_indices: entry 1 is 3, past the 3 slots of state_cache/],
            [[2147483647, 1], /state_indices: entry 0 is 2147483647, past the 3 slots/],
            [[2, 2], /state_indices: .*slot 2/],
          ] as const
        ) {
          using idx = int32([...bad]);
          refuses(() => poolCopy(pool, idx, null, states.descriptor(), direction), pattern);
        }
      }
      sameBits("pool after refusals", store.toArray() as Float32Array, before);
      sameBits(
        "states after refusals",
        states.toArray() as Float32Array,
        new Float32Array(2 * H * V * K).fill(1),
      );
      // Padding may repeat: only live slots must be distinct.
      using padding = int32([0, 0]);
      poolCopy(pool, padding, null, states.descriptor(), GATHER);
      sameBits("padding gathers zeros", states.toArray() as Float32Array, new Float32Array(2 * H * V * K));
      using idx = int32([1, 2]);
      refuses(
        () => poolCopy(pool, idx, null, states.viewDescriptor([2, H, V, K], [H * V * K, 1, K, V]), GATHER),
        /states: expected a contiguous tensor, or the view of one with its last two dims swapped/,
      );
      refuses(
        () =>
          poolCopy(
            store.viewDescriptor([3, H, V, K], [H * V * K - 1, V * K, K, 1]),
            idx,
            null,
            states.descriptor(),
            GATHER,
          ),
        /state_cache: expected slots apart/,
      );
      refuses(() => poolCopy(pool, idx, null, states.descriptor(), 4), /mode: expected AK_POOL_GATHER/);
      // AK_POOL_TRUSTED_INDICES changes nothing on the CPU: the indices are still checked.
      using past = Tensor.from([1, 9], { dtype: "int32", device });
      if (device === "cpu") {
        refuses(() => poolCopy(pool, past, null, states.descriptor(), GATHER | 2), /past the/);
      }
    }),
);

function zeroRows(output: Tensor, indices: Tensor, cuSeqlens: Tensor | null) {
  unwrap(
    native().ak_zero_padding_rows(output.descriptor(), indices.descriptor(), cuSeqlens?.descriptor() ?? null),
    "ak_zero_padding_rows",
  );
}

interface PaddingCase {
  B: number;
  T: number;
  row: number[];
  dtype: DType;
  indices: number[];
  cu?: number[];
  cuDtype?: "int32" | "int64";
  /** The rows (of B T) expected to become zero. */
  zeroed: number[];
}

const PADDING: PaddingCase[] = [
  // Packed, an empty padding sequence, two rows past the last offset (16-byte rows: 4-byte units).
  {
    B: 1,
    T: 12,
    row: [2, 3],
    dtype: "bfloat16",
    indices: [0, -1, 3, 2],
    cu: [0, 3, 3, 7, 10],
    zeroed: [0, 1, 2],
  },
  {
    B: 1,
    T: 12,
    row: [2, 3],
    dtype: "bfloat16",
    indices: [1, -1, 0, 2],
    cu: [0, 3, 3, 7, 10],
    zeroed: [3, 4, 5, 6],
  },
  // Dense: sequence n is batch row n (64-byte rows: 16-byte units).
  { B: 3, T: 4, row: [2, 8], dtype: "float32", indices: [1, 0, -3], zeroed: [4, 5, 6, 7, 8, 9, 10, 11] },
  // 6-byte rows: 2-byte units; int64 offsets past T clamp to it.
  {
    B: 1,
    T: 8,
    row: [3],
    dtype: "float16",
    indices: [3, 0],
    cu: [0, 5, 100],
    cuDtype: "int64",
    zeroed: [5, 6, 7],
  },
  // Decreasing offsets zero nothing; 3-byte rows: 1-byte units.
  { B: 1, T: 6, row: [3], dtype: "bool", indices: [1, 0], cu: [0, 4, 2], zeroed: [] },
  { B: 2, T: 5, row: [1, 3], dtype: "bool", indices: [0, 7], zeroed: [0, 1, 2, 3, 4] },
];

deviceTest(
  "padding rows: the rows of sequences with index <= 0 become zero, every other row stays",
  (device) =>
    expectNoLeak(device, () => {
      for (const c of PADDING) {
        const width = c.row.reduce((a, b) => a * b, 1);
        const n = c.B * c.T * width;
        const isBool = c.dtype === "bool";
        const host = Float32Array.from({ length: n }, (_, i) => (isBool ? 1 : 1 + (i % 7)));
        using out = Tensor.from(host, { shape: [c.B, c.T, ...c.row], dtype: c.dtype, device });
        const before = Array.from(out.toArray() as ArrayLike<number | boolean>, Number);
        using idx = Tensor.from(c.indices, { dtype: "int32", device });
        using cu = c.cu === undefined
          ? undefined
          : c.cuDtype === "int64"
          ? Tensor.from(BigInt64Array.from(c.cu, BigInt), { dtype: "int64", device })
          : Tensor.from(c.cu, { dtype: "int32", device });
        zeroRows(out, idx, cu ?? null);
        const want = before.slice();
        for (const r of c.zeroed) want.fill(0, r * width, (r + 1) * width);
        const got = Array.from(out.toArray() as ArrayLike<number | boolean>, Number);
        sameBits(`${c.dtype} [${c.B}, ${c.T}, ${c.row}] indices [${c.indices}]`, got, want);
      }
      using out = Tensor.zeros([2, 4, 3], { device });
      using two = Tensor.from([0, 1], { dtype: "int32", device });
      using three = Tensor.from([0, 1, 1], { dtype: "int32", device });
      using cu = Tensor.from([0, 2, 4], { dtype: "int32", device });
      using floatCu = Tensor.from([0, 2, 4], { device });
      refuses(() => zeroRows(out, two, cu), /cu_seqlens: packed sequences need output as \[1, T, \.\.\.\]/);
      refuses(() => zeroRows(out, three, null), /state_indices: expected shape \[2\]/);
      using packed = Tensor.zeros([1, 4, 3], { device });
      refuses(() => zeroRows(packed, two, floatCu), /cu_seqlens: expected dtype int32 \| int64/);
    }),
);
