/**
 * Fingerprints that tie a built native library to what it was built from: the sources of a checkout
 * (`csrc/` and the code generators in `build/`) and the FFI symbol table (the ABI). `build.ts` records
 * them beside the library; the library lookup compares them with what is present. Synchronous, because
 * loading the library is.
 *
 * @module
 */

const ROUND_CONSTANTS = new Uint32Array([
  0x428a2f98,
  0x71374491,
  0xb5c0fbcf,
  0xe9b5dba5,
  0x3956c25b,
  0x59f111f1,
  0x923f82a4,
  0xab1c5ed5,
  0xd807aa98,
  0x12835b01,
  0x243185be,
  0x550c7dc3,
  0x72be5d74,
  0x80deb1fe,
  0x9bdc06a7,
  0xc19bf174,
  0xe49b69c1,
  0xefbe4786,
  0x0fc19dc6,
  0x240ca1cc,
  0x2de92c6f,
  0x4a7484aa,
  0x5cb0a9dc,
  0x76f988da,
  0x983e5152,
  0xa831c66d,
  0xb00327c8,
  0xbf597fc7,
  0xc6e00bf3,
  0xd5a79147,
  0x06ca6351,
  0x14292967,
  0x27b70a85,
  0x2e1b2138,
  0x4d2c6dfc,
  0x53380d13,
  0x650a7354,
  0x766a0abb,
  0x81c2c92e,
  0x92722c85,
  0xa2bfe8a1,
  0xa81a664b,
  0xc24b8b70,
  0xc76c51a3,
  0xd192e819,
  0xd6990624,
  0xf40e3585,
  0x106aa070,
  0x19a4c116,
  0x1e376c08,
  0x2748774c,
  0x34b0bcb5,
  0x391c0cb3,
  0x4ed8aa4a,
  0x5b9cca4f,
  0x682e6ff3,
  0x748f82ee,
  0x78a5636f,
  0x84c87814,
  0x8cc70208,
  0x90befffa,
  0xa4506ceb,
  0xbef9a3f7,
  0xc67178f2,
]);

/**
 * SHA-256 of the given parts (strings as UTF-8), as hex. The parts are hashed as one byte stream, so
 * callers that join several items put a separator between them.
 *
 * @example
 * ```ts
 * import { sha256Hex } from "./fingerprint.ts";
 * console.log(sha256Hex(["abc"])); // ba7816bf...f20015ad
 * ```
 */
export function sha256Hex(parts: Iterable<string | Uint8Array>): string {
  const encoder = new TextEncoder();
  const chunks: Uint8Array[] = [];
  let length = 0;
  for (const p of parts) {
    const bytes = typeof p === "string" ? encoder.encode(p) : p;
    chunks.push(bytes);
    length += bytes.length;
  }
  // Message, the 0x80 marker, zero padding, and the bit length in the last 8 bytes of a 64-byte block.
  const padded = new Uint8Array(Math.ceil((length + 9) / 64) * 64);
  let at = 0;
  for (const c of chunks) {
    padded.set(c, at);
    at += c.length;
  }
  padded[length] = 0x80;
  const tail = new DataView(padded.buffer, padded.length - 8);
  tail.setUint32(0, Math.floor(length / 2 ** 29));
  tail.setUint32(4, (length * 8) >>> 0);

  const state = new Uint32Array([
    0x6a09e667,
    0xbb67ae85,
    0x3c6ef372,
    0xa54ff53a,
    0x510e527f,
    0x9b05688c,
    0x1f83d9ab,
    0x5be0cd19,
  ]);
  const w = new Uint32Array(64);
  const view = new DataView(padded.buffer);
  const rotr = (x: number, n: number) => (x >>> n) | (x << (32 - n));
  for (let block = 0; block < padded.length; block += 64) {
    for (let i = 0; i < 16; i++) w[i] = view.getUint32(block + 4 * i);
    for (let i = 16; i < 64; i++) {
      const a = w[i - 15], b = w[i - 2];
      const s0 = rotr(a, 7) ^ rotr(a, 18) ^ (a >>> 3);
      const s1 = rotr(b, 17) ^ rotr(b, 19) ^ (b >>> 10);
      w[i] = (w[i - 16] + s0 + w[i - 7] + s1) | 0;
    }
    let [a, b, c, d, e, f, g, h] = state;
    for (let i = 0; i < 64; i++) {
      const t1 = (h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + ROUND_CONSTANTS[i] +
        w[i]) | 0;
      const t2 = ((rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c))) | 0;
      h = g;
      g = f;
      f = e;
      e = (d + t1) | 0;
      d = c;
      c = b;
      b = a;
      a = (t1 + t2) | 0;
    }
    state[0] += a;
    state[1] += b;
    state[2] += c;
    state[3] += d;
    state[4] += e;
    state[5] += f;
    state[6] += g;
    state[7] += h;
  }
  return Array.from(state, (x) => x.toString(16).padStart(8, "0")).join("");
}

