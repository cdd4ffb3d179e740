#!/bin/bash
# The GPU check of the device-planned replay state (zero-drift serving), in one call on a GPU host: build,
# the serving tests (replay eager and captured, packed graphs, pools, prefix bits), compute-sanitizer over
# the replay tests, then the replay decode benchmark (eager checked, eager trusted, captured). Usage:
# bench/check_replay.sh OUT_DIR, with DENO the command that runs deno there (default: deno).
set -uo pipefail
# shellcheck source=bench/gpu_check_steps.sh
source "$(dirname "$0")/gpu_check_steps.sh"
[ -e lib/libattnkit.so ] || step build 240 $deno run -A build.ts --arch sm_90a --jobs 16 --quiet --lineinfo
tests="tests/paged_replay.test.ts tests/graph_replay.test.ts tests/graph_packed.test.ts tests/paged_chunk.test.ts
  tests/linear_prefix_bits.test.ts tests/paged_pool_copy.test.ts tests/graph.test.ts"
# shellcheck disable=SC2086
ATTNKIT_TEST_DEVICES=cuda step tests 300 $deno test -A $tests
step sanitize 240 $deno run -A tools/sanitize.ts --tools memcheck,racecheck --parallel 8 \
  --tests "tests/paged_replay.test.ts,tests/graph_replay.test.ts" --out "$out/sanitize.md"
step bench_replay 120 $deno run -A bench/replay_decode_side_by_side.ts --results "$out"
grep -hE '"op"' "$out"/bench_*.log | cut -c1-400
