#!/bin/sh
# Builds the host emulator of the delta-rule backward kernels into $EMU_DIR (default /tmp/ak-bwd-emu):
# copies the kernel headers with the shared-memory declarations turned into host pointers, then
# compiles emu.cpp with g++ (C++20, the CUDA headers for the bf16/f16 types; no GPU needed).
set -e
here=$(cd "$(dirname "$0")" && pwd)
src=$here/../../csrc/linear
dst=${EMU_DIR:-/tmp/ak-bwd-emu}
cuda=${CUDA_HOME:-/usr/local/cuda}
mkdir -p "$dst/linear"
for f in cuda_bwd.cuh cuda_bwd_elem.cuh cuda_bwd_mma.cuh cuda_bwd_fast.cuh cuda_bwd_fast_prep.cuh cuda_bwd_fast_prep_tc.cuh cuda_bwd_fast_dstates8.cuh \
  cuda_bwd_fast_states.cuh cuda_bwd_fast_grads.cuh cuda_bwd_fast_grads256.cuh cuda_bwd_segments.cuh cuda_bwd_general.cuh cuda_bwd_reduce.cuh; do
  sed -e 's/extern __shared__ __align__(16) unsigned char smraw\[\];/unsigned char* smraw = emu_dyn_smem;/' \
      -e 's/extern __shared__ \(__align__(16) \)\{0,1\}float sm\[\];/float* sm = reinterpret_cast<float*>(emu_dyn_smem);/' \
      "$src/$f" > "$dst/linear/$f"
done
cp "$here/emu.cpp" "$dst/"
g++ -std=c++20 -O1 -I"$dst" -I"$cuda/include" "$dst/emu.cpp" -o "$dst/emu" -pthread
echo "built $dst/emu"
