#!/usr/bin/env bash
# Fused attention in a whole training step: the CPU step time and the planned memory of
# MPT-125M with ALiBi (models/exports/mpt_125m_alibi.onnx, batch 1, fp32, AdamW, one thread)
# compiled with attention fused (foundry::Attention, the default) and as exported
# (--no-attention-fusion: Softmax, its seq x seq probabilities saved), at each seq.
# Median ms/step of BENCH_STEP_STEPS (default 2) steps after one warm-up step, from foundry-run's
# per-step log; saved-for-backward and planned total from the compile report.
# Prints a markdown section on stdout (bench/run.sh puts it in bench/RESULTS.md).
# Usage: bench/attention_step.sh [BUILD_DIR]     BENCH_STEP_SEQS (default "1024 2048")
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${BENCH_STEP_STEPS:-2}
read -ra seqs <<< "${BENCH_STEP_SEQS:-1024 2048}"
model=models/exports/mpt_125m_alibi.onnx
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
json() { /usr/bin/python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }
mib() { awk -v b="$1" 'BEGIN {printf "%.1f", b / 1048576}'; }
median_step_ms() {  # median_step_ms LOG TOKENS: ms/step from the steps after the first (tok/s)
  awk '/^step /{split($2, a, "/"); if (a[1] > 1) for (i = 2; i <= NF; i++) if ($i == "tok/s") print $(i - 1)}' "$1" |
    sort -g | awk -v t="$2" '{v[NR] = $1} END {if (NR == 0) print "n/a"; else {m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.0f", 1000 * t / m}}'
}

rows=()
for seq in "${seqs[@]}"; do
  declare -A ms saved total
  for form in fused unfused; do
    flag=()
    [ "$form" = unfused ] && flag=(--no-attention-fusion)
    "$build/foundry-compile" "$model" --dim batch=1 --dim "seq=$seq" "${flag[@]}" \
      -o "$tmp/$form$seq" --report-json "$tmp/$form$seq.json" > /dev/null
    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 "$build/foundry-run" "$tmp/$form$seq" \
      --steps $((steps + 1)) > "$tmp/$form$seq.log"
    ms[$form]=$(median_step_ms "$tmp/$form$seq.log" "$seq")
    saved[$form]=$(json "$tmp/$form$seq.json" "d['memory']['saved_for_backward_bytes']")
    total[$form]=$(json "$tmp/$form$seq.json" "d['memory']['total_bytes']")
  done
  speed=$(awk -v a="${ms[fused]}" -v b="${ms[unfused]}" 'BEGIN {printf "%.3f", a / b}')
  rows+=("| $seq | ${ms[fused]} | ${ms[unfused]} | $speed | $(mib "${saved[fused]}") | $(mib "${saved[unfused]}") | $(mib "${total[fused]}") | $(mib "${total[unfused]}") |")
done

echo "## Fused attention in the training step (CPU, MPT-125M with ALiBi, batch 1, AdamW, 1 thread)"
echo
echo "Measured by \`bench/attention_step.sh\`, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end: \`foundry-run\` on plans of \`models/exports/mpt_125m_alibi.onnx\` compiled with attention fused (\`foundry::Attention\`, the default) and as exported (\`--no-attention-fusion\`); median of $steps steps after one warm-up step."
echo
echo "| seq | fused ms/step | unfused ms/step | fused / unfused | fused saved MiB | unfused saved MiB | fused planned total MiB | unfused planned total MiB |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
printf '%s\n' "${rows[@]}"
