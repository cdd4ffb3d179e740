/** Softmax-attention symbols of the C ABI (csrc/include/attnkit_attention.h). */
export const attentionSymbols = {} as const satisfies Deno.ForeignLibraryInterface;
