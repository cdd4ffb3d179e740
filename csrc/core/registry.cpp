#include "core/registry.h"

#include <cstring>

#include "core/common.h"
#include "generated/registry_rows.h"

namespace ak::registry {

int row_count() { return kRowCount; }

const Row& row(int index) { return kRows[index]; }

int find(const char* stage, const char* variant, int32_t dtype, int d, int tile) {
  for (int i = 0; i < kRowCount; ++i) {
    const Row& r = kRows[i];
    if (r.dtype == dtype && r.d == d && r.tile == tile && std::strcmp(r.stage, stage) == 0 &&
        std::strcmp(r.variant, variant) == 0) {
      return i;
    }
  }
  return -1;
}

bool has_stage(const char* stage, const char* variant) {
  for (int i = 0; i < kRowCount; ++i) {
    if (std::strcmp(kRows[i].stage, stage) == 0 && (variant == nullptr || std::strcmp(kRows[i].variant, variant) == 0)) {
      return true;
    }
  }
  return false;
}

std::string row_name(int index) {
  const Row& r = kRows[index];
  std::string s = std::string(r.stage) + "." + r.variant + "<" + dtype_name(r.dtype);
  if (r.d != 0) s += ", D" + std::to_string(r.d);
  if (r.tile != 0) s += ", tile " + std::to_string(r.tile);
  return s + ">";
}

bool Caps::can_run(int index) const {
  if (index < 0 || index >= kRowCount) return false;
  if (!built.empty() && !built[static_cast<size_t>(index)]) return false;
  if (kRows[index].arch == Arch::kSm90a) return is_hopper();
  return major >= 8;
}

bool preset_caps(const std::string& name, Caps& out) {
  // Published figures: compute capability, multiprocessors, opt-in shared memory per block and per
  // multiprocessor, L2 (NVIDIA's CUDA programming guide and product pages).
  struct Preset {
    const char* name;
    int major, minor, sms;
    int64_t smem_block, smem_sm, l2;
  };
  static const Preset presets[] = {
      {"h200", 9, 0, 132, 232448, 233472, 50 << 20},
      {"h100", 9, 0, 132, 232448, 233472, 50 << 20},
      {"a100", 8, 0, 108, 166912, 167936, 40 << 20},
      {"l40s", 8, 9, 142, 101376, 102400, 96 << 20},
  };
  for (const Preset& p : presets) {
    if (name == p.name) {
      out = Caps{p.major, p.minor, p.sms, p.smem_block, p.smem_sm, p.l2, {}};
      return true;
    }
  }
  return false;
}

}  // namespace ak::registry
