/**
 * `deno bench` for device copies and casts (`deno task bench`). On the CPU backend the tensors are
 * 16 MiB; on CUDA (when present) 1 GiB. Each call waits for the device, so the times are wall
 * times per op; after the run a table gives GB/s (bytes read + written) for each.
 *
 * @module
 */
import { cudaAvailable, type Device, type DType, dtypeSize, Tensor } from "../mod.ts";
import { benchWallTimes, byteRate, type WallCase } from "./wall_time.ts";

interface Case extends WallCase {
  bytesMoved: number;
}

function defineCases(device: Device, sourceBytes: number): Case[] {
  const cases: Case[] = [];
  const label = sourceBytes >= 2 ** 30 ? `${sourceBytes / 2 ** 30} GiB` : `${sourceBytes / 2 ** 20} MiB`;
  const pairs: [DType, DType][] = [
    ["float32", "float32"],
    ["float32", "bfloat16"],
    ["bfloat16", "float32"],
    ["float32", "float16"],
    ["float16", "float32"],
  ];
  for (const [from, to] of pairs) {
    const n = sourceBytes / dtypeSize(from);
    let src: Tensor | undefined, dst: Tensor | undefined;
    cases.push({
      name: `${from === to ? `copy ${from}` : `cast ${from} -> ${to}`} ${label} [${device}]`,
      device,
      bytesMoved: n * (dtypeSize(from) + dtypeSize(to)),
      run: () => {
        src ??= Tensor.randn([n], { dtype: from, device, seed: 1 });
        dst ??= Tensor.empty([n], { dtype: to, device });
        dst.copyFrom(src);
      },
    });
  }
  // BTHD -> BHTD, bf16, D = 128
  const tokens = sourceBytes / (2 * 8 * 32 * 128);
  let bthd: Tensor | undefined;
  cases.push({
    name: `permute BTHD -> BHTD bfloat16 [8, ${tokens}, 32, 128] ${label} [${device}]`,
    device,
    bytesMoved: 2 * sourceBytes,
    run: () => {
      bthd ??= Tensor.randn([8, tokens, 32, 128], { dtype: "bfloat16", device, seed: 2 });
      bthd.permute([0, 2, 1, 3]).dispose();
    },
  });
  return cases;
}

const cases = defineCases("cpu", 16 * 2 ** 20);
if (cudaAvailable()) cases.push(...defineCases("cuda", 2 ** 30));

benchWallTimes(cases, {
  group: (name) => name.replace(/^(\S+).*\[(\w+)\]$/, "$1 [$2]"),
  heading: "\nGB/s (bytes read + written, median wall time per call including the wait for the device):",
  row: (c, ms) => `  ${c.name.padEnd(62)} ${ms.toFixed(3).padStart(9)} ms ${byteRate(c.bytesMoved, ms)}`,
});
