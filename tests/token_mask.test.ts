// The active-token masks of packed batches with spare capacity (activeTokenMask, maskInactiveTokens,
// maskInactiveTokenGradients): the predicate against the host rule t < cuSeqlens[N] for host and device
// offsets (exact and with spare rows, empty sequences, no tokens), active rows kept bit for bit and
// inactive rows zero even when they hold NaN, three dtypes and ranks 2 to 4, and the refusals.
import assert from "node:assert/strict";
import {
  activeTokenMask,
  type Device,
  type DType,
  maskInactiveTokenGradients,
  maskInactiveTokens,
  Tensor,
} from "../mod.ts";
import { deviceTest, expectNoLeak, refuses, withSeed } from "./helpers.ts";
import { generator } from "./oracle_checks.ts";

function bits(t: Tensor): Uint8Array {
  const a = t.toArray() as ArrayLike<number> & { buffer: ArrayBuffer };
  return new Uint8Array(a.buffer.slice(0));
}

function checkCase(
  device: Device,
  T: number,
  tail: number[],
  dtype: DType,
  offsets: number[],
  onDevice: boolean,
) {
  const end = offsets[offsets.length - 1];
  const row = tail.reduce((a, b) => a * b, 1);
  using x = Tensor.randn([1, T, ...tail], { dtype, device, seed: T + row });
  // Rows past the end hold NaN, as a kernel's unspecified output may.
  using nanRows = Tensor.full([1, T, ...tail], NaN, { dtype, device });
  using cu = Tensor.from(offsets, { dtype: "int32", device });
  using mask = activeTokenMask(x, onDevice ? cu : offsets);
  assert.deepEqual(
    Array.from(mask.toArray() as Uint8Array),
    Array.from({ length: T }, (_, t) => (t < end ? 1 : 0)),
  );
  assert.deepEqual(mask.shape, [1, T]);
  const xs = x.toArray() as Float32Array, ns = nanRows.toArray() as Float32Array;
  const mixed = Float32Array.from(xs, (v, i) => (Math.floor(i / row) < end ? v : ns[i]));
  using input = Tensor.from(mixed, { shape: [1, T, ...tail], dtype, device });
  using y = maskInactiveTokens(input, mask);
  assert.equal(y.dtype, dtype);
  const ys = y.toArray() as Float32Array;
  for (let i = 0; i < ys.length; i++) {
    const want = Math.floor(i / row) < end ? mixed[i] : 0;
    assert.ok(
      Object.is(ys[i], want) || (want === 0 && ys[i] === 0),
      `row ${Math.floor(i / row)}: got ${ys[i]}, expected ${want}`,
    );
  }
  const barrier = maskInactiveTokenGradients(x, mask);
  assert.equal(barrier.value, x);
  using dx = barrier.backward(input);
  assert.deepEqual(bits(dx), bits(y));
}

deviceTest(
  "active-token masks against the host rule, NaN rows zeroed, gradients masked",
  (device) =>
    expectNoLeak(device, () =>
      withSeed((seed) => {
        const rnd = generator(seed);
        const cases: [number, number[], DType][] = [
          [9, [3], "float32"],
          [16, [2, 4], "bfloat16"],
          [5, [2, 1, 3], "float16"],
          [1, [8], "float32"],
          [0, [4], "float32"],
        ];
        for (const [T, tail, dtype] of cases) {
          for (const spare of [0, 1, T]) {
            const end = Math.max(0, T - spare);
            const cut = Math.floor(rnd() * (end + 1));
            const offsets = [0, cut, cut, end];
            checkCase(device, T, tail, dtype, offsets, rnd() < 0.5);
          }
        }
      })),
);

deviceTest(
  "active-token masks refuse bad arguments with an AttnkitError naming them",
  (device) =>
    expectNoLeak(device, () => {
      using x = Tensor.randn([1, 4, 2], { device });
      using batched = Tensor.randn([2, 4, 2], { device });
      using mask = activeTokenMask(x, [0, 3]);
      using floatMask = Tensor.ones([1, 4], { device });
      using short = Tensor.randn([1, 3, 2], { device });
      using shortMask = activeTokenMask(short, [0, 3]);
      refuses(() => activeTokenMask(batched, [0, 3]), /x: expected a packed batch/);
      refuses(() => activeTokenMask(x, [0, -1]), /cuSeqlens/);
      refuses(() => activeTokenMask(x, "0,3" as never), /cuSeqlens/);
      refuses(() => maskInactiveTokens(x, floatMask), /activeMask: expected bool/);
      refuses(() => maskInactiveTokens(x, shortMask), /activeMask: expected bool \[1, T=4\]/);
      refuses(() => maskInactiveTokenGradients(x, mask).backward(batched), /dValue: expected shape/);
    }),
);
