// A chunked forward is causal to the bit: a call on the first t tokens gives rows 0 .. t - 1 the bits
// the call on all tokens gives them, for any cut (inside a chunk, at a chunk's end, one token). The zero-drift
// replay of the paged ops rests on it (a partial chunk replayed against the same rows inside a whole
// chunk); a stage whose row reads a later row of its chunk (a cumsum formed as an inclusive sum minus
// the lane's own pair did) breaks it at odd cuts. Gated DeltaNet and KDA, bf16, head dims 64 and 128.
import assert from "node:assert/strict";
import { chunkGatedDeltaRule, chunkKda, Tensor } from "../mod.ts";
import { deviceTest, expectNoLeak, withSeed } from "./helpers.ts";

const CUTS = [1, 2, 38, 39, 63, 64, 65, 103];

for (const kda of [false, true]) {
  deviceTest(
    `${
      kda ? "KDA" : "Gated DeltaNet"
    }: a forward on the first t tokens gives those rows the bits of the whole call`,
    (device) =>
      withSeed((seed) =>
        expectNoLeak(device, () => {
          for (const D of [64, 128]) {
            const [B, T, H] = [2, 150, 2];
            const bf = { dtype: "bfloat16" as const, device };
            using q = Tensor.randn([B, T, H, D], { ...bf, seed });
            // KDA normalises nothing: keys of norm about 1 keep its state bounded.
            using k = Tensor.randn([B, T, H, D], { ...bf, seed: seed + 1, std: kda ? D ** -0.5 : 1 });
            using v = Tensor.randn([B, T, H, D], { ...bf, seed: seed + 2 });
            using gate = Tensor.rand(kda ? [B, T, H, D] : [B, T, H], {
              device,
              seed: seed + 3,
              low: -0.3,
              high: 0,
            });
            using beta = Tensor.rand([B, T, H], { device, seed: seed + 4 });
            using h0 = Tensor.randn([B, H, D, D], { device, seed: seed + 5, std: 0.1 });
            const run = (t: number) => {
              const cut = (x: Tensor) => x.slice(1, 0, t);
              using qt = cut(q), kt = cut(k), vt = cut(v), gt = cut(gate), bt = cut(beta);
              const o = { layout: "bshd" as const, initialState: h0 };
              const r = kda
                ? chunkKda(qt, kt, vt, gt, bt, o)
                : chunkGatedDeltaRule(qt, kt, vt, gt, bt, { ...o, useQkL2norm: true });
              const out = r.output.cast("float32");
              r[Symbol.dispose]();
              return out;
            };
            using whole = run(T);
            const all = whole.toArray() as Float32Array;
            const row = H * D;
            for (const t of CUTS) {
              using part = run(t);
              const got = part.toArray() as Float32Array;
              for (let b = 0; b < B; b++) {
                for (let i = 0; i < t * row; i++) {
                  const a = got[b * t * row + i], e = all[b * T * row + i];
                  if (!Object.is(a, e)) {
                    assert.fail(
                      `D ${D}, cut ${t}: batch ${b} token ${Math.floor(i / row)} element ${
                        i % row
                      } is ${a}, ` +
                        `the whole call gave ${e}`,
                    );
                  }
                }
              }
            }
          }
        })
      ),
  );
}
