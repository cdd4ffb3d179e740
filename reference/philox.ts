// A TypeScript Philox-4x32-10 (Salmon et al., SC 2011) and the uniform stream attnkit derives from
// it, to check the native generators bit for bit.

const M0 = 0xd2511f53n, M1 = 0xcd9e8d57n;
const W0 = 0x9e3779b9, W1 = 0xbb67ae85;

/** The four 32-bit words of Philox-4x32-10 for a 128-bit counter (c0..c3) and 64-bit key (k0, k1). */
export function philox4x32(counter: [number, number, number, number], key: [number, number]): number[] {
  let [c0, c1, c2, c3] = counter;
  let [k0, k1] = key;
  for (let round = 0; round < 10; round++) {
    const p0 = M0 * BigInt(c0 >>> 0), p1 = M1 * BigInt(c2 >>> 0);
    const hi0 = Number(p0 >> 32n), lo0 = Number(p0 & 0xffffffffn);
    const hi1 = Number(p1 >> 32n), lo1 = Number(p1 & 0xffffffffn);
    [c0, c1, c2, c3] = [(hi1 ^ c1 ^ k0) >>> 0, lo1, (hi0 ^ c3 ^ k1) >>> 0, lo0];
    k0 = (k0 + W0) >>> 0;
    k1 = (k1 + W1) >>> 0;
  }
  return [c0, c1, c2, c3];
}

/** Element `index` of attnkit's uniform stream in [0, 1): 53 bits of the counter's first two words. */
export function uniformAt(seed: bigint, index: bigint): number {
  const counter: [number, number, number, number] = [
    Number(index & 0xffffffffn),
    Number((index >> 32n) & 0xffffffffn),
    0,
    0,
  ];
  const key: [number, number] = [Number(seed & 0xffffffffn), Number((seed >> 32n) & 0xffffffffn)];
  const [x0, x1] = philox4x32(counter, key);
  const bits = ((BigInt(x0) << 32n) | BigInt(x1)) >> 11n;
  return Number(bits) / 2 ** 53;
}
