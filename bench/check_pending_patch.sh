#!/bin/bash
# A before / after GPU check of pending CUDA patches to the attention blocks, in one call on a GPU host: build
# the tree as it is and run the benchmarks, apply the patches in order (`patch -p1`; no git needed there),
# rebuild what they touch, run the CUDA tests and registry rows of the blocks, compute-sanitizer over them,
# and the same benchmarks again, so both sides come from one machine (decode_blocks times each block pinned,
# so patches to different blocks read apart). Usage: bench/check_pending_patch.sh OUT_DIR PATCH..., with DENO
# the command that runs deno there (default: deno). The records go to OUT_DIR/before and OUT_DIR/after.
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: $0 OUT_DIR PATCH..." >&2; exit 2; }
patches=("${@:2}")
# shellcheck source=bench/gpu_check_steps.sh
source "$(dirname "$0")/gpu_check_steps.sh"
benches() {
  mkdir -p "$out/$1"
  step "$1_sparse" 150 $deno run -A bench/sparse_side_by_side.ts --ops nsa,dsa --iterations 5 --results "$out/$1"
  step "$1_mla" 90 $deno run -A bench/mla_decode.ts --results "$out/$1"
  step "$1_blocks" 120 $deno run -A bench/decode_blocks.ts --dims 64,128,256 --iterations 10 --results "$out/$1"
  step "$1_decode" 90 $deno run -A bench/decode_side_by_side.ts --iterations 20 --results "$out/$1"
}
step build 240 $deno run -A build.ts --arch sm_90a --jobs 16 --quiet --lineinfo
benches before
for p in "${patches[@]}"; do
  patch -p1 < "$p" >> "$out/patch.log" 2>&1
  echo "patch $p rc=$?"
done
step rebuild 240 $deno run -A build.ts --arch sm_90a --jobs 16 --quiet --lineinfo
tests="tests/sparse_dsa_indexer.test.ts tests/attention_mla.test.ts tests/sparse_nsa.test.ts
  tests/attention_decode.test.ts tests/kernels.test.ts"
# shellcheck disable=SC2086
ATTNKIT_TEST_DEVICES=cuda step tests 240 $deno test -A $tests
ATTNKIT_TEST_DEVICES=cuda step variants 240 $deno test -A tests/variants.test.ts --filter "/sparse|attention\.decode/"
step sanitize 240 $deno run -A tools/sanitize.ts --tools memcheck,racecheck --parallel 8 \
  --tests "tests/attention_decode.test.ts,tests/attention_mla.test.ts,tests/sparse_nsa.test.ts,tests/variants.test.ts#sparse" \
  --out "$out/sanitize.md"
benches after
for side in before after; do
  grep -hE '"op"' "$out/${side}_sparse.log" "$out/${side}_mla.log" "$out/${side}_decode.log" | cut -c1-200
done
