// .npy and .safetensors: round trips of every dtype, files built byte by byte the way NumPy and the
// safetensors library write them, and malformed files refused with errors that say what is wrong.
//
// Tolerance rule: none. Loading and saving move bytes, so every value must come back bit for bit.
import assert from "node:assert/strict";
import {
  AttnkitError,
  decodeNpy,
  decodeSafetensors,
  type DType,
  DTYPES,
  encodeNpy,
  encodeSafetensors,
  loadNpy,
  loadSafetensors,
  saveNpy,
  saveSafetensors,
  Tensor,
} from "../mod.ts";
import { deviceTest, expectNoLeak, withSeed } from "./helpers.ts";

// ---- helpers ----

function same(a: number | bigint, b: number | bigint): boolean {
  if (typeof a === "bigint" || typeof b === "bigint") return BigInt(a) === BigInt(b);
  return Object.is(a, b) || (Number.isNaN(a) && Number.isNaN(b));
}

function assertSameTensor(actual: Tensor, expected: Tensor, what: string): void {
  assert.equal(actual.dtype, expected.dtype, `${what}: dtype`);
  assert.deepEqual(actual.shape, expected.shape, `${what}: shape`);
  const a = actual.dtype === "float16" || actual.dtype === "bfloat16" ? actual.toRawBits() : actual.toArray();
  const e = expected.dtype === "float16" || expected.dtype === "bfloat16"
    ? expected.toRawBits()
    : expected.toArray();
  for (let i = 0; i < e.length; i++) {
    if (!same(a[i], e[i])) assert.fail(`${what}: element ${i} is ${a[i]}, expected ${e[i]}`);
  }
}

function assertAttnkitError(fn: () => unknown, pattern: RegExp): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof AttnkitError, `expected an AttnkitError, got ${e}`);
    assert.match(e.message, pattern);
    return true;
  });
}

async function assertRejectsAttnkit(fn: () => Promise<unknown>, pattern: RegExp): Promise<void> {
  await assert.rejects(fn, (e: unknown) => {
    assert.ok(e instanceof AttnkitError, `expected an AttnkitError, got ${e}`);
    assert.match(e.message, pattern);
    return true;
  });
}

/** A tensor of each dtype with awkward values (NaN, -0, extremes, int64 beyond 2^53). */
function sample(dtype: DType, shape: number[], device: string, seed: number): Tensor {
  const n = shape.reduce((a, b) => a * b, 1);
  if (dtype === "int64") {
    return Tensor.from(
      BigInt64Array.from(
        { length: n },
        (_, i) => (i % 2 ? -1n : 1n) * (2n ** 62n + BigInt(seed) + BigInt(i)),
      ),
      { shape, device },
    );
  }
  if (dtype === "bool") {
    return Tensor.from(Uint8Array.from({ length: n }, (_, i) => (i * seed) % 3 === 0 ? 1 : 0), {
      shape,
      device,
    });
  }
  if (dtype === "int32") {
    return Tensor.from(Int32Array.from({ length: n }, (_, i) => (i * 7919 + seed) | 0), { shape, device });
  }
  const special = [NaN, -0, Infinity, -Infinity, 1e-30];
  using base = Tensor.randn(shape, { dtype: "float64", device, seed });
  const values = base.toArray() as Float64Array;
  for (let i = 0; i < Math.min(n, special.length); i++) values[i] = special[i];
  return Tensor.from(values, { shape, dtype, device });
}

/** A tensor's values as plain numbers. */
const list = (t: Tensor): number[] => Array.from(t.toArray() as ArrayLike<number>, Number);

const latin1 = (s: string) => Uint8Array.from(s, (c) => c.charCodeAt(0));

