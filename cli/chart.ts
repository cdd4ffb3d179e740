/**
 * Benchmark charts as SVG, written by hand (no dependency): attnkit against its reference per shape,
 * one row per (op, shape, mode), grouped in sections per op and mode. Two views: times on a log axis
 * with the speedup printed beside each row (`"ms"`), or speedup bars around parity (`"speedup"`).
 * The same input always gives the same bytes.
 *
 * @module
 */
import { checkOptions } from "../ops/args.ts";
import { parseResults, type ResultRecord, type ResultsFile } from "./results.ts";

/** Options of {@link renderChart}. */
export interface ChartOptions {
  /** `"ms"` (default): time per call on a log axis; `"speedup"`: reference ms / attnkit ms as bars. */
  metric?: "ms" | "speedup";
  /** The title (default: "attnkit vs" and the reference's name). */
  title?: string;
  /** Renames reference series in the legend, e.g. `{ "sdpa_flash2": "PyTorch SDPA (FlashAttention-2)" }`. */
  refNames?: Readonly<Record<string, string>>;
}

interface Group {
  shape: string;
  ms: number | null;
  refs: Map<string, number | null>;
}

interface Section {
  title: string;
  groups: Group[];
}

const WIDTH = 960;
const SPEEDUP_COLUMN = 66; // one speedup (marker and value) in the right-hand column
const ROW = 22;
const HEADING = 26;
const CHAR = 7.5; // a generous advance of the 12 px font, to size the label column
const COLORS = ["#2563eb", "#ea580c", "#6b7280", "#16a34a", "#9333ea", "#b45309"];
const FONT = `font-family="DejaVu Sans, Helvetica, Arial, sans-serif"`;

