// The caps of each device for the planners: its limits from the driver, and which registry rows the
// build compiled for its architecture.
#include "cuda/registry_launch.h"

#include <memory>
#include <mutex>
#include <sstream>
#include <vector>

#include "cuda/backend.h"
#include "cuda/runtime.cuh"

namespace ak::cuda {
namespace {

// Whether code compiled for the build's targets runs on compute capability major.minor: sm_90a code
// only on 9.0; sm_XY machine code on X.Y and newer minors of X; PTX (compute_XY) on X.Y and newer.
bool targets_run_on(bool needs_sm90a, int major, int minor) {
  std::istringstream in(registry::kBuiltTargets);
  std::string t;
  const int cc = major * 10 + minor;
  while (in >> t) {
    const bool ptx = t.rfind("compute_", 0) == 0;
    const bool arch_specific = t.back() == 'a';
    const int v = std::stoi(t.substr(ptx ? 8 : 3, 2));
    if (needs_sm90a) {
      if (t == "sm_90a" && cc == 90) return true;
      continue;
    }
    if (ptx && !arch_specific && v <= cc) return true;
    if (!ptx && v / 10 == major && v % 10 <= minor && (!arch_specific || v == cc)) return true;
  }
  return false;
}

}  // namespace

const registry::Caps& caps(int device) {
  static std::mutex mutex;
  static std::vector<std::unique_ptr<registry::Caps>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  if (device >= static_cast<int>(cache.size())) cache.resize(static_cast<size_t>(device) + 1);
  if (!cache[device]) {
    const cudaDeviceProp& p = props(device);
    auto c = std::make_unique<registry::Caps>();
    c->major = p.major;
    c->minor = p.minor;
    c->sms = p.multiProcessorCount;
    c->smem_block = static_cast<int64_t>(p.sharedMemPerBlockOptin);
    c->smem_sm = static_cast<int64_t>(p.sharedMemPerMultiprocessor);
    c->l2 = p.l2CacheSize;
    const bool sm80 = targets_run_on(false, p.major, p.minor), sm90a = targets_run_on(true, p.major, p.minor);
    c->built.resize(static_cast<size_t>(registry::row_count()));
    for (int i = 0; i < registry::row_count(); ++i) {
      const bool arch_ok = registry::row(i).arch == registry::Arch::kSm90a ? sm90a : sm80;
      c->built[i] = registry::kLaunchTable[i] != nullptr && arch_ok;
    }
    cache[device] = std::move(c);
  }
  return *cache[device];
}

}  // namespace ak::cuda