/** The bytes of a .npy file as NumPy lays one out: magic, version, header length, header, data. */
function npyBytes(
  header: string,
  data: Uint8Array,
  options: { version?: 1 | 2 | 3; align?: number } = {},
): Uint8Array {
  const version = options.version ?? 1;
  const prefix = version === 1 ? 10 : 12;
  const align = options.align ?? 64;
  const padded = header + " ".repeat(align - ((prefix + header.length + 1) % align)) + "\n";
  const out = new Uint8Array(prefix + padded.length + data.length);
  out.set(latin1("\x93NUMPY"), 0);
  out[6] = version;
  const view = new DataView(out.buffer);
  if (version === 1) view.setUint16(8, padded.length, true);
  else view.setUint32(8, padded.length, true);
  out.set(version === 3 ? new TextEncoder().encode(padded) : latin1(padded), prefix);
  out.set(data, prefix + padded.length);
  return out;
}

const bytesOf = (a: ArrayBufferView) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);

/** The bytes of a .safetensors file: u64 header size, JSON header padded with spaces, data. */
function safetensorsBytes(header: unknown, data: Uint8Array, pad = 8): Uint8Array {
  let json = JSON.stringify(header);
  json += " ".repeat((pad - (json.length % pad)) % pad);
  const out = new Uint8Array(8 + json.length + data.length);
  new DataView(out.buffer).setBigUint64(0, BigInt(json.length), true);
  out.set(new TextEncoder().encode(json), 8);
  out.set(data, 8 + json.length);
  return out;
}

// ---- .npy ----

