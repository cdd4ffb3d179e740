// The SVG charts of benchmark results (cli/chart.ts): well-formed SVG with what a reader needs (title,
// GPU / date / commit, legend, one row per op, shape and mode, axis), byte-for-byte stable, and the
// committed charts of bench/results/ are what the renderer makes of their JSON.
import assert from "node:assert/strict";
import { renderChart } from "../cli/chart.ts";
import { parseResults, type ResultsFile } from "../cli/results.ts";
import { RECORDED_CHARTS, renderRecorded } from "../bench/charts.ts";

interface Element {
  name: string;
  attributes: Record<string, string>;
  text: string;
  children: Element[];
}

// A strict reader of the XML subset the renderer writes: a prolog, elements with double-quoted
// attributes, text with the five predefined entities or numeric ones. Throws on anything else
// (an unclosed or crossed tag, a bare & or <, a duplicate attribute).
function parseXml(source: string): Element {
  let i = 0;
  const prolog = /^<\?xml [^?]*\?>\s*/.exec(source);
  if (prolog) i = prolog[0].length;
  const checkText = (text: string, at: number) => {
    const bad = /&(?!(amp|lt|gt|quot|apos|#\d+);)|</.exec(text);
    if (bad) throw new Error(`unescaped "${bad[0]}" in text near offset ${at + bad.index}`);
  };
  const root: Element = { name: "#root", attributes: {}, text: "", children: [] };
  const stack: Element[] = [root];
  const tag = /<(\/?)([A-Za-z][\w:.-]*)((?:\s+[\w:.-]+="[^"<]*")*)\s*(\/?)>/y;
  while (i < source.length) {
    const next = source.indexOf("<", i);
    const text = source.slice(i, next < 0 ? source.length : next);
    checkText(text, i);
    stack[stack.length - 1].text += text;
    if (next < 0) break;
    tag.lastIndex = next;
    const m = tag.exec(source);
    if (!m) throw new Error(`malformed tag at offset ${next}: ${source.slice(next, next + 40)}`);
    const [, closing, name, attrs, selfClosing] = m;
    i = tag.lastIndex;
    if (closing) {
      const open = stack.pop();
      if (!open || open.name !== name) throw new Error(`</${name}> closes <${open?.name}> at offset ${next}`);
      continue;
    }
    const attributes: Record<string, string> = {};
    for (const a of attrs.matchAll(/([\w:.-]+)="([^"]*)"/g)) {
      if (a[1] in attributes) throw new Error(`duplicate attribute ${a[1]} on <${name}>`);
      checkText(a[2], next);
      attributes[a[1]] = a[2];
    }
    const element: Element = { name, attributes, text: "", children: [] };
    stack[stack.length - 1].children.push(element);
    if (!selfClosing) stack.push(element);
  }
  if (stack.length !== 1) throw new Error(`<${stack[stack.length - 1].name}> is never closed`);
  if (root.children.length !== 1 || root.text.trim() !== "") throw new Error("expected one root element");
  return root.children[0];
}

// Expects fn to throw an error whose message contains `text`.
function throwsWith(fn: () => unknown, text: string): void {
  assert.throws(fn, (e: Error) => e.message.includes(text) || assert.fail(`"${e.message}" lacks "${text}"`));
}

function all(e: Element, name: string): Element[] {
  return [...(e.name === name ? [e] : []), ...e.children.flatMap((c) => all(c, name))];
}

function texts(e: Element): string[] {
  return all(e, "text").map((t) => t.text);
}

const SAMPLE: ResultsFile = parseResults({
  date: "2026-01-02",
  gpu: "NVIDIA H200",
  commit: "abc1234",
  records: [
    {
      op: "chunkGatedDeltaRule",
      shape: "B1_T8192_H96_D128",
      dtype: "bfloat16",
      mode: "fwd",
      ms: 0.8,
      ref: "fla",
      ref_ms: 1.4,
    },
    {
      op: "chunkGatedDeltaRule",
      shape: "B4_T2048_H16_D128",
      dtype: "bfloat16",
      mode: "fwd",
      ms: 0.15,
      ref: "fla",
      ref_ms: 0.7,
    },
    {
      op: "chunkGatedDeltaRule",
      shape: "B1_T8192_H96_D128",
      dtype: "bfloat16",
      mode: "fwdbwd",
      ms: 3.6,
      ref: "fla",
      ref_ms: 3.2,
    },
    {
      op: "attention",
      shape: "B2_S4096_H8_D128",
      dtype: "bfloat16",
      mode: "fwd",
      ms: 1.1,
      ref: "sdpa <cudnn> & co",
      ref_ms: 1.0,
    },
    {
      op: "attention",
      shape: "B2_S4096_H8_D128",
      dtype: "bfloat16",
      mode: "fwd",
      ms: 1.1,
      ref: "fla",
      ref_ms: null,
    },
    {
      op: "attention",
      shape: "B9_S1_H1_D8",
      dtype: "bfloat16",
      mode: "bwd",
      ms: null,
      ref: null,
      ref_ms: null,
    },
  ],
});

for (const metric of ["ms", "speedup"] as const) {
  Deno.test(`chart (${metric}): well-formed SVG with title, GPU, date, commit, legend, rows and axis`, () => {
    const svg = renderChart(SAMPLE, { metric });
    const root = parseXml(svg);
    assert.equal(root.name, "svg");
    assert.equal(root.attributes.xmlns, "http://www.w3.org/2000/svg");
    const [width, height] = [Number(root.attributes.width), Number(root.attributes.height)];
    assert(width > 0 && height > 0, "positive size");
    assert.equal(root.attributes.viewBox, `0 0 ${width} ${height}`);
    const words = texts(root);
    assert.equal(words[0], "attnkit vs fla, sdpa &lt;cudnn&gt; &amp; co");
    assert.ok(
      words[1].includes("NVIDIA H200 · 2026-01-02 · commit abc1234 · bfloat16"),
      "NVIDIA H200 · 2026-01-02 · commit abc1234 · bfloat16",
    );
    for (const expected of ["chunkGatedDeltaRule · fwd", "chunkGatedDeltaRule · fwdbwd", "attention · fwd"]) {
      assert(words.includes(expected), `section ${expected}`);
    }
    for (const shape of ["B1_T8192_H96_D128", "B4_T2048_H16_D128", "B2_S4096_H8_D128", "B9_S1_H1_D8"]) {
      assert(words.includes(shape), `row ${shape}`);
    }
    assert(
      words.some((w) => w.startsWith(metric === "ms" ? "time per call, ms" : "speedup = ")),
      "axis title",
    );
    // Every number drawn is finite, and inside the picture.
    for (const e of all(root, "circle").concat(all(root, "rect"), all(root, "line"), all(root, "text"))) {
      for (const key of ["x", "y", "cx", "cy", "x1", "x2", "y1", "y2", "width", "height"]) {
        if (key in e.attributes) {
          const v = Number(e.attributes[key]);
          assert(
            Number.isFinite(v) && v >= 0 && v <= Math.max(width, height),
            `${e.name} ${key}=${e.attributes[key]}`,
          );
        }
      }
    }
    if (metric === "ms") {
      // attnkit's point per row that has a time, and the speedups: 1.75x, 4.67x, 0.89x, 0.91x, n/a.
      assert.equal(all(root, "circle").filter((c) => c.children[0]?.text.startsWith("attnkit:")).length, 4);
      for (const s of ["1.75×", "4.67×", "0.89×", "0.91×", "n/a"]) assert(words.includes(s), `speedup ${s}`);
    } else {
      assert(words.includes("1.75×") && words.includes("4.67×"), "bar labels");
      assert(all(root, "line").some((l) => l.attributes["stroke-dasharray"]), "the parity line");
    }
  });
}

Deno.test("chart: the same results give the same bytes; the options change them", () => {
  const a = renderChart(SAMPLE);
  assert.equal(renderChart(structuredClone(SAMPLE)), a);
  assert(renderChart(SAMPLE, { title: "other" }) !== a);
  const renamed = renderChart(SAMPLE, { refNames: { fla: "flash-linear-attention" } });
  assert.ok(renamed.includes(">flash-linear-attention</text>"), ">flash-linear-attention</text>");
  assert.match(a, /^<\?xml version="1.0" encoding="UTF-8"\?>\n<svg /);
  assert(a.endsWith("</svg>\n"));
});

Deno.test("chart: the committed charts of bench/results are the renderer's output for their JSON", async () => {
  for (const chart of RECORDED_CHARTS) {
    const expected = await renderRecorded(chart);
    parseXml(expected);
    const committed = await Deno.readTextFile(chart.svg);
    assert.equal(committed, expected, `${chart.svg} is stale: run \`deno run -A bench/charts.ts\``);
  }
});

Deno.test("results: every recorded layout reads; a file without rows is refused with the reason", async () => {
  for (const chart of RECORDED_CHARTS) {
    const file = parseResults(JSON.parse(await Deno.readTextFile(chart.json)), chart.json);
    assert(file.records.length > 0 && file.gpu?.startsWith("NVIDIA H200"), chart.json);
  }
  throwsWith(() => parseResults({ rows: [] }), `no "records"`);
  throwsWith(
    () => parseResults({ records: [{ op: "attention", shape: "B1_S1_H1_D8", mode: "fwd", ms: "fast" }] }),
    "record 0.ms",
  );
  throwsWith(() => parseResults({ records: [{ op: "attention", mode: "fwd", ms: 1 }] }), "shape");
  // speedup derived when not recorded
  const derived = parseResults([{ op: "a", shape: "s", mode: "fwd", ms: 2, ref: "r", ref_ms: 3 }]);
  assert.equal(derived.records[0].speedup, 1.5);
});

Deno.test("svg reader: refuses what a browser would refuse (the test's own check can fail)", () => {
  throwsWith(() => parseXml(`<svg><text>a & b</text></svg>`), "unescaped");
  throwsWith(() => parseXml(`<svg><g></svg>`), "closes");
  throwsWith(() => parseXml(`<svg><g>`), "never closed");
  throwsWith(() => parseXml(`<svg x="1" x="2"/>`), "duplicate");
  assert.equal(parseXml(`<svg><g a="1"/><text>x &lt; y</text></svg>`).children.length, 2);
});
