/**
 * The kernel registries: what a family's table says about each kernel, how it expands into one row
 * per instance (dtype, head dim, tile), and the C++ that the build generates from the rows (the row
 * table every backend compiles, one instantiation unit per row, the launch table of the CUDA build).
 *
 * A family's table lives beside its code (`csrc/<family>/registry.ts`); `build.ts` reads them all.
 * Each kernel names a launcher: a C++ class template `<class T, int D, int Tile>` with a type `Args`
 * and `static void launch(const Args&, cudaStream_t)`. The build declares every launcher of a family
 * in `generated/<family>_launchers.h` (what dispatchers include: no kernel code); the kernel's own
 * header defines `launch`.
 *
 * @example
 * ```ts
 * import { expandRows, type KernelFamily } from "./registry.ts";
 * const family: KernelFamily = {
 *   family: "demo",
 *   params: ["demo/params.h"],
 *   kernels: [{
 *     stage: "demo.fwd",
 *     variant: "mma",
 *     launcher: "ak::demo::Fwd",
 *     args: "FwdParams<T>",
 *     header: "demo/fwd.cuh",
 *     arch: "sm80",
 *     instances: [{ dtypes: ["bfloat16", "float16"], d: [64, 128] }],
 *     doc: "a demonstration",
 *   }],
 * };
 * console.log(expandRows([family]).length); // 4
 * ```
 *
 * @module
 */

/** Element type of a kernel instance (the inputs' dtype). */
export type KernelDtype = "float32" | "float16" | "bfloat16" | "float8_e4m3";

/** Lowest architecture a kernel runs on: sm80 code also serves newer GPUs, sm90a only Hopper. */
export type KernelArch = "sm80" | "sm90a";

/** A group of instances: every combination of its dtypes, head dims and tiles. */
export interface KernelInstances {
  /** Element types. */
  dtypes: readonly KernelDtype[];
  /** Head dims (0: the kernel takes any head dim at run time). */
  d: readonly number[];
  /** The launcher's third template parameter (a tile width, see the kernel's doc); default [0]. */
  tiles?: readonly number[];
}

/** One kernel of a family's table. */
export interface KernelSpec {
  /** The stage it serves, `<family>.<direction>.<stage>`, e.g. `linear.fwd.state`. */
  stage: string;
  /** Its name among the stage's kernels: tuning values and plans use it, e.g. `split`. */
  variant: string;
  /** The C++ launcher class template, fully qualified. */
  launcher: string;
  /** Its argument type, in the launcher's namespace; may use the template parameters T, D, Tile. */
  args: string;
  /** The header (from csrc/) that defines the launcher's `launch`. */
  header: string;
  /** Lowest architecture its code needs. */
  arch: KernelArch;
  /** The instances the build compiles. */
  instances: readonly KernelInstances[];
  /** What it computes and how, in a sentence or two. */
  doc: string;
  /** When it can serve a call, beyond dtype, head dim, tile and architecture. */
  constraints?: string;
}

/** A family's table. */
export interface KernelFamily {
  /** The family's name, the first part of its stages. */
  family: string;
  /** Headers (from csrc/) declaring the launchers' argument types, without kernel code. */
  params: readonly string[];
  /** Its kernels. */
  kernels: readonly KernelSpec[];
}

/** One instance: what the build compiles and the planner chooses among. */
export interface KernelRow {
  /** Position in the library's row table (all families, in order). */
  index: number;
  /** The family's name. */
  family: string;
  /** The family's generated launcher header (from the generated include folder). */
  launchers: string;
  /** The stage it serves. */
  stage: string;
  /** Its name among the stage's kernels. */
  variant: string;
  /** The launcher class template. */
  launcher: string;
  /** The header defining it. */
  header: string;
  /** Lowest architecture. */
  arch: KernelArch;
  /** Element type. */
  dtype: KernelDtype;
  /** Head dim (0: any). */
  d: number;
  /** Tile (the launcher's third template parameter). */
  tile: number;
}

const CXX_TYPE: Record<KernelDtype, string> = {
  float32: "float",
  float16: "__half",
  bfloat16: "__nv_bfloat16",
  float8_e4m3: "__nv_fp8_e4m3",
};