deviceTest(".npy round-trips every dtype and shape (bytes and files)", (device) =>
  withSeed(async (seed) => {
    const dir = await Deno.makeTempDir({ prefix: "attnkit-io-" });
    try {
      for (const dtype of DTYPES) {
        for (const shape of [[2, 3, 5], [7], [], [0, 4], [1, 1, 1, 9]]) {
          using t = sample(dtype, shape, device, seed);
          using fromBytes = decodeNpy(encodeNpy(t), { device });
          assertSameTensor(fromBytes, t, `${dtype} [${shape}] bytes`);
          assert.equal(fromBytes.device, t.device);
          const path = `${dir}/${dtype}_${shape.length}.npy`;
          await saveNpy(path, t);
          using fromFile = await loadNpy(path, { device });
          assertSameTensor(fromFile, t, `${dtype} [${shape}] file`);
        }
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  }));

Deno.test(".npy bytes are what NumPy 2 writes (header, growth padding, 64-byte alignment)", () => {
  using t = Tensor.from(new Float32Array([1, 2, 3, 4, 5, 6]), { shape: [2, 3] });
  const bytes = encodeNpy(t);
  const header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" + " ".repeat(20 + 38) + "\n";
  const expected = new Uint8Array(128 + 24);
  expected.set(latin1("\x93NUMPY\x01\x00\x76\x00" + header), 0);
  expected.set(bytesOf(new Float32Array([1, 2, 3, 4, 5, 6])), 128);
  assert.deepEqual(bytes, expected);
  using scalar = Tensor.full([], 2.5, { dtype: "float64" });
  const text = new TextDecoder().decode(encodeNpy(scalar).subarray(10, 128));
  assert.match(text, /^\{'descr': '<f8', 'fortran_order': False, 'shape': \(\), \} +\n$/);
  using vector = Tensor.zeros([5], { dtype: "bool" });
  assert.match(
    new TextDecoder().decode(encodeNpy(vector).subarray(10, 80)),
    /'descr': '\|b1'.*'shape': \(5,\)/,
  );
});

deviceTest(".npy files laid out by hand as NumPy writes them", (device) => {
  // float64, 1-D, NumPy 1.x alignment (16 bytes)
  const f8 = new Float64Array([1.5, -0, NaN]);
  using a = decodeNpy(
    npyBytes("{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", bytesOf(f8), { align: 16 }),
    { device },
  );
  assert.deepEqual(a.shape, [3]);
  assert.ok(
    Object.is((a.toArray() as Float64Array)[1], -0) && Number.isNaN((a.toArray() as Float64Array)[2]),
  );
  // int64 beyond 2^53, 2-D
  const i8 = new BigInt64Array([2n ** 62n + 1n, -5n, 0n, -(2n ** 63n)]);
  using b = decodeNpy(npyBytes("{'descr': '<i8', 'fortran_order': False, 'shape': (2, 2), }", bytesOf(i8)), {
    device,
  });
  assert.deepEqual(Array.from(b.toArray() as BigInt64Array), Array.from(i8));
  // bool, float16, int32 and a scalar
  using c = decodeNpy(
    npyBytes("{'descr': '|b1', 'fortran_order': False, 'shape': (4,), }", new Uint8Array([1, 0, 0, 1])),
    { device },
  );
  assert.deepEqual(list(c), [1, 0, 0, 1]);
  const f2 = new Uint16Array([0x3c00, 0xc000, 0x7c00, 0x0001]); // 1, -2, inf, 2^-24
  using d = decodeNpy(npyBytes("{'descr': '<f2', 'fortran_order': False, 'shape': (4,), }", bytesOf(f2)), {
    device,
  });
  assert.deepEqual(list(d), [1, -2, Infinity, 2 ** -24]);
  using e = decodeNpy(
    npyBytes("{'descr': '<i4', 'fortran_order': False, 'shape': (), }", bytesOf(new Int32Array([-7]))),
    { device },
  );
  assert.deepEqual(e.shape, []);
  assert.equal(e.item(), -7);
  // Python 2 era sizes with an L suffix, and keys in another order
  using f = decodeNpy(
    npyBytes("{'shape': (2L, 1L), 'fortran_order': False, 'descr': '<i4'}", bytesOf(new Int32Array([3, 4]))),
    { device },
  );
  assert.deepEqual(f.shape, [2, 1]);
  // Fortran order: column-major data comes back row-major
  const colMajor = new Int32Array([1, 4, 2, 5, 3, 6]); // [[1, 2, 3], [4, 5, 6]] stored by columns
  using g = decodeNpy(
    npyBytes("{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3), }", bytesOf(colMajor)),
    { device },
  );
  assert.deepEqual(g.shape, [2, 3]);
  assert.deepEqual(list(g), [1, 2, 3, 4, 5, 6]);
  // big-endian float32 and int64
  const be = new Uint8Array(8);
  new DataView(be.buffer).setFloat32(0, 1.5, false);
  new DataView(be.buffer).setFloat32(4, -3.25, false);
  using h = decodeNpy(npyBytes("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", be), { device });
  assert.deepEqual(list(h), [1.5, -3.25]);
  const be64 = new Uint8Array(8);
  new DataView(be64.buffer).setBigInt64(0, -(2n ** 60n) - 3n, false);
  using i = decodeNpy(npyBytes("{'descr': '>i8', 'fortran_order': False, 'shape': (1,), }", be64), {
    device,
  });
  assert.equal((i.toArray() as BigInt64Array)[0], -(2n ** 60n) - 3n);
  // format versions 2.0 and 3.0 (4-byte header length; 3.0 is UTF-8)
  for (const version of [2, 3] as const) {
    using v = decodeNpy(
      npyBytes(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
        bytesOf(new Float32Array([7, 8])),
        { version },
      ),
      { device },
    );
    assert.deepEqual(list(v), [7, 8]);
  }
});

deviceTest(".npy bfloat16: the 'bfloat16' descr, and '<V2' with an explicit dtype", (device) => {
  const bits = new Uint16Array([0x3f80, 0xc040, 0x7f80, 0x0001]); // 1, -3, inf, 2^-133
  const expected = [1, -3, Infinity, 2 ** -133];
  using a = decodeNpy(
    npyBytes("{'descr': 'bfloat16', 'fortran_order': False, 'shape': (4,), }", bytesOf(bits)),
    { device },
  );
  assert.equal(a.dtype, "bfloat16");
  assert.deepEqual(list(a), expected);
  const v2 = npyBytes("{'descr': '<V2', 'fortran_order': False, 'shape': (2, 2), }", bytesOf(bits));
  assertAttnkitError(
    () => decodeNpy(v2, { device }),
    /dtype: the file holds raw 2-byte elements.*pass \{ dtype: "bfloat16" \}/,
  );
  using b = decodeNpy(v2, { device, dtype: "bfloat16" });
  assert.deepEqual(b.shape, [2, 2]);
  assert.deepEqual(list(b), expected);
  using c = decodeNpy(v2, { device, dtype: "float16" });
  assert.equal(c.dtype, "float16");
  // saving: 'bfloat16' by default, '<V2' on request
  using t = Tensor.from(bits, { dtype: "bfloat16", device });
  assert.match(new TextDecoder().decode(encodeNpy(t).subarray(10, 64)), /'descr': 'bfloat16'/);
  const raw = encodeNpy(t, { bfloat16Descr: "<V2" });
  assert.match(new TextDecoder().decode(raw.subarray(10, 64)), /'descr': '<V2'/);
  using back = decodeNpy(raw, { dtype: "bfloat16", device });
  assertSameTensor(back, t, "bfloat16 via <V2");
});

Deno.test(".npy: malformed or unsupported files are refused, naming what is wrong", () =>
  expectNoLeak("cpu", async () => {
    const f4 = bytesOf(new Float32Array([1, 2]));
    const header = (descr: string, shape = "(2,)") =>
      `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shape}, }`;
    assertAttnkitError(
      () => decodeNpy(latin1("PK\x03\x04 not numpy at all")),
      /decodeNpy: file: not a \.npy file/,
    );
    assertAttnkitError(() => decodeNpy(npyBytes(header("<u2"), f4)), /descr: '<u2' is not supported/);
    assertAttnkitError(() => decodeNpy(npyBytes(header("<c8", "(1,)"), f4)), /descr: '<c8' is not supported/);
    assertAttnkitError(
      () => decodeNpy(npyBytes("{'descr': [('x', '<f4')], 'fortran_order': False, 'shape': (2,), }", f4)),
      /descr: structured dtypes/,
    );
    assertAttnkitError(
      () => decodeNpy(npyBytes(header("<f4", "(3,)"), f4)),
      /data: shape \[3\] of <f4 needs 12 bytes, the file holds 8/,
    );
    assertAttnkitError(
      () => decodeNpy(npyBytes(header("<f4", "(1,)"), f4)),
      /needs 4 bytes, the file holds 8/,
    );
    assertAttnkitError(
      () => decodeNpy(npyBytes("{'descr': '<f4', 'fortran_order': False}", f4)),
      /'shape' is missing/,
    );
    assertAttnkitError(
      () => decodeNpy(npyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)", f4)),
      /header: cannot parse/,
    );
    assertAttnkitError(
      () => decodeNpy(npyBytes(header("<f4"), f4), { dtype: "bfloat16" }),
      /dtype: the file holds float32 \(descr '<f4'\), not bfloat16/,
    );
    assertAttnkitError(
      () => decodeNpy(npyBytes(header("<f4"), f4), { dtype: "float8" as DType }),
      /dtype: expected one of/,
    );
    const truncated = npyBytes(header("<f4"), f4).subarray(0, 40);
    assertAttnkitError(() => decodeNpy(truncated), /truncated header/);
    const future = npyBytes(header("<f4"), f4);
    future[6] = 9;
    assertAttnkitError(() => decodeNpy(future), /unsupported \.npy format version 9/);
    await assertRejectsAttnkit(
      () => loadNpy("/nonexistent/attnkit/x.npy"),
      /loadNpy: path: cannot read \/nonexistent/,
    );
    const disposed = Tensor.zeros([2]);
    disposed.dispose();
    assertAttnkitError(() => encodeNpy(disposed), /tensor: the tensor was disposed/);
    assertAttnkitError(() => encodeNpy({} as Tensor), /tensor: expected a Tensor/);
  }));

// ---- .safetensors ----

deviceTest(
  ".safetensors round-trips every dtype, with metadata, by path and by bytes",
  (device) =>
    withSeed(async (seed) => {
      const dir = await Deno.makeTempDir({ prefix: "attnkit-io-" });
      const tensors: Record<string, Tensor> = {};
      try {
        for (const dtype of DTYPES) tensors[`t_${dtype}`] = sample(dtype, [3, 5], device, seed);
        tensors.scalar = sample("float32", [], device, seed);
        tensors.empty = sample("bfloat16", [0, 7], device, seed);
        tensors["odd.name/with:chars"] = sample("int32", [1, 3, 1], device, seed);
        const metadata = { format: "pt", note: "seed " + seed };
        const path = `${dir}/all.safetensors`;
        await saveSafetensors(path, tensors, { metadata });
        const bytes = encodeSafetensors(tensors, { metadata });
        assert.deepEqual(
          await Deno.readFile(path),
          bytes,
          "saveSafetensors writes what encodeSafetensors returns",
        );
        for (const source of [path, bytes]) {
          using file = await loadSafetensors(source, { device });
          assert.deepEqual(file.metadata, metadata);
          assert.deepEqual(Object.keys(file.tensors).sort(), Object.keys(tensors).sort());
          for (const [name, t] of Object.entries(tensors)) {
            assertSameTensor(
              file.tensors[name],
              t,
              `${name} from ${typeof source === "string" ? "path" : "bytes"}`,
            );
            assert.equal(file.tensors[name].device, t.device);
          }
        }
        using some = await loadSafetensors(path, { device, names: ["t_int64", "t_bfloat16"] });
        assert.deepEqual(Object.keys(some.tensors), ["t_int64", "t_bfloat16"]);
        assertSameTensor(some.tensors.t_int64, tensors.t_int64, "names subset");
        using sync = decodeSafetensors(bytes, { device, names: ["scalar"] });
        assertSameTensor(sync.tensors.scalar, tensors.scalar, "decodeSafetensors");
      } finally {
        for (const t of Object.values(tensors)) t.dispose();
        await Deno.remove(dir, { recursive: true });
      }
    }),
);

Deno.test(".safetensors layout: 8-byte aligned header, widest dtypes first, contiguous offsets", () => {
  using a = Tensor.zeros([3], { dtype: "bool" });
  using b = Tensor.zeros([2], { dtype: "float64" });
  using c = Tensor.zeros([3], { dtype: "bfloat16" });
  using d = Tensor.zeros([1], { dtype: "float32" });
  const bytes = encodeSafetensors({ a, b, c, d });
  const n = Number(new DataView(bytes.buffer).getBigUint64(0, true));
  assert.equal(n % 8, 0);
  const header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + n)));
  assert.deepEqual(header, {
    b: { dtype: "F64", shape: [2], data_offsets: [0, 16] },
    d: { dtype: "F32", shape: [1], data_offsets: [16, 20] },
    c: { dtype: "BF16", shape: [3], data_offsets: [20, 26] },
    a: { dtype: "BOOL", shape: [3], data_offsets: [26, 29] },
  });
  assert.deepEqual(Object.keys(header), ["b", "d", "c", "a"]);
  assert.equal(bytes.length, 8 + n + 29);
});

