#!/usr/bin/env bash
# foundry side by side with PyTorch eager on the CPU, same model (models/mpt.py's
# MPT-125M config; foundry compiles models/exports/mpt_125m.onnx, the same config exported without
# weights, and initialises it itself), batch 1, AdamW:
#  - saved-for-backward bytes at seq 1024: foundry's compile-time report against the unique
#    storages PyTorch's saved_tensors_hooks see (parameters and feeds excluded on both sides);
#  - step time and peak memory at seq 256 with 1 and 2 threads: OPENBLAS_NUM_THREADS and
#    OMP_NUM_THREADS on both sides (foundry's own kernels are single-threaded; Debian's torch does
#    its matrix products in OpenBLAS, whose threads torch.set_num_threads does not limit: without
#    the variable "1 thread" PyTorch runs its GEMMs on every core), plus torch.set_num_threads:
#    median step of steps 2..N
#    (PyTorch: N steps after one warm-up), and peak RSS over the RSS before the model is loaded.
# Prints a markdown section on stdout (bench/run.sh puts it in bench/RESULTS.md).
# Usage: bench/vs_pytorch.sh [BUILD_DIR]   BENCH_TORCH_STEPS (default 4): timed steps per side.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${BENCH_TORCH_STEPS:-4}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
model=models/exports/mpt_125m.onnx
py=/usr/bin/python3
json() { $py -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, {'d': d}))" "$@"; }
ratio() { echo "$1 / $2" | bc -l | xargs printf "%.2f"; }
mib() { echo "$1 / 1048576" | bc -l | xargs printf "%.1f"; }

# --- saved for backward, seq 1024 ---
"$build/foundry-compile" "$model" --dim batch=1 --dim seq=1024 --dry-run --report-json "$tmp/r1024.json" \
  > /dev/null
f_saved=$(json "$tmp/r1024.json" "d['memory']['saved_for_backward_bytes']")
$py bench/pytorch_side.py --config mpt_125m --seq 1024 --steps 0 > "$tmp/t1024.json"
t_saved_all=$(json "$tmp/t1024.json" "d['saved_for_backward_bytes']")
t_feeds=$(json "$tmp/t1024.json" "d['saved_input_bytes']")
t_saved=$((t_saved_all - t_feeds))
torch_version=$(json "$tmp/t1024.json" "d['torch']")

# --- step time and memory, seq 256 ---
"$build/foundry-compile" "$model" --dim batch=1 --dim seq=256 -o "$tmp/m256" \
  --report-json "$tmp/r256.json" > /dev/null
rows=()
for threads in 1 2; do
  OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads "$build/foundry-run" "$tmp/m256" --steps $((steps + 1)) \
    --report-json "$tmp/f$threads.json" > "$tmp/f$threads.log"
  f_ms=$(awk '/^step /{split($2, a, "/"); if (a[1] > 1) print $5}' "$tmp/f$threads.log" |
    sort -g | awk '{v[NR] = $1} END {if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}')
  f_mem=$(json "$tmp/f$threads.json" "d['memory']['peak_rss_over_baseline_bytes']")
  f_planned=$(json "$tmp/f$threads.json" "d['memory']['total_planned_bytes']")
  OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads \
    $py bench/pytorch_side.py --config mpt_125m --seq 256 --threads "$threads" --steps "$steps" \
    > "$tmp/t$threads.json"
  t_ms=$(json "$tmp/t$threads.json" "round(d['step_seconds'] * 1000, 1)")
  t_mem=$(json "$tmp/t$threads.json" "d['peak_minus_baseline_bytes']")
  rows+=("| $threads | $f_ms | $t_ms | $(ratio "$f_ms" "$t_ms") | $(mib "$f_mem") (planned total $(mib "$f_planned")) | $(mib "$t_mem") | $(ratio "$f_mem" "$t_mem") |")
done

echo "## Side by side with PyTorch eager (CPU, MPT-125M, batch 1, AdamW)"
echo
echo "Measured by \`bench/vs_pytorch.sh\` (PyTorch $torch_version, \`bench/pytorch_side.py\`; same config, both randomly initialised), load average $(cut -d' ' -f1-3 /proc/loadavg) at the end."
echo
echo "| seq 1024 | foundry (compile-time report) | PyTorch (saved_tensors_hooks, unique storages) | foundry / PyTorch |"
echo "|---|---:|---:|---:|"
echo "| saved for backward, parameters and feeds excluded | $f_saved B ($(mib "$f_saved") MiB) | $t_saved B ($(mib "$t_saved") MiB) | $(ratio "$f_saved" "$t_saved") |"
echo
echo "Seq 256, median step of $steps (after one warm-up step), and peak RSS over the RSS before the model is loaded (PyTorch: after \`import torch\`). Threads: OPENBLAS_NUM_THREADS = OMP_NUM_THREADS = torch.set_num_threads on both sides (matrix products are OpenBLAS on both)."
echo
echo "| threads | foundry ms/step | PyTorch ms/step | time ratio | foundry peak MiB | PyTorch peak MiB | memory ratio |"
echo "|---:|---:|---:|---:|---:|---:|---:|"
printf '%s\n' "${rows[@]}"
