#!/usr/bin/env bash
# CPU benchmarks: compile time of the shipped fixtures and of the big no-weights exports, and the
# CPU backend's training step time on every tiny fixture. Writes bench/RESULTS.md.
# Usage: bench/run.sh [BUILD_DIR]   (build first: scripts/test.sh or cmake --build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
compile=$build/foundry-compile
run=$build/foundry-run
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=bench/RESULTS.md.tmp

now() { date +%s.%N; }
elapsed_ms() { echo "($2 - $1) * 1000" | bc -l | xargs printf "%.0f"; }

{
  echo "# Benchmarks"
  echo
  echo "Measured by \`bench/run.sh\` on $(date -u +%Y-%m-%d), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), build type from \`$build\`."
  echo
  echo "## Compile (import, fold, canonicalize, autodiff, write) — tiny fixtures at their input shapes"
  echo
  echo "| fixture | batch x seq | nodes in | forward after fold | backward | compile ms |"
  echo "|---|---|---:|---:|---:|---:|"
  for dir in models/fixtures/*/; do
    name=$(basename "$dir")
    nodes=$(/usr/bin/python3 -c "import onnx,sys; print(len(onnx.load(sys.argv[1]).graph.node))" "$dir/model.onnx")
    read -r b s < <(/usr/bin/python3 -c "import onnx,sys; print(*onnx.load_tensor(sys.argv[1]).dims)" "$dir/inputs/input_ids.pb")
    t0=$(now)
    log=$("$compile" "$dir/model.onnx" --dim batch=$b --dim seq=$s -o "$tmp/$name")
    t1=$(now)
    fwd=$(echo "$log" | sed -nE 's/.*autodiff: .*; ([0-9]+) forward nodes, ([0-9]+) backward nodes/\1/p')
    bwd=$(echo "$log" | sed -nE 's/.*autodiff: .*; ([0-9]+) forward nodes, ([0-9]+) backward nodes/\2/p')
    echo "| $name | $b x $s | $nodes | $fwd | $bwd | $(elapsed_ms "$t0" "$t1") |"
  done
  echo
  echo "## Compile — big no-weights exports, whole training graph written"
  echo
  echo "| export | dims | nodes in | after fold | kept at run time (> 1 MiB) | forward / backward nodes | ms |"
  echo "|---|---|---:|---:|---:|---:|---:|"
  for spec in "mpt_125m:batch=1,seq=2048" "mpt_1b:batch=1,seq=2048" "mpt_7b:batch=1,seq=2048" "mpt_30b:batch=1,seq=8192"; do
    name=${spec%%:*}
    dims=${spec#*:}
    f=models/exports/$name.onnx
    [ -f "$f" ] || continue
    nodes=$(/usr/bin/python3 -c "import onnx,sys; print(len(onnx.load(sys.argv[1], load_external_data=False).graph.node))" "$f")
    dimargs=()
    IFS=, read -ra ds <<< "$dims"
    for d in "${ds[@]}"; do dimargs+=(--dim "$d"); done
    t0=$(now)
    log=$("$compile" "$f" "${dimargs[@]}" -o "$tmp/big_$name")
    t1=$(now)
    remain=$(echo "$log" | sed -nE 's/.*folded [0-9]+ nodes, ([0-9]+) remain \(([0-9]+) kept.*/\1/p')
    kept=$(echo "$log" | sed -nE 's/.*folded [0-9]+ nodes, ([0-9]+) remain \(([0-9]+) kept.*/\2/p')
    fb=$(echo "$log" | sed -nE 's/.*; ([0-9]+) forward nodes, ([0-9]+) backward nodes/\1 \/ \2/p')
    echo "| $name | $dims | $nodes | $remain | $kept | $fb | $(elapsed_ms "$t0" "$t1") |"
  done
  echo
  echo "## Training step on the CPU reference backend (AdamW, fixture batch, 50 steps; mean of steps 11-50)"
  echo
  echo "| fixture | params | tokens/step | ms/step | tokens/s |"
  echo "|---|---:|---:|---:|---:|"
  for dir in models/fixtures/*/; do
    name=$(basename "$dir")
    log=$("$run" "$tmp/$name" --steps 50 --feed "input_ids=$dir/inputs/input_ids.pb" --feed "labels=$dir/inputs/labels.pb")
    params=$(echo "$log" | sed -nE 's/ *params +[0-9]+ tensors, ([0-9]+) elements.*/\1/p')
    tokens=$(echo "$log" | sed -nE 's/.*\(([0-9]+) tokens\/step\).*/\1/p')
    ms=$(echo "$log" | awk '/^step /{split($2,a,"/"); if (a[1] > 10) {s += $5; n++}} END {printf "%.2f", s / n}')
    tps=$(echo "$tokens / $ms * 1000" | bc -l | xargs printf "%.0f")
    echo "| $name | $params | $tokens | $ms | $tps |"
  done
} > "$out"
mv "$out" bench/RESULTS.md
cat bench/RESULTS.md
