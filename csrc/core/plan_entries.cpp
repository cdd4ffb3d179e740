// The C entries of the kernel layer: the tuning table (ak_tune_set, ak_tune_current, ak_tune_describe), the planners
// (ak_plan, ak_last_plan) and the registry (ak_kernels).
#include <string>

#include "core/common.h"
#include "core/plan.h"
#include "core/registry.h"
#include "core/tuning.h"
#if AK_WITH_CUDA
#include "cuda/backend.h"
#endif

using namespace ak;

namespace {

thread_local std::string answer;  // the text the last entry of this thread returned

const char* keep(std::string text) {
  answer = std::move(text);
  return answer.c_str();
}

std::string kernels_json(int32_t device) {
  const registry::Caps* caps = nullptr;
#if AK_WITH_CUDA
  if (device >= 0) caps = &cuda::caps(device);
#endif
  std::string out = "[";
  for (int i = 0; i < registry::row_count(); ++i) {
    const registry::Row& r = registry::row(i);
    out += std::string(i ? ", " : "") + "{\"index\": " + std::to_string(i) + ", \"name\": " +
           json_quoted(registry::row_name(i)) + ", \"stage\": " + json_quoted(r.stage) +
           ", \"variant\": " + json_quoted(r.variant) + ", \"arch\": \"" +
           (r.arch == registry::Arch::kSm90a ? "sm90a" : "sm80") + "\", \"dtype\": \"" + dtype_name(r.dtype) +
           "\", \"d\": " + std::to_string(r.d) + ", \"tile\": " + std::to_string(r.tile) +
           ", \"runnable\": " + (caps != nullptr && caps->can_run(i) ? "true" : "false") + "}";
  }
  return out + "]";
}

}  // namespace

extern "C" {

AK_API ak_status ak_tune_set(const char* spec) {
  AK_ENTRY("ak_tune_set", { tuning::set(spec != nullptr ? spec : ""); });
}

AK_API const char* ak_tune_describe(void) { return keep(tuning::describe_json()); }

AK_API ak_status ak_tune_current(const char** out) {
  AK_ENTRY("ak_tune_current", {
    require(out != nullptr, "out: expected a pointer");
    *out = keep(tuning::to_string(tuning::current()));
  });
}

AK_API ak_status ak_plan(const char* query, const char** out_json) {
  AK_ENTRY("ak_plan", {
    require(out_json != nullptr, "out_json: expected a pointer");
    require(query != nullptr, "query: expected a string such as \"op=attention.fwd,gpu=h200,d=128\"");
    *out_json = keep(plan::plan_for(query));
  });
}

AK_API const char* ak_last_plan(void) { return plan::last_json().c_str(); }

AK_API ak_status ak_kernels(int32_t device_index, const char** out_json) {
  AK_ENTRY("ak_kernels", {
    require(out_json != nullptr, "out_json: expected a pointer");
    if (device_index >= 0) {
      ak_tensor probe{};
      probe.device_type = AK_CUDA;
      probe.device_index = device_index;
      check_device(probe, "device_index");
    }
    *out_json = keep(kernels_json(device_index));
  });
}

}  // extern "C"
