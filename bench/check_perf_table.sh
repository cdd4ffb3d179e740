#!/bin/bash
# The performance table of the attention and Gated DeltaNet rows (the softmax forward / backward against
# PyTorch SDPA's cuDNN and FlashAttention-2 backends in the same call; the GDN / DeltaNet forward, forward +
# backward and decode against FLA's H200 times in ANCHORS.md, FLA itself skipped: it autotunes for minutes),
# re-measured in one call on a GPU host with the scripts that recorded it. Usage:
# bench/check_perf_table.sh OUT_DIR, with DENO the command that runs deno there (default: deno). Logs and the
# records (`<date>_attention.*`, `<date>_linear.*`) go to OUT_DIR, the verdicts against bench/perf_goals.json
# to OUT_DIR/goals.md.
set -uo pipefail
# shellcheck source=bench/gpu_check_steps.sh
source "$(dirname "$0")/gpu_check_steps.sh"
[ -e lib/libattnkit.so ] || step build 240 $deno run -A build.ts --arch sm_90a --jobs 16 --quiet --lineinfo
step attention 300 $deno run -A bench/attention_side_by_side.ts --results "$out"
step linear 240 $deno run -A bench/linear_side_by_side.ts --ops gdn,delta,decode --skip-fla --results "$out"
grep -hE '^\| [A-Za-z]' "$out"/attention.log "$out"/linear.log | cut -c1-220
# The table against its goals (bench/perf_goals.json).
$deno run -A bench/perf_goals.ts "$out"/*_attention.json "$out"/*_linear.json | tee "$out/goals.md"
pack_logs
