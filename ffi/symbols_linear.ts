/** Linear-attention symbols of the C ABI (csrc/include/attnkit_linear.h). */
export const linearSymbols = {} as const satisfies Deno.ForeignLibraryInterface;
