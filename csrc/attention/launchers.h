// The launchers of the attention kernels, as the registry (registry.ts) names them: each a class
// template <class T, int D, int Tile> with its argument type and a launch function, defined beside
// its kernel and instantiated per registry row by the build. No kernel code here: the dispatchers and
// the launch table include this header only.
#pragma once

#include <cuda_runtime.h>

#include "attention/bwd/params.h"
#include "attention/fwd/params.h"

namespace ak::attention::cuda {

// ---- forward ----

struct FwdGeneralArgs {
  FwdParams p;
  bool aligned = true;  // q, k, v and their strides allow 16-byte copies
};

// mma.sync, 64-row query tiles; D is the width the kernel is built for (p.d <= D, zero-padded).
template <class T, int D, int Tile>
struct FwdGeneral {
  using Args = FwdGeneralArgs;
  static void launch(const Args& a, cudaStream_t stream);
};

// Hopper: one block per 128-row query tile, a TMA producer and two wgmma consumer warpgroups.
template <class T, int D, int Tile>
struct FwdWgmma {
  using Args = FwdParams;
  static void launch(const Args& p, cudaStream_t stream);
};

// Hopper, persistent: a block per multiprocessor looping over work tiles of 64 x consumers rows.
template <class T, int D, int Tile>
struct FwdWgmmaPersistent {
  using Args = FwdParams;
  static void launch(const Args& p, cudaStream_t stream);
};

// ---- backward (the main stage; prep and the dq conversion are plain kernels) ----

struct BwdArgs {
  BwdParams p;
  int device = 0;
};

template <class T, int D, int Tile>
struct BwdGeneral {
  using Args = BwdArgs;
  static void launch(const Args& a, cudaStream_t stream);
};

template <class T, int D, int Tile>
struct BwdWgmma {
  using Args = BwdArgs;
  static void launch(const Args& a, cudaStream_t stream);
};

template <class T, int D, int Tile>
struct BwdWgmmaV2 {
  using Args = BwdArgs;
  static void launch(const Args& a, cudaStream_t stream);
};

}  // namespace ak::attention::cuda
