#!/bin/bash
# The GPU check of the tensor-core latent decode (DSA, MLA) and indexer, in one call on a GPU host: build,
# the CUDA tests they touch (the tensor-core block's other users too), compute-sanitizer over the sparse
# and MLA tests, then the benchmarks at the issue's shapes. Usage: bench/check_sparse_kernels.sh OUT_DIR,
# with DENO the command that runs deno there (default: deno). Logs and records go to OUT_DIR.
set -uo pipefail
# shellcheck source=bench/gpu_check_steps.sh
source "$(dirname "$0")/gpu_check_steps.sh"
step build 240 $deno run -A build.ts --arch sm_90a --jobs 16 --quiet --lineinfo
tests="tests/sparse_dsa_indexer.test.ts tests/attention_mla.test.ts tests/sparse_nsa.test.ts
  tests/attention_decode.test.ts tests/kernels.test.ts tests/tune.test.ts tests/graph_latent.test.ts"
# shellcheck disable=SC2086
ATTNKIT_TEST_DEVICES=cuda step tests 240 $deno test -A $tests
ATTNKIT_TEST_DEVICES=cuda step variants 240 $deno test -A tests/variants.test.ts --filter "/sparse|attention\.decode/"
step sanitize 300 $deno run -A tools/sanitize.ts --tools memcheck,racecheck --parallel 8 \
  --tests "tests/sparse_dsa_indexer.test.ts,tests/attention_mla.test.ts,tests/variants.test.ts#sparse" \
  --out "$out/sanitize.md"
step bench_dsa_indexer 300 $deno run -A bench/sparse_side_by_side.ts --ops dsa,indexer --results "$out"
step bench_mla 120 $deno run -A bench/mla_decode.ts --results "$out"
grep -hE '"op"' "$out"/bench_*.log | cut -c1-400