deviceTest(".safetensors files laid out by hand as the safetensors library writes them", (device) => {
  const data = new Uint8Array(4 * 4 + 2 * 3 + 8 + 2);
  data.set(bytesOf(new Float32Array([1, -2, 3.5, NaN])), 0);
  data.set(bytesOf(new Uint16Array([0x3f80, 0x4000, 0xbf80])), 16); // bf16 1, 2, -1
  data.set(bytesOf(new BigInt64Array([-(2n ** 62n) - 1n])), 22);
  data.set([1, 0], 30);
  const header = {
    __metadata__: { format: "pt" },
    "model.w": { dtype: "F32", shape: [2, 2], data_offsets: [0, 16] },
    "model.b": { dtype: "BF16", shape: [3], data_offsets: [16, 22] },
    step: { dtype: "I64", shape: [], data_offsets: [22, 30] },
    mask: { dtype: "BOOL", shape: [2], data_offsets: [30, 32] },
  };
  using file = decodeSafetensors(safetensorsBytes(header, data), { device });
  assert.deepEqual(file.metadata, { format: "pt" });
  const w = file.tensors["model.w"];
  assert.deepEqual(w.shape, [2, 2]);
  assert.deepEqual(list(w).slice(0, 3), [1, -2, 3.5]);
  assert.ok(Number.isNaN(w.toArray()[3] as number));
  assert.equal(file.tensors["model.b"].dtype, "bfloat16");
  assert.deepEqual(list(file.tensors["model.b"]), [1, 2, -1]);
  assert.deepEqual(file.tensors.step.shape, []);
  assert.equal((file.tensors.step.toArray() as BigInt64Array)[0], -(2n ** 62n) - 1n);
  assert.deepEqual(list(file.tensors.mask), [1, 0]);
  // no __metadata__, no padding, tensors listed out of offset order
  const plain = safetensorsBytes(
    {
      y: { dtype: "I32", shape: [1], data_offsets: [8, 12] },
      x: { dtype: "F64", shape: [1], data_offsets: [0, 8] },
    },
    bytesOf(new Int32Array([0, 0, 42])).slice(0, 12).map((
      v,
      i,
    ) => (i < 8 ? bytesOf(new Float64Array([0.25]))[i] : v)),
    1,
  );
  using p = decodeSafetensors(plain, { device });
  assert.deepEqual(p.metadata, {});
  assert.equal(p.tensors.x.item(), 0.25);
  assert.equal(p.tensors.y.item(), 42);
});

