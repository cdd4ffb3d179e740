#!/bin/bash
# The GPU check of the streamed tensor-core decode block (attention.decode.pipe), in one call on a GPU host:
# build, the decode tests (every block pinned against the float64 oracle, the registry rows against the CPU
# backend, explain, tune), compute-sanitizer (racecheck matters: the stages are reused every tile), then the
# decode benchmark with the planner's choice and with the streamed block pinned, side by side with cuDNN's
# figures, and the paged prefill with append (one scatter a cache now). Usage: bench/check_decode.sh OUT_DIR,
# with DENO the command that runs deno.
set -uo pipefail
# shellcheck source=bench/gpu_check_steps.sh
source "$(dirname "$0")/gpu_check_steps.sh"
[ -e lib/libattnkit.so ] || step build 240 $deno run -A build.ts --arch sm_90a --jobs 16 --quiet --lineinfo
ATTNKIT_TEST_DEVICES=cuda step tests 240 $deno test -A tests/attention_decode.test.ts tests/kernels.test.ts \
  tests/tune.test.ts tests/attention_prefill_paged.test.ts
ATTNKIT_TEST_DEVICES=cuda step variants 240 $deno test -A tests/variants.test.ts --filter "attention.decode"
step sanitize 240 $deno run -A tools/sanitize.ts --tools memcheck,racecheck --parallel 8 \
  --tests "tests/attention_decode.test.ts,tests/variants.test.ts#attention.decode" --out "$out/sanitize.md"
mkdir -p "$out/planner" "$out/pipe"
step bench_planner 120 $deno run -A bench/decode_side_by_side.ts --results "$out/planner"
step bench_pipe 120 $deno run -A bench/decode_side_by_side.ts --results "$out/pipe" \
  --tuning '{"attention.decode":"pipe"}'
step bench_paged_prefill 120 $deno run -A bench/sparse_side_by_side.ts --ops paged --results "$out"
grep -hE '"op"' "$out"/bench_*.log | cut -c1-400
