#!/usr/bin/env bash
# Activation checkpointing on the big no-weights structures (what each target saves and costs on
# the 1B, 7B and 30B shapes): models/exports/mpt_{1b,7b,30b}.onnx at batch 1 x seq 2048 (the 30B also at seq 8192),
# each with every target: none, grouped_query_attention, mptmlp, both
# (= grouped_query_attention + mptmlp), mptblock. For each, from
# `foundry-compile X.onnx --dim batch=1 --dim seq=S --ckpt ... --report-json F -o PREFIX`:
# saved for backward, arena and planned total of one step (memory.*_bytes), recompute FLOPs as a
# share of the step's FLOPs as the report gives it (checkpoint.recompute_percent: flops.recompute
# / (forward + backward + recompute)), and the
# compile time, import -> plan written (the whole process's wall clock, training graph and plan
# written), median of BENCH_REPEATS (default 3) runs.
# Prints a markdown section on stdout (bench/run.sh puts it in bench/RESULTS.md).
# Each row is compiled at every precision of BENCH_PRECISIONS (default "fp32 amp_bf16":
# foundry-compile --precision; the amp_bf16 tables next to the fp32 ones); "saved vs none" is
# relative to the same precision's plain plan.
# Usage: bench/ckpt_structures.sh [BUILD_DIR]
#   BENCH_CKPT_TARGETS (default "none grouped_query_attention mptmlp both mptblock"): the targets;
#   none must come first (the "saved vs none" column is relative to it).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
compile=$build/foundry-compile
repeats=${BENCH_REPEATS:-3}
read -ra targets <<< "${BENCH_CKPT_TARGETS:-none grouped_query_attention mptmlp both mptblock}"
read -ra precisions <<< "${BENCH_PRECISIONS:-fp32 amp_bf16}"
py=/usr/bin/python3
[[ -x $compile ]] || { echo "ckpt_structures: error: $compile not found; build first" >&2; exit 1; }
[[ ${targets[0]} == none ]] || { echo "ckpt_structures: error: BENCH_CKPT_TARGETS must start with none" >&2; exit 1; }
if [[ ${#targets[@]} -gt 1 ]] && ! "$compile" --help | grep -q -- '--ckpt'; then
  echo "ckpt_structures: error: $compile has no --ckpt option; build a tree with the checkpointing pass" >&2
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

now() { date +%s.%N; }
median() { sort -g | awk '{v[NR] = $1} END {if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
ckpt_args() {
  case $1 in
    none) ;;
    both) echo --ckpt grouped_query_attention --ckpt mptmlp ;;
    *) echo --ckpt "$1" ;;
  esac
}

# Median wall seconds of `repeats` compiles of MODEL at SEQ with TARGET; the last run's report is
# left in $tmp/report.json.
compile_s() {
  local model=$1 seq=$2 target=$3 precision=$4
  for _ in $(seq "$repeats"); do
    local t0 t1
    t0=$(now)
    # shellcheck disable=SC2046  # ckpt_args is word lists by design
    if ! "$compile" "$model" --dim batch=1 --dim "seq=$seq" $(ckpt_args "$target") --precision "$precision" \
        --report-json "$tmp/report.json" -o "$tmp/out" > "$tmp/compile.log" 2>&1; then
      echo "ckpt_structures: error: foundry-compile $model --ckpt $target failed:" >&2
      cat "$tmp/compile.log" >&2
      exit 1
    fi
    t1=$(now)
    echo "$t1 - $t0" | bc -l
  done | median | xargs printf "%.3f"
}

echo "## Activation checkpointing on the big structures (compile only, no weights)"
echo
echo "Measured by \`bench/ckpt_structures.sh\` with \`$compile\` (built $(date -r "$compile" -u +%FT%TZ), worktree at $(git rev-parse --short HEAD 2>/dev/null || echo '?')), load average $(cut -d' ' -f1-3 /proc/loadavg) at the start, $(nproc) cores. \`foundry-compile X.onnx --dim batch=1 --dim seq=S --ckpt ... --precision P --report-json F -o PREFIX\`; \`both\` = \`--ckpt grouped_query_attention --ckpt mptmlp\`. MiB from the report: saved for backward, the arena (every transient of a step), the planned total of one step (arena, parameters, gradients, AdamW state, inputs, constants). Recompute FLOPs: the report's share of the step's FLOPs (\`checkpoint.recompute_percent\` = recompute / (forward + backward + recompute)). Compile: wall clock of the whole command, import -> training graph and plan written, median of $repeats."
echo
echo "| structure | seq | precision | target | saved for backward MiB | saved vs none | arena MiB | total MiB | recompute FLOPs | compile s |"
echo "|---|---:|---|---|---:|---:|---:|---:|---:|---:|"
for spec in mpt_1b:2048 mpt_7b:2048 mpt_30b:2048 mpt_30b:8192; do
  name=${spec%%:*}
  seq=${spec#*:}
  f=models/exports/$name.onnx
  [[ -f $f ]] || { echo "ckpt_structures: error: $f not found (models/export_mpt.py --config $name --no-weights)" >&2; exit 1; }
  for precision in "${precisions[@]}"; do
  none_saved=
  for t in "${targets[@]}"; do
    s=$(compile_s "$f" "$seq" "$t" "$precision")
    read -r saved arena total rc < <($py -c "
import json, sys
d = json.load(open(sys.argv[1]))
m, fl = d['memory'], d['flops']
c = d.get('checkpoint', {})
# The report's share of the step (forward + backward + recompute); no checkpoint object: none.
pct = c.get('recompute_percent', 100 * fl['recompute'] / (fl['forward'] + fl['backward'] + fl['recompute']))
print(m['saved_for_backward_bytes'], m['arena_bytes'], m['total_bytes'], '%.2f' % pct)" "$tmp/report.json")
    [[ $t == none ]] && none_saved=$saved
    mib() { echo "$1 / 1048576" | bc -l | xargs printf "%.1f"; }
    echo "| $name | $seq | $precision | $t | $(mib "$saved") | $(echo "$saved / $none_saved" | bc -l | xargs printf "%.3f") | $(mib "$arena") | $(mib "$total") | $rc % | $s |"
  done
  done
done
