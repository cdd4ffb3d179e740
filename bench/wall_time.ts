/**
 * What the `deno bench` files share: each case's calls timed by the wall clock up to the device's finish,
 * and once the run ends a table of every case's median time, with its rate.
 *
 * @example
 * ```ts
 * import { benchWallTimes, byteRate } from "./wall_time.ts";
 * const bytes = 8e6;
 * benchWallTimes([{ name: "fill [cpu]", device: "cpu", run: () => new Float64Array(bytes / 8).fill(1) }], {
 *   group: (name) => name,
 *   heading: "\nmedian wall time per call:",
 *   row: (c, ms) => `  ${c.name} ${ms.toFixed(3)} ms ${byteRate(bytes, ms)}`,
 * });
 * ```
 *
 * @module
 */
import { type Device, synchronize } from "../mod.ts";

/** One benchmark case. */
export interface WallCase {
  /** Deno's name of the case; the table's rows are keyed by it. */
  name: string;
  /** The device waited for after each call. */
  device: Device;
  /** Makes the inputs (once); where given, it runs before the timed part, out of Deno's figures too. */
  prepare?: () => void;
  /** One call. */
  run: () => void;
}

/** How the table after the run reads. */
export interface WallTable<C extends WallCase> {
  /** Deno's group of a case, from its name. */
  group: (name: string) => string;
  /** The line above the rows. */
  heading: string;
  /** A case's row, from its median milliseconds. */
  row: (c: C, ms: number) => string;
}

/**
 * Registers each case with `Deno.bench`, keeping the wall time of its every call (the run and the wait for
 * the device), and prints the table of medians when the process ends (a case never run has no row).
 */
export function benchWallTimes<C extends WallCase>(cases: readonly C[], table: WallTable<C>): void {
  const samples = new Map<string, number[]>();
  for (const c of cases) {
    Deno.bench({
      name: c.name,
      group: table.group(c.name),
      fn: (b) => {
        if (c.prepare) {
          c.prepare();
          synchronize(c.device);
          b.start();
        }
        const t0 = performance.now();
        c.run();
        synchronize(c.device);
        const ms = performance.now() - t0;
        if (c.prepare) b.end();
        const list = samples.get(c.name) ?? [];
        list.push(ms);
        samples.set(c.name, list);
      },
    });
  }
  globalThis.addEventListener("unload", () => {
    console.log(table.heading);
    for (const c of cases) {
      const s = [...(samples.get(c.name) ?? [])].sort((a, b) => a - b);
      if (s.length > 0) console.log(table.row(c, s[s.length >> 1]));
    }
  });
}

/**
 * `flops` in `ms` as a table cell: TFLOP/s, or GFLOP/s below 1 TFLOP/s.
 *
 * @example
 * ```ts
 * import { flopRate } from "./wall_time.ts";
 * console.log(flopRate(2e12, 1000), flopRate(5e11, 1000)); // "     2.0 TFLOP/s" "  500.00 GFLOP/s"
 * ```
 */
export function flopRate(flops: number, ms: number): string {
  const tflops = flops / ms / 1e9;
  return tflops >= 1
    ? `${tflops.toFixed(1).padStart(8)} TFLOP/s`
    : `${(tflops * 1e3).toFixed(2).padStart(8)} GFLOP/s`;
}

/**
 * `bytes` in `ms` as a table cell, in GB/s.
 *
 * @example
 * ```ts
 * import { byteRate } from "./wall_time.ts";
 * console.log(byteRate(4e9, 1000)); // "     4.0 GB/s"
 * ```
 */
export function byteRate(bytes: number, ms: number): string {
  return `${(bytes / ms / 1e6).toFixed(1).padStart(8)} GB/s`;
}
