/**
 * The one symbol table of the attnkit C ABI, merged from one file per family so that families can
 * grow without touching each other. Each symbol carries its C prototype as a comment where it is
 * declared.
 *
 * @module
 */
import { attentionSymbols } from "./symbols_attention.ts";
import { coreSymbols } from "./symbols_core.ts";
import { kernelSymbols } from "./symbols_kernels.ts";
import { linearSymbols } from "./symbols_linear.ts";
import { mathSymbols } from "./symbols_math.ts";
import { sparseSymbols } from "./symbols_sparse.ts";

/** Every symbol attnkit loads from its native library. */
export const symbols = {
  ...coreSymbols,
  ...kernelSymbols,
  ...linearSymbols,
  ...attentionSymbols,
  ...mathSymbols,
  ...sparseSymbols,
} as const satisfies Deno.ForeignLibraryInterface;

/** The loaded library's symbol functions. */
export type Symbols = Deno.DynamicLibrary<typeof symbols>["symbols"];
