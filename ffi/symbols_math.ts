/** Tensor-math symbols of the C ABI: element-wise maps, selection, reductions, products (attnkit_math.h). */
export const mathSymbols = {
  // ak_status ak_map_unary(const ak_tensor* dst, const ak_tensor* src, int32_t op)
  ak_map_unary: { parameters: ["buffer", "buffer", "i32"], result: "i32" },
  // ak_status ak_map_binary(const ak_tensor* dst, const ak_tensor* a, const ak_tensor* b /* NULL: scalar */,
  //                         double scalar, int32_t op)
  ak_map_binary: { parameters: ["buffer", "buffer", "buffer", "f64", "i32"], result: "i32" },
  // ak_status ak_where(const ak_tensor* dst, const ak_tensor* cond, const ak_tensor* a, const ak_tensor* b)
  ak_where: { parameters: ["buffer", "buffer", "buffer", "buffer"], result: "i32" },
  // ak_status ak_reduce(const ak_tensor* dst, const ak_tensor* src, int32_t reduced_dims, int32_t op)
  ak_reduce: { parameters: ["buffer", "buffer", "i32", "i32"], result: "i32" },
  // ak_status ak_matmul(const ak_tensor* dst, const ak_tensor* a, const ak_tensor* b)
  ak_matmul: { parameters: ["buffer", "buffer", "buffer"], result: "i32" },
  // ak_status ak_index_select(const ak_tensor* dst, const ak_tensor* src, int32_t dim, const ak_tensor* index)
  ak_index_select: { parameters: ["buffer", "buffer", "i32", "buffer"], result: "i32" },
  // ak_status ak_scatter_rows(const ak_tensor* dst, const ak_tensor* src, const ak_tensor* index)
  ak_scatter_rows: { parameters: ["buffer", "buffer", "buffer"], result: "i32" },
} as const satisfies Deno.ForeignLibraryInterface;
