/**
 * Every family's kernel registry, in the order of the library's row table (the build generates it
 * from this list).
 *
 * @example
 * ```ts
 * import { REGISTRIES } from "./registries.ts";
 * console.log(REGISTRIES.map((r) => r.family)); // ["linear", "attention", "sparse"]
 * ```
 *
 * @module
 */
import { attentionRegistry } from "../csrc/attention/registry.ts";
import { linearRegistry } from "../csrc/linear/registry.ts";
import { sparseRegistry } from "../csrc/sparse/registry.ts";
import type { KernelFamily } from "./registry.ts";

/** The registries of every family. */
export const REGISTRIES: readonly KernelFamily[] = [linearRegistry, attentionRegistry, sparseRegistry];
