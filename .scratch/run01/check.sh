set -u
export DENO="bash .gpu/enter.sh deno"
source bench/gpu_check_steps.sh "$OUT"
COMMIT=$(git rev-parse --short HEAD)+fvec
step build 200 $deno run -A build.ts --arch sm_90a --jobs 16 --quiet
DENO_JOBS=8 ATTNKIT_TEST_DEVICES=cuda step suite 280 $deno test -A --parallel tests/
ATTNKIT_TEST_DEVICES=cuda step variants 120 $deno test -A tests/variants.test.ts --filter "linear.gla"
ATTNKIT_BENCH_COMMIT=$COMMIT step bench 100 $deno run -A bench/gla_side_by_side.ts --results $OUT --ops feature --only B4_T4096_H64_D128
grep -E "FAILED|failed|error" $OUT/suite.log | head -30
tail -30 $OUT/bench.log
