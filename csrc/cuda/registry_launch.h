// Launching a registry row in a CUDA build: the generated launch table (one entry per row, null for a
// row whose architecture the build left out) behind a typed call that checks the row serves the
// stage and dtype its caller asks for.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstring>
#include <string>
#include <type_traits>

#include "core/common.h"
#include "core/registry.h"

namespace ak::registry {
extern const LaunchFn kLaunchTable[];
extern const char* const kBuiltTargets;
}  // namespace ak::registry

namespace ak::cuda {

template <class T>
constexpr int32_t dtype_of() {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return AK_BFLOAT16;
  if constexpr (std::is_same_v<T, __half>) return AK_FLOAT16;
  if constexpr (std::is_same_v<T, __nv_fp8_e4m3>) return AK_FLOAT8_E4M3;
  return AK_FLOAT32;
}

// Runs row `index` (which must serve `stage` in dtype T) with its launcher's arguments.
template <class T, class Args>
void launch_row(int index, const char* stage, const Args& args, cudaStream_t stream) {
  const registry::Row& r = registry::row(index);
  if (std::strcmp(r.stage, stage) != 0 || r.dtype != dtype_of<T>() || registry::kLaunchTable[index] == nullptr) {
    fail(AK_ERR_INTERNAL, std::string("launch of ") + registry::row_name(index) + " as " + stage + " (" +
                              dtype_name(dtype_of<T>()) + ")");
  }
  registry::kLaunchTable[index](&args, stream);
}

}  // namespace ak::cuda
