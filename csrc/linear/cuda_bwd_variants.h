// Variant switches of the CUDA delta-rule backward's fast path, read from the environment at each
// call, so that one GPU session can time the old and new versions of a stage side by side
// (bench/linear_bwd_timing.ts --variants). Defaults are the fastest measured ones.
//
//   ATTNKIT_LINEAR_BWD_PREP   = tc (default) | simt     the triangular inverse on tensor cores (split
//                                                       bf16, 8 warps, 3 blocks per SM) or the fp32
//                                                       SIMT version (4 warps, 2 blocks per SM)
//   ATTNKIT_LINEAR_BWD_VS     = auto (default) | 16 | 32 | 64   state columns per block of states (and
//                                                       of dstates v1)
//   ATTNKIT_LINEAR_BWD_DSTATES = v2 (default) | v1      dstates: 8 warps, everything double-buffered,
//                                                       or 4 warps (cuda_bwd_fast_states.cuh)
//   ATTNKIT_LINEAR_BWD_DVS    = auto (default) | 32 | 64 | 128  state columns per block of dstates v2
//   ATTNKIT_LINEAR_BWD_GRADS  = pipe (default) | persistent | grid    grads: resident blocks looping
//                                                       over items with every tile of the next item
//                                                       fetched as its buffer dies (round 3), the same
//                                                       with only dO, v_new, h fetched early (round 2),
//                                                       or one block per item
//   ATTNKIT_LINEAR_BWD_L2NORM = prep (default) | kernel  with the L2 norm in the kernel: prep (tensor-core
//                                                       version) normalises q and k as it loads them and
//                                                       writes the copies the later stages read, or a
//                                                       separate normalising kernel runs first
//   ATTNKIT_LINEAR_BWD_REDUCE = fused (default) | separate     group 1 with the L2 norm: the norm's
//                                                       backward inside grads, or the reduce kernel
//   ATTNKIT_LINEAR_BWD_CP     = off (default) | auto | P    context parallelism of states and dstates
//                                                       (v2): each sequence's chunks cut into P >= 2
//                                                       segments, summarised in parallel, chained by a
//                                                       small combine, then rerun (cuda_bwd_segments.cuh);
//                                                       auto picks P, or none, from a cost model
//   ATTNKIT_LINEAR_BWD_STOP   = prep | states | dstates | grads    timing only: skip the stages after
//                                                       this one (the gradients are then garbage)
#pragma once

#include <cstdlib>
#include <cstring>
#include <string>

#include "../core/common.h"

namespace ak::linear::cuda::bwd {

enum class Stage { Prep = 0, States = 1, DStates = 2, Grads = 3, All = 4 };

struct Variants {
  bool prep_tc = true;
  int vs = 0;  // 0: automatic
  bool dstates_v2 = true;
  int dvs = 0;  // 0: automatic
  bool grads_persistent = true;
  bool grads_pipe = true;
  bool l2_in_prep = true;
  bool fused_l2 = true;
  int cp = 0;  // segments of the sequential stages: 0 off, -1 automatic, else P >= 2
  Stage stop = Stage::All;
  bool runs(Stage s) const { return static_cast<int>(s) <= static_cast<int>(stop); }
};

inline Variants read_variants() {
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v == nullptr ? std::string() : std::string(v);
  };
  auto bad = [](const char* name, const std::string& v, const char* expected) {
    fail(AK_ERR_INVALID_ARGUMENT, std::string(name) + ": expected " + expected + ", got " + v);
  };
  Variants r;
  if (const std::string v = env("ATTNKIT_LINEAR_BWD_PREP"); !v.empty()) {
    if (v == "tc") r.prep_tc = true;
    else if (v == "simt") r.prep_tc = false;
    else bad("ATTNKIT_LINEAR_BWD_PREP", v, "tc or simt");
  }
  if (const std::string v = env("ATTNKIT_LINEAR_BWD_VS"); !v.empty() && v != "auto") {
    if (v == "16") r.vs = 16;
    else if (v == "32") r.vs = 32;
    else if (v == "64") r.vs = 64;
    else bad("ATTNKIT_LINEAR_BWD_VS", v, "auto, 16, 32 or 64");
  }
  if (const std::string v = env("ATTNKIT_LINEAR_BWD_DSTATES"); !v.empty()) {
    if (v == "v2") r.dstates_v2 = true;
    else if (v == "v1") r.dstates_v2 = false;
    else bad("ATTNKIT_LINEAR_BWD_DSTATES", v, "v1 or v2");
  }
  if (const std::string v = env("ATTNKIT_LINEAR_BWD_DVS"); !v.empty() && v != "auto") {
    if (v == "32") r.dvs = 32;
    else if (v == "64") r.dvs = 64;
    else if (v == "128") r.dvs = 128;
    else bad("ATTNKIT_LINEAR_BWD_DVS", v, "auto, 32, 64 or 128");
  }
  if (const std::string v = env("ATTNKIT_LINEAR_BWD_GRADS"); !v.empty()) {
    if (v == "pipe") r.grads_pipe = true;
    else if (v == "persistent") r.grads_pipe = false;
    else if (v == "grid") r.grads_persistent = r.grads_pipe = false;
    else bad("ATTNKIT_LINEAR_BWD_GRADS", v, "pipe, persistent or grid");
  }
  if (const std::string v = env("ATTNKIT_LINEAR_BWD_L2NORM"); !v.empty()) {
    if (v == "prep") r.l2_in_prep = true;
    else if (v == "kernel") r.l2_in_prep = false;
    else bad("ATTNKIT_LINEAR_BWD_L2NORM", v, "prep or kernel");
  }
  if (const std::string v = env("ATTNKIT_LINEAR_BWD_REDUCE"); !v.empty()) {
    if (v == "fused") r.fused_l2 = true;
    else if (v == "separate") r.fused_l2 = false;
    else bad("ATTNKIT_LINEAR_BWD_REDUCE", v, "fused or separate");
  }
  if (const std::string v = env("ATTNKIT_LINEAR_BWD_CP"); !v.empty() && v != "off") {
    if (v == "auto") {
      r.cp = -1;
    } else {
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (end == v.c_str() || *end != '\0' || n < 1 || n > 64) bad("ATTNKIT_LINEAR_BWD_CP", v, "off, auto or 1..64");
      r.cp = n == 1 ? 0 : static_cast<int>(n);
    }
  }
  if (const std::string v = env("ATTNKIT_LINEAR_BWD_STOP"); !v.empty() && v != "none") {
    if (v == "prep") r.stop = Stage::Prep;
    else if (v == "states") r.stop = Stage::States;
    else if (v == "dstates") r.stop = Stage::DStates;
    else if (v == "grads") r.stop = Stage::Grads;
    else bad("ATTNKIT_LINEAR_BWD_STOP", v, "prep, states, dstates, grads or none");
  }
  return r;
}

}  // namespace ak::linear::cuda::bwd