Deno.test(".safetensors: malformed or unsupported files are refused, naming what is wrong", () =>
  expectNoLeak("cpu", async () => {
    const four = new Uint8Array(16);
    const file = (header: unknown, data = four, pad = 8) => safetensorsBytes(header, data, pad);
    const entry = (dtype: string, shape: number[], offsets: number[]) => ({
      dtype,
      shape,
      data_offsets: offsets,
    });
    assertAttnkitError(
      () => decodeSafetensors(file({ a: entry("I8", [16], [0, 16]) })),
      /tensor 'a': dtype "I8" is not supported; expected one of F64, F32/,
    );
    assertAttnkitError(
      () => decodeSafetensors(file({ a: entry("F8_E5M2", [16], [0, 16]) })),
      /dtype "F8_E5M2" is not supported/,
    );
    assertAttnkitError(
      () => decodeSafetensors(file({ a: entry("F32", [3], [0, 16]) })),
      /tensor 'a': shape \[3\] of F32 needs 12 bytes, data_offsets span 16/,
    );
    assertAttnkitError(
      () => decodeSafetensors(file({ a: entry("F32", [3], [0, 12]), b: entry("F32", [2], [4, 12]) })),
      /data_offsets \[4, 12\] overlap another tensor/,
    );
    assertAttnkitError(
      () => decodeSafetensors(file({ a: entry("F32", [2], [0, 8]), b: entry("F32", [1], [12, 16]) })),
      /leave a gap after byte 8/,
    );
    assertAttnkitError(
      () => decodeSafetensors(file({ a: entry("F32", [2], [0, 8]) })),
      /cover 8 bytes of data, the file holds 16/,
    );
    assertAttnkitError(() => decodeSafetensors(file({ a: entry("F32", [4], [8, 24]) })), /leave a gap|cover/);
    assertAttnkitError(
      () => decodeSafetensors(file({ a: entry("F32", [-4], [0, 16]) })),
      /shape must be a list of non-negative integers/,
    );
    assertAttnkitError(
      () => decodeSafetensors(file({ a: entry("F32", [4], [16, 0]) })),
      /data_offsets must be \[begin, end\]/,
    );
    assertAttnkitError(
      () => decodeSafetensors(file({ __metadata__: { n: 3 }, a: entry("F32", [4], [0, 16]) })),
      /__metadata__\.n must be a string/,
    );
    assertAttnkitError(() => decodeSafetensors(file([1, 2])), /header: expected a JSON object/);
    const notJson = file({ a: 1 });
    notJson[8] = "}".charCodeAt(0);
    assertAttnkitError(() => decodeSafetensors(notJson), /header: not valid JSON/);
    const huge = new Uint8Array(16);
    new DataView(huge.buffer).setBigUint64(0, 2n ** 40n, true);
    assertAttnkitError(() => decodeSafetensors(huge), /header size 1099511627776 exceeds the format's limit/);
    new DataView(huge.buffer).setBigUint64(0, 100n, true);
    assertAttnkitError(() => decodeSafetensors(huge), /runs past the end of the file/);
    assertAttnkitError(() => decodeSafetensors(new Uint8Array(3)), /too short/);
    const good = file({ a: entry("F32", [4], [0, 16]) });
    assertAttnkitError(
      () => decodeSafetensors(good, { names: ["a", "b"] }),
      /names: the file has no tensor 'b' \(it has a\)/,
    );
    assertAttnkitError(() => decodeSafetensors(good, { device: "tpu" }), /device: expected "cpu"/);
    await assertRejectsAttnkit(
      () => loadSafetensors("/nonexistent/attnkit.safetensors"),
      /loadSafetensors: path: cannot open/,
    );
    // a file cut short: the header promises more data than there is
    const dir = await Deno.makeTempDir({ prefix: "attnkit-io-" });
    try {
      await Deno.writeFile(`${dir}/cut.safetensors`, good.subarray(0, good.length - 4));
      await assertRejectsAttnkit(
        () => loadSafetensors(`${dir}/cut.safetensors`),
        /cover 16 bytes of data, the file holds 12/,
      );
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
    // saving
    using t = Tensor.ones([2]);
    const disposed = Tensor.ones([2]);
    disposed.dispose();
    assertAttnkitError(
      () => encodeSafetensors({ t, disposed }),
      /tensors\.disposed: the tensor was disposed/,
    );
    assertAttnkitError(() => encodeSafetensors({ __metadata__: t }), /'__metadata__' cannot name a tensor/);
    assertAttnkitError(
      () => encodeSafetensors({ t: [1, 2] as unknown as Tensor }),
      /tensors\.t: expected a Tensor/,
    );
    assertAttnkitError(
      () => encodeSafetensors(t as unknown as Record<string, Tensor>),
      /tensors: expected an object of named tensors/,
    );
    assertAttnkitError(
      () => encodeSafetensors({ t }, { metadata: { n: 1 as unknown as string } }),
      /metadata\.n: expected a string/,
    );
  }));

deviceTest("a 64 MB .safetensors file round-trips through disk", (device) =>
  withSeed(async (seed) => {
    const dir = await Deno.makeTempDir({ prefix: "attnkit-io-" });
    try {
      using big = Tensor.randn([4096, 4096], { device, seed });
      using small = Tensor.randn([3, 3], { dtype: "bfloat16", device, seed });
      const path = `${dir}/big.safetensors`;
      await saveSafetensors(path, { big, small });
      using file = await loadSafetensors(path, { device });
      assertSameTensor(file.tensors.big, big, "64 MB float32");
      assertSameTensor(file.tensors.small, small, "bf16 beside it");
      await saveNpy(`${dir}/big.npy`, big);
      using npy = await loadNpy(`${dir}/big.npy`, { device });
      assertSameTensor(npy, big, "64 MB .npy");
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  }));
