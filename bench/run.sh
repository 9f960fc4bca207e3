#!/usr/bin/env bash
# CPU benchmarks: compile time of every fixture (both export kinds: foundry's annotated export and
# the stock torch.onnx.export) and of the big no-weights exports, and the CPU backend's training
# step time on every tiny fixture. Rewrites the generated part of bench/RESULTS.md (everything
# above the `<!-- end of generated results -->` line; what follows it is kept).
# Usage: bench/run.sh [BUILD_DIR]   (build first: scripts/test.sh or cmake --build)
# BENCH_REPEATS (default 5): compiles per fixture and export kind; the median is reported.
# BENCH_STEPS (default 200): training steps per fixture; the median of steps 11.. is reported.
# Sections from bench/vs_pytorch.sh, bench/ckpt_structures.sh and bench/ckpt_vs_pytorch.sh (the
# activation-checkpointing tables) and bench/attention_vs_torch26.sh (fused attention against
# PyTorch 2.6 + SDPA; its PyTorch cells read n/a without scripts/torch26-env.sh's chroot) and
# bench/attention_step.sh (the training step with attention fused and unfused),
# bench/attention_window.sh (sliding-window against full causal attention at seq 4096),
# bench/fusion_counters.sh (what canonicalize fused per export, and the saved bytes),
# bench/step_vs_torch26.sh (the training step against PyTorch 2.6, interleaved, with the
# checkpointing overheads; ~25 min), bench/node_overhead.sh (the empty step and the per-node
# cost), bench/budget_7b.sh and bench/sharding.sh (per-rank plans of MPT-1B/7B/30B on 8 ranks),
# bench/fsdp_vs_pytorch.sh (MPT-125M's per-rank plan on 2 ranks against PyTorch FSDP1's own
# peak, 36 rows; ~2.5 h in PyTorch 2.6's chroot, or BENCH_FSDP_PEER_JSONL with an earlier run's
# rows), bench/checkpoint_manifest.sh (what a checkpoint's checksums cost) and bench/mds_reader.sh
# (the MDS reader against MPT-125M's step; ~5 min, 1.4 GB of scratch disk) follow; see each
# script for its own variables.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
compile=$build/foundry-compile
run=$build/foundry-run
repeats=${BENCH_REPEATS:-5}
steps=${BENCH_STEPS:-200}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=bench/RESULTS.md.tmp
marker='<!-- end of generated results -->'