const C_DTYPE: Record<KernelDtype, string> = {
  float32: "AK_FLOAT32",
  float16: "AK_FLOAT16",
  bfloat16: "AK_BFLOAT16",
  float8_e4m3: "AK_FLOAT8_E4M3",
};

const STAGE = /^[a-z][a-z0-9]*(\.[a-z][a-z0-9_]*)+$/;
const VARIANT = /^[a-z][a-z0-9_]*$/;

/** Every instance of every family, numbered in order; throws on a malformed or repeated entry. */
export function expandRows(families: readonly KernelFamily[]): KernelRow[] {
  const rows: KernelRow[] = [];
  const seen = new Set<string>();
  for (const f of families) {
    for (const k of f.kernels) {
      const where = `${f.family} registry, ${k.stage}.${k.variant}`;
      if (!STAGE.test(k.stage) || !k.stage.startsWith(`${f.family}.`)) {
        throw new Error(`${where}: stage must look like ${f.family}.<direction>.<stage>`);
      }
      if (!VARIANT.test(k.variant)) throw new Error(`${where}: variant must be a lower-case identifier`);
      for (const group of k.instances) {
        for (const dtype of group.dtypes) {
          for (const d of group.d) {
            for (const tile of group.tiles ?? [0]) {
              const key = `${k.stage}.${k.variant}/${dtype}/${d}/${tile}`;
              if (seen.has(key)) throw new Error(`${where}: instance ${key} is listed twice`);
              seen.add(key);
              rows.push({
                index: rows.length,
                family: f.family,
                launchers: launcherHeader(f),
                stage: k.stage,
                variant: k.variant,
                launcher: k.launcher,
                header: k.header,
                arch: k.arch,
                dtype,
                d,
                tile,
              });
            }
          }
        }
      }
    }
  }
  return rows;
}

/** Path of a family's generated launcher header, as sources include it. */
export function launcherHeader(family: KernelFamily): string {
  return `generated/${family.family}_launchers.h`;
}

/**
 * A family's launcher header: each launcher declared once (kernels of a family may share one), with
 * the kernel's doc, inside its namespace; the argument types come from the family's `params` headers.
 */
export function launchersHeader(family: KernelFamily): string {
  const seen = new Map<string, KernelSpec>();
  for (const k of family.kernels) {
    const first = seen.get(k.launcher);
    if (first && first.args !== k.args) {
      throw new Error(`${family.family} registry: launcher ${k.launcher} is given two argument types`);
    }
    if (!first) seen.set(k.launcher, k);
  }
  const byNamespace = new Map<string, string[]>();
  for (const [name, k] of seen) {
    const cut = name.lastIndexOf("::");
    if (cut <= 0) throw new Error(`${family.family} registry: launcher ${name} must be namespace-qualified`);
    const ns = name.slice(0, cut);
    const decl = [
      `// ${k.stage}.${k.variant}: ${k.doc}`,
      "template <class T, int D, int Tile>",
      `struct ${name.slice(cut + 2)} {`,
      `  using Args = ${k.args};`,
      "  static void launch(const Args& a, cudaStream_t stream);",
      "};",
      "",
    ];
    byNamespace.set(ns, [...(byNamespace.get(ns) ?? []), ...decl]);
  }
  return [
    BANNER,
    "#pragma once",
    "",
    "#include <cuda_runtime.h>",
    "",
    ...family.params.map((h) => `#include "${h}"`),
    "",
    ...[...byNamespace].flatMap((
      [ns, decls],
    ) => [`namespace ${ns} {`, "", ...decls, `}  // namespace ${ns}`, ""]),
  ].join("\n");
}

/** A row as plans and messages write it, e.g. `linear.fwd.state.split<bfloat16, D128, tile 64>`. */
export function rowName(row: KernelRow): string {
  const parts: string[] = [row.dtype];
  if (row.d !== 0) parts.push(`D${row.d}`);
  if (row.tile !== 0) parts.push(`tile ${row.tile}`);
  return `${row.stage}.${row.variant}<${parts.join(", ")}>`;
}

