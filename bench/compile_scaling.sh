#!/usr/bin/env bash
# Compile time, import -> plan written: does it scale with depth, and is the 30B-structure
# graph fast enough?
#  - two no-weights exports of the MPT-7B structure that differ only in layer count (24 and 48;
#    models/export_mpt.py --n-layers, written to a temp dir), each compiled at batch 1 x seq 2048;
#  - models/exports/mpt_30b.onnx at batch 1 x seq 8192.
# Prints the median wall time of `foundry-compile X.onnx --dim batch=1 --dim seq=S -o PREFIX` over
# BENCH_REPEATS (default 5) runs for each, and the 48 / 24 ratio (the goal: <= 2.2; 30B: < 2 s).
# Usage: bench/compile_scaling.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
compile=$build/foundry-compile
repeats=${BENCH_REPEATS:-5}
[[ -x $compile ]] || { echo "compile_scaling: error: $compile not found; build first" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

now() { date +%s.%N; }
median() { sort -g | awk '{v[NR] = $1} END {if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

# Median wall seconds of `repeats` compiles of MODEL at SEQ.
compile_s() {
  local model=$1 seq=$2
  for _ in $(seq "$repeats"); do
    local t0 t1
    t0=$(now)
    if ! "$compile" "$model" --dim batch=1 --dim "seq=$seq" -o "$tmp/out" > "$tmp/compile.log" 2>&1; then
      echo "compile_scaling: error: foundry-compile $model failed:" >&2
      cat "$tmp/compile.log" >&2
      exit 1
    fi
    t1=$(now)
    echo "$t1 - $t0" | bc -l
  done | median | xargs printf "%.3f"
}

for layers in 24 48; do
  if ! /usr/bin/python3 models/export_mpt.py --config mpt_7b --n-layers "$layers" --no-weights \
    -o "$tmp/mpt_7b_${layers}l.onnx" > "$tmp/export.log" 2>&1; then
    echo "compile_scaling: error: the $layers-layer export failed:" >&2
    cat "$tmp/export.log" >&2
    exit 1
  fi
done

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores; $repeats runs each"
echo "compiler: $compile (built $(date -r "$compile" -u +%FT%TZ)); worktree at $(git rev-parse --short HEAD 2>/dev/null || echo '?') ($(git rev-parse --abbrev-ref HEAD 2>/dev/null || echo '?'))"
t24=$(compile_s "$tmp/mpt_7b_24l.onnx" 2048)
echo "mpt_7b structure, 24 layers, batch=1 seq=2048: $t24 s"
t48=$(compile_s "$tmp/mpt_7b_48l.onnx" 2048)
echo "mpt_7b structure, 48 layers, batch=1 seq=2048: $t48 s"
echo "ratio 48 / 24 layers: $(echo "$t48 / $t24" | bc -l | xargs printf "%.2f") (goal <= 2.2)"
t30=$(compile_s models/exports/mpt_30b.onnx 8192)
echo "mpt_30b, batch=1 seq=8192: $t30 s (goal < 2)"
