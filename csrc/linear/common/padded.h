// The padded tile layout of the mma.sync kernels, visible to the host (the planner sizes shared
// memory with it) and to the kernels.
#pragma once

namespace ak::linear::cuda {

// Pitch in bytes of a padded tile of `cols` 16-bit elements per row: eight consecutive rows start in
// eight different 16-byte bank groups, so ldmatrix and 4-byte stores are conflict-free.
constexpr int tile_pitch(int cols) { return cols * 2 + 16; }

}  // namespace ak::linear::cuda