function esc(s: string): string {
  return s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;")
    .replace(/'/g, "&#39;");
}

function n(x: number): string {
  const r = Math.round(x * 10) / 10;
  return Object.is(r, -0) ? "0" : String(r);
}

// Sections per (op, mode) and rows per shape, in the order the records first name them.
function collect(records: readonly ResultRecord[]): { sections: Section[]; refs: string[] } {
  const sections = new Map<string, Section>();
  const groups = new Map<string, Group>();
  const refs: string[] = [];
  for (const r of records) {
    const sectionKey = `${r.op}\u0000${r.mode}`;
    let section = sections.get(sectionKey);
    if (!section) {
      section = { title: `${r.op} · ${r.mode}`, groups: [] };
      sections.set(sectionKey, section);
    }
    const key = `${sectionKey}\u0000${r.shape}`;
    let group = groups.get(key);
    if (!group) {
      group = { shape: r.shape, ms: null, refs: new Map() };
      groups.set(key, group);
      section.groups.push(group);
    }
    if (group.ms === null) group.ms = r.ms;
    if (r.ref !== null) {
      if (!refs.includes(r.ref)) refs.push(r.ref);
      if (!group.refs.has(r.ref) || group.refs.get(r.ref) === null) group.refs.set(r.ref, r.ref_ms);
    }
  }
  return { sections: [...sections.values()], refs };
}

// 1-2-5 steps: the largest at or below x, or the smallest at or above it.
function step125(x: number, up: boolean): number {
  const e = Math.floor(Math.log10(x));
  const candidates = [-1, 0, 1].flatMap((d) => [1, 2, 5].map((m) => m * 10 ** (e + d)));
  const fit = candidates.filter((c) => (up ? c >= x * (1 - 1e-12) : c <= x * (1 + 1e-12)));
  return up ? Math.min(...fit) : Math.max(...fit);
}

function tickLabel(v: number): string {
  return String(Number(v.toPrecision(3)));
}

interface Axis {
  x: (v: number) => number;
  ticks: number[];
  title: string;
}

function logAxis(values: number[], left: number, right: number): Axis {
  let lo = Math.min(...values), hi = Math.max(...values);
  if (!(lo > 0)) lo = 1e-3;
  if (hi <= lo) hi = lo * 2;
  lo = step125(lo, false);
  hi = step125(hi, true);
  const ticks: number[] = [];
  for (let e = Math.floor(Math.log10(lo)); 10 ** e <= hi * 1.000001; e++) {
    for (const m of [1, 2, 5]) {
      const v = m * 10 ** e;
      if (v >= lo * 0.999999 && v <= hi * 1.000001) ticks.push(Number(v.toPrecision(3)));
    }
  }
  const span = Math.log10(hi) - Math.log10(lo);
  return {
    x: (v) => left + (Math.log10(v) - Math.log10(lo)) / span * (right - left),
    ticks: ticks.length > 12 ? ticks.filter((t) => Math.abs(Math.log10(t) % 1) < 1e-9) : ticks,
    title: "time per call, ms (log scale; lower is faster)",
  };
}

function linearAxis(max: number, left: number, right: number): Axis {
  const top = Math.max(1.25, max * 1.08);
  const stepSize = step125(top / 6, true);
  const hi = Math.ceil(top / stepSize) * stepSize;
  const ticks: number[] = [];
  for (let v = 0; v <= hi + stepSize / 2; v += stepSize) ticks.push(Number(v.toPrecision(3)));
  return {
    x: (v) => left + v / hi * (right - left),
    ticks,
    title: "speedup = reference ms / attnkit ms (above 1: attnkit is faster)",
  };
}

function marker(kind: number, cx: number, cy: number, color: string, tip: string): string {
  const t = `<title>${esc(tip)}</title>`;
  const cxs = n(cx), cys = n(cy);
  switch (kind % 4) {
    case 0:
      return `<circle cx="${cxs}" cy="${cys}" r="5" fill="${color}">${t}</circle>`;
    case 1:
      return `<path d="M${n(cx)} ${n(cy - 6)}L${n(cx + 6)} ${cys}L${cxs} ${n(cy + 6)}L${
        n(cx - 6)
      } ${cys}Z" ` +
        `fill="${color}">${t}</path>`;
    case 2:
      return `<rect x="${n(cx - 4.5)}" y="${n(cy - 4.5)}" width="9" height="9" fill="${color}">${t}</rect>`;
    default:
      return `<path d="M${cxs} ${n(cy - 6)}L${n(cx + 6)} ${n(cy + 5)}L${n(cx - 6)} ${n(cy + 5)}Z" ` +
        `fill="${color}">${t}</path>`;
  }
}

function defaultTitle(refs: readonly string[], names: (r: string) => string): string {
  if (refs.length === 0) return "attnkit";
  if (refs.length === 1) return `attnkit vs ${names(refs[0])}`;
  return `attnkit vs ${refs.map(names).join(", ")}`;
}

/**
 * Renders a results file as an SVG document: a title (with GPU, date and commit when the file names
 * them), a legend, one row per (op, shape, mode) and an axis. Deterministic: the same results and
 * options give the same string.
 *
 * @example
 * ```ts
 * import { parseResults, renderChart } from "@attnkit/attnkit/cli";
 * const results = parseResults({
 *   gpu: "NVIDIA H200",
 *   records: [
 *     { op: "attention", shape: "B4_S4096_H32_D128", dtype: "bfloat16", mode: "fwd", ms: 1.71, ref: "sdpa", ref_ms: 1.84 },
 *   ],
 * });
 * const svg = renderChart(results, { metric: "speedup" });
 * console.log(svg.startsWith("<?xml")); // true
 * ```
 */
export function renderChart(results: ResultsFile, options: ChartOptions = {}): string {
  options = checkOptions<ChartOptions>("renderChart", options, {
    metric: ["ms", "speedup"],
    title: "string",
    refNames: (v) =>
      typeof v === "object" && !Array.isArray(v) &&
        Object.values(v as object).every((s) => typeof s === "string")
        ? undefined
        : "an object of strings",
  });
  results = parseResults(results, "results"); // checks every record, fills what is optional
  const metric = options.metric ?? "ms";
  const { sections, refs } = collect(results.records);
  const name = (r: string) => options.refNames?.[r] ?? r;
  const series = ["attnkit", ...refs];
  const color = (s: string) => COLORS[series.indexOf(s) % COLORS.length];
  const maxRefs = Math.max(1, ...sections.flatMap((s) => s.groups.map((g) => g.refs.size)));

  const longest = Math.max(...sections.flatMap((s) => s.groups.map((g) => g.shape.length)));
  const labelWidth = Math.max(150, Math.ceil(32 + CHAR * longest));
  const rightWidth = metric === "ms" ? 24 + SPEEDUP_COLUMN * maxRefs : 24;
  const left = labelWidth, right = WIDTH - rightWidth;

  const title = options.title ?? defaultTitle(refs, name);
  const dtypes = [...new Set(results.records.map((r) => r.dtype).filter((d) => d))];
  const subtitle = [
    results.gpu,
    results.date,
    results.commit ? `commit ${results.commit}` : undefined,
    dtypes.length ? dtypes.join(", ") : undefined,
  ].filter((s) => s).join(" · ");

  // Legend: one entry per series, wrapped onto as many lines as needed.
  const legend: string[] = [];
  let lx = 20, ly = subtitle ? 72 : 56;
  for (const [i, s] of series.entries()) {
    if (metric === "speedup" && i === 0) continue; // the bars are all attnkit's
    const label = s === "attnkit" ? "attnkit" : name(s);
    const w = 28 + CHAR * label.length;
    if (lx + w > WIDTH - 20 && lx > 20) {
      lx = 20;
      ly += 20;
    }
    const mark = metric === "ms"
      ? marker(i, lx + 6, ly - 4, color(s), label)
      : `<rect x="${lx}" y="${ly - 10}" width="12" height="12" fill="${color(s)}"/>`;
    legend.push(mark, `<text x="${lx + 18}" y="${ly}" font-size="12">${esc(label)}</text>`);
    lx += w + 14;
  }
  const plotTop = ly + 18;

  const values: number[] = [];
  for (const s of sections) {
    for (const g of s.groups) {
      if (metric === "ms") {
        if (g.ms !== null && g.ms > 0) values.push(g.ms);
        for (const v of g.refs.values()) if (v !== null && v > 0) values.push(v);
      } else if (g.ms !== null && g.ms > 0) {
        for (const v of g.refs.values()) if (v !== null) values.push(v / g.ms);
      }
    }
  }
  const axis = metric === "ms"
    ? logAxis(values.length ? values : [1], left + 10, right - 10)
    : linearAxis(values.length ? Math.max(...values) : 1, left + 10, right - 10);

  const body: string[] = [];
  let y = plotTop;
  for (const section of sections) {
    y += HEADING;
    body.push(`<text x="20" y="${n(y - 8)}" font-size="13" font-weight="bold">${esc(section.title)}</text>`);
    for (const g of section.groups) {
      const cy = y + ROW / 2;
      body.push(
        `<line x1="${left}" y1="${n(cy)}" x2="${right}" y2="${n(cy)}" stroke="#eeeeee"/>`,
        `<text x="${left - 12}" y="${n(cy + 4)}" font-size="12" text-anchor="end">${esc(g.shape)}</text>`,
      );
      const refEntries = [...g.refs.entries()];
      if (metric === "ms") {
        const known = [g.ms, ...refEntries.map(([, v]) => v)].filter((v): v is number => v !== null && v > 0);
        if (known.length > 1) {
          const xs = known.map(axis.x);
          body.push(
            `<line x1="${n(Math.min(...xs))}" y1="${n(cy)}" x2="${n(Math.max(...xs))}" y2="${n(cy)}" ` +
              `stroke="#9ca3af" stroke-width="2"/>`,
          );
        }
        for (const [ref, v] of refEntries) {
          if (v === null || v <= 0) continue;
          const i = series.indexOf(ref);
          body.push(marker(i, axis.x(v), cy, color(ref), `${name(ref)}: ${v.toFixed(3)} ms`));
        }
        if (g.ms !== null && g.ms > 0) {
          body.push(marker(0, axis.x(g.ms), cy, color("attnkit"), `attnkit: ${g.ms.toFixed(3)} ms`));
        }
        // Each reference's speedup, after a small copy of its marker.
        for (const [j, [ref, v]] of refEntries.entries()) {
          const s = g.ms !== null && g.ms > 0 && v !== null ? v / g.ms : null;
          const shown = s === null ? null : Number(s.toFixed(2)); // colour what the text says
          const fill = shown === null || shown === 1 ? "#6b7280" : shown > 1 ? "#15803d" : "#b91c1c";
          const x = right + 18 + j * SPEEDUP_COLUMN;
          body.push(
            marker(series.indexOf(ref), x, cy, color(ref), name(ref)).replace(/r="5"/, `r="4"`),
            `<text x="${n(x + 9)}" y="${n(cy + 4)}" font-size="12" fill="${fill}">` +
              `${s === null ? "n/a" : `${s.toFixed(2)}×`}</text>`,
          );
        }
      } else {
        const barHeight = (ROW - 6) / Math.max(1, refEntries.length);
        for (const [j, [ref, v]] of refEntries.entries()) {
          const top = y + 3 + j * barHeight;
          if (g.ms === null || g.ms <= 0 || v === null) {
            body.push(
              `<text x="${left + 14}" y="${n(top + barHeight - 2)}" font-size="10" fill="#6b7280">n/a</text>`,
            );
            continue;
          }
          const s = v / g.ms;
          const x1 = axis.x(s);
          body.push(
            `<rect x="${left + 10}" y="${n(top)}" width="${n(x1 - left - 10)}" height="${
              n(barHeight - 1)
            }" ` +
              `fill="${color(ref)}"><title>${esc(`${name(ref)}: ${s.toFixed(2)}×`)}</title></rect>`,
            `<text x="${n(x1 + 4)}" y="${n(top + barHeight - 2)}" font-size="10">${s.toFixed(2)}×</text>`,
          );
        }
      }
      y += ROW;
    }
  }
  const plotBottom = y + 6;

  // Grid and tick labels.
  const grid: string[] = [];
  for (const t of axis.ticks) {
    const x = n(axis.x(t));
    const parity = metric === "speedup" && t === 1;
    grid.push(
      `<line x1="${x}" y1="${plotTop}" x2="${x}" y2="${n(plotBottom)}" stroke="${
        parity ? "#111827" : "#d1d5db"
      }"` +
        `${parity ? ` stroke-dasharray="4 3"` : ""}/>`,
      `<text x="${x}" y="${n(plotBottom + 16)}" font-size="11" text-anchor="middle">${tickLabel(t)}</text>`,
    );
  }
  if (metric === "ms") {
    grid.push(`<text x="${right + 10}" y="${plotTop + 14}" font-size="11" fill="#374151">speedup</text>`);
  }
  const height = Math.ceil(plotBottom + 46);
  const axisTitle = `<text x="${n((left + right) / 2)}" y="${n(plotBottom + 36)}" font-size="12" ` +
    `text-anchor="middle">${esc(axis.title)}</text>`;

  return [
    `<?xml version="1.0" encoding="UTF-8"?>`,
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" ` +
    `viewBox="0 0 ${WIDTH} ${height}" ${FONT} fill="#111827">`,
    `<rect x="0" y="0" width="${WIDTH}" height="${height}" fill="#ffffff"/>`,
    `<text x="20" y="28" font-size="17" font-weight="bold">${esc(title)}</text>`,
    subtitle ? `<text x="20" y="48" font-size="12" fill="#374151">${esc(subtitle)}</text>` : "",
    ...legend,
    ...grid,
    ...body,
    axisTitle,
    `</svg>`,
  ].filter((line) => line !== "").join("\n") + "\n";
}
