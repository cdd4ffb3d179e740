/**
 * Renders the recorded H200 results in `bench/results/` as the SVG charts the README shows: run it
 * after recording new results (`deno run -A bench/charts.ts`); the tests check that the committed
 * charts are what the renderer makes of the JSON.
 *
 * @module
 */
import { renderChart } from "../cli/chart.ts";
import type { ChartOptions } from "../cli/chart.ts";
import { readResults } from "../cli/results.ts";

/** A chart of recorded results: its JSON, its SVG and how it is drawn. */
export interface RecordedChart {
  /** The results JSON, relative to the repository root. */
  json: string;
  /** The SVG written beside it. */
  svg: string;
  /** The rendering options. */
  options: ChartOptions;
}

const RESULTS = "bench/results";

/** The charts of the recorded results. */
export const RECORDED_CHARTS: readonly RecordedChart[] = [
  {
    json: `${RESULTS}/2026-11-30g_linear.json`,
    svg: `${RESULTS}/2026-11-30g_linear.svg`,
    options: { title: "DeltaNet and Gated DeltaNet: attnkit vs flash-linear-attention 0.5.2" },
  },
  {
    json: `${RESULTS}/2026-11-30b_attention.json`,
    svg: `${RESULTS}/2026-11-30b_attention.svg`,
    options: {
      title: "Softmax attention: attnkit vs PyTorch scaled_dot_product_attention",
      refNames: { sdpa_flash2: "SDPA, FlashAttention-2 backend", sdpa_cudnn: "SDPA, cuDNN backend" },
    },
  },
  {
    json: `${RESULTS}/2026-12-01_architecture.json`,
    svg: `${RESULTS}/2026-12-01_architecture.svg`,
    options: {
      title: "attnkit before and after the kernel-layer rework (same GPU, alternating runs)",
      refNames: { "attnkit 379876a (before issue 10)": "attnkit 379876a (before)" },
    },
  },
];

/** Renders one recorded chart from its JSON (paths relative to `root`). */
export async function renderRecorded(chart: RecordedChart, root = "."): Promise<string> {
  return renderChart(await readResults(`${root}/${chart.json}`), chart.options);
}

if (import.meta.main) {
  for (const chart of RECORDED_CHARTS) {
    await Deno.writeTextFile(chart.svg, await renderRecorded(chart));
    console.log(`wrote ${chart.svg}`);
  }
}