// Files under `dir` (relative paths, sorted), skipping what the build writes itself.
function listFiles(dir: string, prefix = ""): string[] {
  const out: string[] = [];
  for (const e of Deno.readDirSync(dir)) {
    const rel = prefix ? `${prefix}/${e.name}` : e.name;
    if (e.isDirectory) out.push(...listFiles(`${dir}/${e.name}`, rel));
    else if (e.isFile && rel !== "files.json") out.push(rel);
  }
  return out.sort();
}

/** The folders whose files decide what the native library holds, relative to the source root. */
export const SOURCE_FOLDERS = ["csrc", "build"] as const;

/**
 * The fingerprint of a source tree: every file's path and contents under `csrc/` and `build/` of
 * `root` (a folder that lacks one of them contributes nothing). Any added, removed or edited file
 * changes it; timestamps do not.
 *
 * @example
 * ```ts
 * import { sourceFingerprint } from "./fingerprint.ts";
 * const root = await Deno.makeTempDir();
 * await Deno.mkdir(`${root}/csrc`);
 * await Deno.writeTextFile(`${root}/csrc/a.cpp`, "int a;");
 * const before = sourceFingerprint(root);
 * await Deno.writeTextFile(`${root}/csrc/a.cpp`, "int a = 1;");
 * console.log(before !== sourceFingerprint(root)); // true
 * ```
 */
export function sourceFingerprint(root: string): string {
  const parts: (string | Uint8Array)[] = [];
  for (const folder of SOURCE_FOLDERS) {
    let files: string[];
    try {
      files = listFiles(`${root}/${folder}`);
    } catch (e) {
      if (e instanceof Deno.errors.NotFound) continue;
      throw e;
    }
    for (const rel of files) {
      const bytes = Deno.readFileSync(`${root}/${folder}/${rel}`);
      parts.push(`\n${folder}/${rel} ${bytes.length}\n`, bytes);
    }
  }
  return sha256Hex(parts);
}

/**
 * The fingerprint of an FFI symbol table: every symbol's name, parameter and result types, in name
 * order. A library built for one table and loaded with another has a different ABI.
 *
 * @example
 * ```ts
 * import { abiFingerprint } from "./fingerprint.ts";
 * const a = abiFingerprint({ ak_f: { parameters: ["i32"], result: "i32" } });
 * const b = abiFingerprint({ ak_f: { parameters: ["i64"], result: "i32" } });
 * console.log(a !== b); // true
 * ```
 */
export function abiFingerprint(table: Deno.ForeignLibraryInterface): string {
  const entries = Object.keys(table).sort().map((name) => {
    const fn = table[name] as Deno.ForeignFunction;
    return `${name}(${JSON.stringify(fn.parameters)})->${JSON.stringify(fn.result)}`;
  });
  return sha256Hex([entries.join("\n")]);
}