const BANNER = "// Generated by build.ts from csrc/*/registry.ts: do not edit.";

/** The C++ row table (`generated/registry_rows.h`), compiled by every backend (the planner reads it). */
export function rowsHeader(rows: readonly KernelRow[]): string {
  const lines = rows.map((r) =>
    `    {"${r.stage}", "${r.variant}", Arch::${r.arch === "sm90a" ? "kSm90a" : "kSm80"}, ` +
    `${C_DTYPE[r.dtype]}, ${r.d}, ${r.tile}},  // ${r.index}`
  );
  return [
    BANNER,
    "#pragma once",
    "",
    '#include "core/registry.h"',
    "",
    "namespace ak::registry {",
    "",
    "inline constexpr Row kRows[] = {",
    ...lines,
    "};",
    "inline constexpr int kRowCount = static_cast<int>(sizeof(kRows) / sizeof(kRows[0]));",
    "",
    "}  // namespace ak::registry",
    "",
  ].join("\n");
}

function instance(row: KernelRow): string {
  return `${row.launcher}<${CXX_TYPE[row.dtype]}, ${row.d}, ${row.tile}>`;
}

/**
 * The rows grouped into instantiation units: one per kernel (launcher) and dtype, so that a unit
 * parses its header once for all head dims and tiles, and units still compile in parallel.
 */
export function unitGroups(rows: readonly KernelRow[]): KernelRow[][] {
  const groups = new Map<string, KernelRow[]>();
  for (const r of rows) {
    const key = `${r.stage}.${r.variant}/${r.dtype}`;
    const g = groups.get(key);
    if (g) g.push(r);
    else groups.set(key, [r]);
  }
  return [...groups.values()];
}

/** File name (without folder) of a group's instantiation unit. */
export function unitName(group: readonly KernelRow[]): string {
  const r = group[0];
  return `${r.stage}.${r.variant}_${r.dtype}`.replace(/\./g, "_") + ".cu";
}

/** The instantiation unit of a group of rows: its header and one explicit instantiation a row. */
export function instantiationUnit(group: readonly KernelRow[]): string {
  return [
    BANNER,
    `#include "${group[0].header}"`,
    "",
    ...group.map((r) => `template struct ${instance(r)};  // ${rowName(r)}`),
    "",
  ].join("\n");
}

/**
 * The launch table of a CUDA build (`launch_table.cu`): one entry per row, null where the row was not
 * compiled (its architecture was not built), and the targets the build compiled for.
 */
export function launchTableUnit(
  rows: readonly KernelRow[],
  built: readonly boolean[],
  targets: string[],
): string {
  const headers = [...new Set(rows.map((r) => r.launchers))].sort();
  const entries = rows.map((r, i) =>
    built[i] ? `    &erased<${instance(r)}>,  // ${r.index}` : `    nullptr,  // ${r.index}: not built`
  );
  return [
    BANNER,
    "#include <cuda_bf16.h>",
    "#include <cuda_fp16.h>",
    "#include <cuda_fp8.h>",
    "#include <cuda_runtime.h>",
    "",
    '#include "core/registry.h"',
    '#include "generated/registry_rows.h"',
    ...headers.map((h) => `#include "${h}"`),
    "",
    "namespace {",
    "",
    "// Calls a launcher with its arguments, which the dispatcher passed as `const void*`.",
    "template <class Launcher>",
    "void erased(const void* args, void* stream) {",
    "  Launcher::launch(*static_cast<const typename Launcher::Args*>(args), static_cast<cudaStream_t>(stream));",
    "}",
    "",
    "}  // namespace",
    "",
    "namespace ak::registry {",
    "",
    "extern const LaunchFn kLaunchTable[] = {",
    ...(entries.length > 0 ? entries : ["    nullptr,"]),
    "};",
    `static_assert(sizeof(kLaunchTable) / sizeof(kLaunchTable[0]) >= kRowCount, "one entry per row");`,
    `extern const char* const kBuiltTargets = "${targets.join(" ")}";`,
    "",
    "}  // namespace ak::registry",
    "",
  ].join("\n");
}
