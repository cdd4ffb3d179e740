# Sourced by the one-call GPU check scripts with their arguments: OUT_DIR ($1) receives the logs, DENO (default
# deno) runs deno there, and `step NAME LIMIT CMD...` runs CMD with a time limit, its output in $out/NAME.log,
# printing its exit code, seconds and test summary line; `pack_logs` at the end folds the logs into one
# logs.tar.gz (at most 8 files come back from a GPU call, and the records must be among them).
out=${1:?output folder}
deno=${DENO:-deno}
mkdir -p "$out"
export NO_COLOR=1
step() {
  local name=$1 limit=$2
  shift 2
  local t0
  t0=$(date +%s)
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  echo "$name rc=$? $(($(date +%s) - t0)) s: $(grep -E '^(ok|FAILED) \|' "$out/$name.log" | tail -1)"
}
pack_logs() {
  (cd "$out" && ls ./*.log > /dev/null 2>&1 && tar czf logs.tar.gz ./*.log && rm -f ./*.log)
}
