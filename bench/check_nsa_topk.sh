#!/bin/bash
# The GPU check of NSA's block selection on tensor cores (sparse.nsa.topk.mma, pinned until measured), in one
# call on a GPU host: build, the NSA tests and the topk registry rows on CUDA (each pinned, held to the
# float64 oracle's importance), compute-sanitizer memcheck and racecheck over them, then the NSA benchmark:
# the three branches together and each alone, the selection with each kernel pinned. Usage:
# bench/check_nsa_topk.sh OUT_DIR, with DENO the command that runs deno there (default: deno).
set -uo pipefail
# shellcheck source=bench/gpu_check_steps.sh
source "$(dirname "$0")/gpu_check_steps.sh"
[ -e lib/libattnkit.so ] || step build 240 $deno run -A build.ts --arch sm_90a --jobs 16 --quiet --lineinfo
ATTNKIT_TEST_DEVICES=cuda step tests 180 $deno test -A tests/sparse_nsa.test.ts
ATTNKIT_TEST_DEVICES=cuda step variants 120 $deno test -A tests/variants.test.ts --filter "sparse.nsa"
step sanitize 180 $deno run -A tools/sanitize.ts --tools memcheck,racecheck --parallel 8 \
  --tests "tests/sparse_nsa.test.ts,tests/variants.test.ts#sparse.nsa.topk" --out "$out/sanitize.md"
step bench_nsa 200 $deno run -A bench/sparse_side_by_side.ts --ops nsa --iterations 5 --results "$out"
grep -hE '"op"' "$out"/bench_*.log | cut -c1-300
