#!/bin/bash
# Records the measured tables the planner's rules are held to (tests/shipped_defaults.test.ts), on a GPU
# host: every *_sweep.json of bench/results re-measured (tools/tune_sweep.ts --regenerate), and the tables
# not recorded yet. Usage: bench/record_sweeps.sh OUT_DIR COMMIT, with DENO the command that runs deno
# there (default: deno). Copy what it writes into bench/results, then run the test.
set -euo pipefail
out=${1:?output folder}
commit=${2:?commit measured}
deno=${DENO:-deno}
mkdir -p "$out"
day=$(date -u +%F)
sweep() { $deno run -A tools/tune_sweep.ts --commit "$commit" "$@"; }
sweep --regenerate --results bench/results --out "$out"
have() { ls bench/results/*_"$1"_sweep.json > /dev/null 2>&1; }
linear=B1_T4096_H16_D128,B2_T16384_H16_D128,B4_T2048_H16_D128,B3_T5000_H24_D128,B4_T4096_H64_D128,B1_T8192_H96_D128,B8_T1024_H8_D64,B8_T2048_H32_D256
have gdn_fwd_state ||
  sweep --op gdn-fwd --shapes $linear --keys linear.fwd.state,linear.fwd.state.tile \
    --record "$out/${day}_gdn_fwd_state_sweep.json"
attn=B8_S2048_H16_D64,B8_S2048_H16_D64_causal,B2_S8192_H16_D128_causal,B16_S1024_H32_D128,B1_S16384_H32_KV8_D128_causal,B2_S3000_H24_KV8_D128_causal,B4_S4096_H8_D256
for mode in fwd bwd; do
  have attention_$mode ||
    sweep --op attn-$mode --shapes $attn --keys attention.$mode --record "$out/${day}_attention_${mode}_sweep.json"
done