now() { date +%s.%N; }
median() { sort -g | awk '{v[NR] = $1} END {if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

# Median wall ms of `repeats` runs of foundry-compile MODEL DIMS... -o PREFIX; the last run's log
# is left in $tmp/compile.log.
compile_ms() {
  local model=$1 prefix=$2
  shift 2
  for _ in $(seq "$repeats"); do
    local t0 t1
    t0=$(now)
    "$compile" "$model" "$@" -o "$prefix" > "$tmp/compile.log" 2> "$tmp/compile.err"
    t1=$(now)
    echo "($t1 - $t0) * 1000" | bc -l
  done | median | xargs printf "%.1f"
}

# Median ms/step of steps 11..$steps (the first ten warm caches and the allocator); from each
# step's tok/s, which foundry-run prints with more digits than its ms.
step_ms() {
  local prefix=$1 dir=$2
  "$run" "$prefix" --steps "$steps" --feed "input_ids=$dir/inputs/input_ids.pb" \
    --feed "labels=$dir/inputs/labels.pb" > "$tmp/run.log"
  local tokens
  tokens=$(sed -nE 's/.*\(([0-9]+) tokens\/step\).*/\1/p' "$tmp/run.log")
  awk -v t="$tokens" '/^step /{split($2, a, "/"); if (a[1] > 10) print t / $7 * 1000}' "$tmp/run.log" |
    median | xargs printf "%.2f"
}

{
  echo "# Benchmarks"
  echo
  echo "Measured by \`bench/run.sh\` on $(date -u +%Y-%m-%d), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), build type from \`$build\`, load average $(cut -d' ' -f1-3 /proc/loadavg) at the start (other jobs share the machine: compare within a table, not across runs)."
  echo
  echo "## Tiny fixtures: compile (import, fold, canonicalize, autodiff, write) and CPU training step"
  echo
  echo "Each fixture at its input shape. Compile: wall time of \`foundry-compile MODEL --dim batch=B --dim seq=S -o PREFIX\`, median of $repeats runs, for foundry's annotated export (\`model.onnx\`) and the stock \`torch.onnx.export\` (\`model.stock.onnx\`, which also trains the float buffers). Step: \`foundry-run PREFIX --steps $steps --feed ...\` (AdamW, the fixture's batch), median ms/step of steps 11-$steps; tokens/s from the annotated export's median. Both exports of a fixture compile to the same training graph (the stock one also trains the float buffers), so the gap between their columns is the machine's noise."
  echo
  echo "| fixture | batch x seq | nodes in | forward after fold | backward | compile ms | compile ms (stock) | params | ms/step | ms/step (stock) | tokens/s |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  for dir in models/fixtures/*/; do
    dir=${dir%/}
    name=$(basename "$dir")
    nodes=$(/usr/bin/python3 -c "import onnx,sys; print(len(onnx.load(sys.argv[1]).graph.node))" "$dir/model.onnx")
    read -r b s < <(/usr/bin/python3 -c "import onnx,sys; print(*onnx.load_tensor(sys.argv[1]).dims)" "$dir/inputs/input_ids.pb")
    ms=$(compile_ms "$dir/model.onnx" "$tmp/$name" --dim batch=$b --dim seq=$s)
    fwd=$(sed -nE 's/.*autodiff: .*; ([0-9]+) forward nodes, ([0-9]+) backward nodes.*/\1/p' "$tmp/compile.log")
    bwd=$(sed -nE 's/.*autodiff: .*; ([0-9]+) forward nodes, ([0-9]+) backward nodes.*/\2/p' "$tmp/compile.log")
    stock_ms="-"
    if [ -f "$dir/model.stock.onnx" ]; then
      stock_ms=$(compile_ms "$dir/model.stock.onnx" "$tmp/${name}_stock" --dim batch=$b --dim seq=$s)
    fi
    step=$(step_ms "$tmp/$name" "$dir")
    params=$(sed -nE 's/ *params +[0-9]+ tensors, ([0-9]+) elements.*/\1/p' "$tmp/run.log")
    tokens=$(sed -nE 's/.*\(([0-9]+) tokens\/step\).*/\1/p' "$tmp/run.log")
    stock_step="-"
    if [ -f "$dir/model.stock.onnx" ]; then stock_step=$(step_ms "$tmp/${name}_stock" "$dir"); fi
    tps=$(echo "$tokens / $step * 1000" | bc -l | xargs printf "%.0f")
    echo "| $name | $b x $s | $nodes | $fwd | $bwd | $ms | $stock_ms | $params | $step | $stock_step | $tps |"
  done
  echo
  echo "## Compile — big no-weights exports, whole training graph written (median of $repeats)"
  echo
  echo "Memory columns from the compile's \`--report-json\`: the arena (every transient and kernel workspace of a step, one block), its lower bound (the most bytes live at one step, buffers rounded to 256 B) and their ratio, what the backward keeps from the forward, and the planned total of one step (arena, parameters, gradients, AdamW state, inputs, constants)."
  echo
  echo "| export | dims | nodes in | after fold | kept at run time (> 1 MiB) | forward / backward nodes | live transients at peak: schedule (autodiff order) | arena MiB | lower bound MiB | arena / bound | saved for backward MiB | planned total MiB | ms |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  for spec in "mpt_125m:batch=1,seq=2048" "mpt_1b:batch=1,seq=2048" "mpt_7b:batch=1,seq=2048" \
      "mpt_30b:batch=1,seq=8192" "gpt2_124m:batch=1,seq=1024" "pythia_160m:batch=1,seq=2048" \
      "bert_base:batch=1,seq=512"; do
    name=${spec%%:*}
    dims=${spec#*:}
    f=models/exports/$name.onnx
    [ -f "$f" ] || continue
    nodes=$(/usr/bin/python3 -c "import onnx,sys; print(len(onnx.load(sys.argv[1], load_external_data=False).graph.node))" "$f")
    dimargs=()
    IFS=, read -ra ds <<< "$dims"
    for d in "${ds[@]}"; do dimargs+=(--dim "$d"); done
    ms=$(compile_ms "$f" "$tmp/big_$name" "${dimargs[@]}" --report-json "$tmp/report.json")
    log=$(cat "$tmp/compile.log")
    remain=$(echo "$log" | sed -nE 's/.*folded [0-9]+ nodes, ([0-9]+) remain \(([0-9]+) kept.*/\1/p')
    kept=$(echo "$log" | sed -nE 's/.*folded [0-9]+ nodes, ([0-9]+) remain \(([0-9]+) kept.*/\2/p')
    fb=$(echo "$log" | sed -nE 's/.*; ([0-9]+) forward nodes, ([0-9]+) backward nodes.*/\1 \/ \2/p')
    peak=$(echo "$log" | sed -nE "s/.*schedule: peak live ([0-9.]+ MiB) at .* \(autodiff order ([0-9.]+ MiB)\)/\1 (\2)/p")
    mem=$(/usr/bin/python3 -c "
import json, sys
m = json.load(open(sys.argv[1]))['memory']
mib = lambda k: '%.1f' % (m[k] / 2**20)
print(' | '.join([mib('arena_bytes'), mib('lower_bound_bytes'),
                  '%.4f' % (m['arena_bytes'] / m['lower_bound_bytes']),
                  mib('saved_for_backward_bytes'), mib('total_bytes')]))" "$tmp/report.json")
    echo "| $name | $dims | $nodes | $remain | $kept | $fb | $peak | $mem | $ms |"
  done
  echo
  echo "## Compile time against depth (24 vs 48 layers <= 2.2x, the 30B structure < 2 s)"
  echo
  echo '```'
  bash bench/compile_scaling.sh "$build"
  echo '```'
  echo
  bash bench/vs_pytorch.sh "$build"
  echo
  bash bench/ckpt_structures.sh "$build"
  echo
  bash bench/ckpt_vs_pytorch.sh "$build"
  echo
  bash bench/attention_vs_torch26.sh "$build"
  echo
  BENCH_ATTN_PRECISION=amp_bf16 BENCH_ATTN_SEQS=1024 bash bench/attention_vs_torch26.sh "$build"
  echo
  bash bench/attention_step.sh "$build"
  echo
  bash bench/attention_window.sh "$build"
  echo
  bash bench/fusion_counters.sh "$build"
  echo
  bash bench/step_vs_torch26.sh "$build"
  echo
  bash bench/node_overhead.sh "$build"
  echo
  bash bench/budget_7b.sh "$build"
  echo
  bash bench/sharding.sh "$build"
  echo
  bash bench/fsdp_vs_pytorch.sh "$build"
  echo
  bash bench/checkpoint_manifest.sh "$build"
  echo
  bash bench/mds_reader.sh "$build"
  echo
  echo "$marker"
  # Sections written by hand (fuzzing, mutation test) follow the marker and are kept.
  if [ -f bench/RESULTS.md ] && grep -qF "$marker" bench/RESULTS.md; then
    sed -n "/^$marker\$/,\$p" bench/RESULTS.md | tail -n +2
  fi
} > "$out"
mv "$out" bench/RESULTS.md
sed -n "1,/^$marker\$/p" bench/RESULTS.md
