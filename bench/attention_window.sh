#!/usr/bin/env bash
# Sliding-window attention against full causal attention, at seq 4096 and window 512 (CPU, fp32):
#  1. the fused kernel alone (build/attention_kernel_bench, q/k/v [1, 12, S, 64], ALiBi bias,
#     median of 3 runs after a warm-up): causal, causal + window, and both with Gemma-2's
#     soft-capping;
#  2. one decoder layer in a training step: a one-layer Llama-style model (models/llama.py,
#     hidden 768, 12 heads, SwiGLU 2048, vocab 512) exported by models/export_mpt.py without
#     weights, with every layer "sliding_attention" (window 512) or "full_attention", compiled at
#     batch 1, seq 4096: saved-for-backward bytes from the compile report, fused (the default) and
#     as exported (--no-attention-fusion), and the median ms of 2 steps after a warm-up step.
# Prints a markdown section on stdout (bench/run.sh puts it in bench/RESULTS.md).
# Usage: bench/attention_window.sh [BUILD_DIR]     BENCH_WINDOW_SEQ (4096), BENCH_WINDOW (512)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
seq=${BENCH_WINDOW_SEQ:-4096}
window=${BENCH_WINDOW:-512}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --build "$build" --target attention_kernel_bench foundry-compile foundry-run >/dev/null
json() { /usr/bin/python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }
mib() { awk -v b="$1" 'BEGIN {printf "%.1f", b / 1048576}'; }
median_step_ms() {  # median_step_ms LOG TOKENS: ms/step from the steps after the first (tok/s)
  awk '/^step /{split($2, a, "/"); if (a[1] > 1) for (i = 2; i <= NF; i++) if ($i == "tok/s") print $(i - 1)}' "$1" |
    sort -g | awk -v t="$2" '{v[NR] = $1} END {if (NR == 0) print "n/a"; else {m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.0f", 1000 * t / m}}'
}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

kernel_rows=()
for cap in 0 30; do
  for w in 0 "$window"; do
    out=$("$build/attention_kernel_bench" --seq "$seq" --window "$w" --softcap "$cap" --reps 3)
    f=$(echo "$out" | /usr/bin/python3 -c "import json,sys; print(round(json.load(sys.stdin)['fwd_ms'], 1))")
    fb=$(echo "$out" | /usr/bin/python3 -c "import json,sys; print(round(json.load(sys.stdin)['fwd_bwd_ms'], 1))")
    kernel_rows+=("| ${w/#0/none (causal)} | ${cap/#0/none} | $f | $fb |")
  done
done

layer_rows=()
for kind in full_attention sliding_attention; do
  cat > "$tmp/$kind.json" <<EOF
{"family": "llama", "vocab_size": 512, "hidden_size": 768, "intermediate_size": 2048,
 "num_hidden_layers": 1, "num_attention_heads": 12, "num_key_value_heads": 12,
 "max_position_embeddings": $seq, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
 "tie_word_embeddings": false, "sliding_window": $window, "layer_types": ["$kind"],
 "foundry": {"batch_size": 1, "seq_len": 16, "seed": 0}}
EOF
  /usr/bin/python3 models/export_mpt.py --config "$tmp/$kind.json" -o "$tmp/$kind.onnx" \
    --no-weights > /dev/null
  for form in fused unfused; do
    flag=()
    [ "$form" = unfused ] && flag=(--no-attention-fusion)
    "$build/foundry-compile" "$tmp/$kind.onnx" --dim batch=1 --dim "seq=$seq" "${flag[@]}" \
      -o "$tmp/$kind-$form" --report-json "$tmp/$kind-$form.json" > "$tmp/$kind-$form.txt"
    "$build/foundry-run" "$tmp/$kind-$form" --steps 3 > "$tmp/$kind-$form.log"
    fusion=$(grep -o 'attention fused [0-9]*, attention unfused [0-9]*' "$tmp/$kind-$form.txt" || echo "not run")
    saved=$(json "$tmp/$kind-$form.json" "d['memory']['saved_for_backward_bytes']")
    layer_rows+=("| ${kind%_attention} | $form ($fusion) | $saved | $(mib "$saved") | $(median_step_ms "$tmp/$kind-$form.log" "$seq") |")
  done
done

echo "## Sliding-window attention against full causal attention (CPU, fp32, seq $seq, window $window)"
echo
echo "Measured by \`bench/attention_window.sh\`, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end."
echo
echo "The fused kernel alone (\`$build/attention_kernel_bench --seq $seq --window W --softcap C --reps 3\`: q/k/v [1, 12, $seq, 64], ALiBi bias, causal, one thread; median ms after a warm-up):"
echo
echo "| window | softcap | fwd ms | fwd+bwd ms |"
echo "|---|---|---:|---:|"
printf '%s\n' "${kernel_rows[@]}"
echo
echo "One Llama-style decoder layer in a training step (hidden 768, 12 heads, SwiGLU 2048, vocab 512; batch 1, AdamW, one thread), every layer full or sliding; saved for backward from \`--report-json\`, ms/step the median of 2 steps after a warm-up:"
echo
echo "| layer | attention | saved for backward bytes | MiB | ms/step |"
echo "|---|---|---:|---:|---:|"
printf '%s\n' "${layer_rows[@]}"
