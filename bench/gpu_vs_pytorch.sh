#!/usr/bin/env bash
# foundry on the GPU side by side with PyTorch eager on the same GPU:
# MPT-125M and MPT-1B (models/exports/*.onnx, no weights: foundry initialises them itself;
# PyTorch builds models/mpt.py from the same config), fp32, TF32 off on both sides, AdamW, with
# no checkpointing, --ckpt mptblock and --ckpt grouped_query_attention (PyTorch: the same
# modules wrapped in torch's non-reentrant checkpoint, models.mpt.apply_activation_checkpointing).
# Measured: tokens/s from the median step of GPU_BENCH_STEPS steps after one warm-up step, and
# peak device memory (foundry: the bytes its CUDA backend allocated per planned class, from
# foundry-run --report-json; PyTorch: torch.cuda.max_memory_allocated). Goal (not a gate):
# foundry's tokens/s >= PyTorch's and its peak <= PyTorch's in every row.
#
#   bench/gpu_vs_pytorch.sh compile BIN_DIR PLAN_DIR   compile the plans (BIN_DIR/foundry-compile)
#   bench/gpu_vs_pytorch.sh run BIN_DIR PLAN_DIR       run them and PyTorch; markdown on stdout
#   bench/gpu_vs_pytorch.sh rows                       print the rows (config batch seq)
#
# PLAN_DIR holds CONFIG.CKPT.plan and CONFIG.CKPT.train.onnx, or .train.onnx.gz (the GPU check
# folder ships them compressed: scripts/gpu-check.sh). Environment: GPU_BENCH_STEPS (default 3),
# GPU_BENCH_PYTHON (default python3), GPU_BENCH_DEADLINE (epoch seconds: rows not started by then
# are reported as skipped, and each command is cut at it). Exit status 1 when a row failed or
# was skipped (the tables are printed either way).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

# config batch seq: sizes that fit an H200 (141 GB) in fp32 with AdamW on both sides and run a
# step in about a second (MPT-1B: 4096 tokens a step, ~8e9 FLOP a token).
ROWS=("mpt_125m 8 1024" "mpt_1b 4 1024")
CKPTS=(none mptblock grouped_query_attention)

usage() { sed -n '13,16p' "$0" >&2; exit 2; }
[ $# -ge 1 ] || usage
mode=$1
if [ "$mode" = rows ]; then printf '%s\n' "${ROWS[@]}"; exit 0; fi
[ $# -eq 3 ] || usage
bin=$(cd "$2" && pwd)
plans=$3

if [ "$mode" = compile ]; then
  mkdir -p "$plans"
  for row in "${ROWS[@]}"; do
    read -r cfg batch seq <<<"$row"
    for ck in "${CKPTS[@]}"; do
      args=("$root/models/exports/$cfg.onnx" --dim "batch=$batch" --dim "seq=$seq" -o "$plans/$cfg.$ck")
      [ "$ck" = none ] || args+=(--ckpt "$ck")
      echo "foundry-compile ${args[*]#"$root/"}" >&2
      "$bin/foundry-compile" "${args[@]}" > "$plans/$cfg.$ck.compile.log"
    done
  done
  exit 0
fi
[ "$mode" = run ] || usage

steps=${GPU_BENCH_STEPS:-3}
py=${GPU_BENCH_PYTHON:-python3}
deadline=${GPU_BENCH_DEADLINE:-$(( $(date +%s) + 3600 ))}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0

json() { "$py" -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, {'d': d}))" "$@"; }
mib() { awk -v b="$1" 'BEGIN { printf "%.0f", b / 1048576 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
left() { echo $(( deadline - $(date +%s) )); }
# A plan ready to load: as it is, or its graph decompressed beside a copy of the .plan.
plan_prefix() {
  local p=$plans/$1
  if [ -f "$p.train.onnx" ]; then echo "$p"; return; fi
  cp "$p.plan" "$tmp/$1.plan"
  gzip -dc "$p.train.onnx.gz" > "$tmp/$1.train.onnx"
  echo "$tmp/$1"
}

gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 || true)
echo "## Side by side with PyTorch eager on the GPU (fp32, TF32 off, AdamW)"
echo
echo "Measured by \`bench/gpu_vs_pytorch.sh\` on ${gpu:-an unknown GPU}, $(date -u +%Y-%m-%dT%H:%MZ). Median step of $steps after one warm-up step; tokens/s = batch x seq / median step. Peak memory: foundry, the device bytes its CUDA backend allocated (arena, parameters, gradients, AdamW state, inputs; the plan's classes, measured); PyTorch, \`torch.cuda.max_memory_allocated()\` from before the model is built. Neither counts the CUDA context. Goal: foundry's tokens/s >= PyTorch's and its peak <= PyTorch's in every row (not a gate)."
for row in "${ROWS[@]}"; do
  read -r cfg batch seq <<<"$row"
  tokens=$((batch * seq))
  # PyTorch: one process for the three rows of a config (one import, one CUDA context).
  t_args=(--config "$cfg" --batch "$batch" --seq "$seq" --steps "$steps")
  for ck in "${CKPTS[@]}"; do t_args+=(--ckpt "$ck"); done
  t_ok=1
  if [ "$(left)" -gt 20 ]; then
    timeout "$(left)" "$py" "$root/bench/gpu_side.py" "${t_args[@]}" > "$tmp/torch.jsonl" 2> "$tmp/torch.err" || t_ok=0
  else
    t_ok=0; echo "skipped: the time window was over" > "$tmp/torch.err"; : > "$tmp/torch.jsonl"
  fi
  [ $t_ok = 1 ] || status=1
  torch_version=$(head -1 "$tmp/torch.jsonl" | "$py" -c "import json,sys; d=json.loads(sys.stdin.read() or '{}'); print(d.get('torch', '?'), 'CUDA', d.get('torch_cuda', '?'), d.get('tf32', ''))" 2>/dev/null || echo "?")
  echo
  echo "### $cfg, batch $batch x seq $seq ($tokens tokens a step)"
  echo
  echo "| ckpt | foundry tok/s | PyTorch tok/s | throughput ratio | foundry peak MiB (planned) | PyTorch peak MiB (reserved) | memory ratio | goal | foundry loss first -> last | PyTorch loss last |"
  echo "|---|---:|---:|---:|---:|---:|---:|---|---|---|"
  cmds=()
  for ck in "${CKPTS[@]}"; do
    f_tps=- f_mem=- f_plan=- f_loss=- f_err=""
    if [ "$(left)" -gt 10 ]; then
      prefix=$(plan_prefix "$cfg.$ck")
      cmd=("$bin/foundry-run" "$prefix" --device cuda --steps $((steps + 1)) --report-json "$tmp/f.json")
      cmds+=("foundry-run PLAN_DIR/$cfg.$ck --device cuda --steps $((steps + 1)) --report-json FILE")
      if timeout "$(left)" "${cmd[@]}" > "$tmp/f.log" 2> "$tmp/f.err"; then
        ms=$(awk '/^step /{split($2, a, "/"); if (a[1] > 1) print $5}' "$tmp/f.log" | sort -g |
          awk '{v[NR] = $1} END {if (NR == 0) print 0; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}')
        f_tps=$(awk -v t="$tokens" -v ms="$ms" 'BEGIN { if (ms > 0) printf "%.0f", t / (ms / 1000); else print "-" }')
        f_mem=$(json "$tmp/f.json" "d['memory']['total_measured_bytes']")
        f_plan=$(json "$tmp/f.json" "d['memory']['total_planned_bytes']")
        f_loss=$(json "$tmp/f.json" "'%.4f -> %.4f' % (d['loss_first'], d['loss_last'])")
      else
        f_err="foundry: $(tail -1 "$tmp/f.err" | cut -c1-200)"; status=1
      fi
      rm -f "$tmp/$cfg.$ck.train.onnx"
    else
      f_err="foundry: skipped (the time window was over)"; status=1
    fi
    t_line=$(grep -F "\"ckpt\": \"$ck\"" "$tmp/torch.jsonl" | head -1 || true)
    t_tps=- t_mem=- t_res=- t_loss=- t_err=""
    if [ -n "$t_line" ] && ! grep -q '"error"' <<<"$t_line"; then
      read -r t_tps t_mem t_res t_loss < <("$py" -c "import json,sys; d=json.loads(sys.argv[1]); print(d['tokens_per_s'], d['peak_allocated_bytes'], d['peak_reserved_bytes'], d['loss_last'])" "$t_line")
    else
      t_err="PyTorch: $( [ -n "$t_line" ] && json <(echo "$t_line") "d['error']" || tail -1 "$tmp/torch.err" | cut -c1-200)"
    fi
    goal=-
    if [ "$f_tps" != - ] && [ "$t_tps" != - ] && [ "$f_mem" != - ] && [ "$t_mem" != - ]; then
      goal=$(awk -v ft="$f_tps" -v tt="$t_tps" -v fm="$f_mem" -v tm="$t_mem" 'BEGIN {
        s = (ft >= tt ? "speed met" : "speed missed") ", " (fm <= tm ? "memory met" : "memory missed"); print s }')
    fi
    fm=$([ "$f_mem" = - ] && echo - || echo "$(mib "$f_mem") ($(mib "$f_plan"))")
    tm=$([ "$t_mem" = - ] && echo - || echo "$(mib "$t_mem") ($(mib "$t_res"))")
    echo "| $ck | $f_tps | $t_tps | $(ratio "$f_tps" "$t_tps") | $fm | $tm | $( [ "$f_mem" = - ] || [ "$t_mem" = - ] && echo - || ratio "$f_mem" "$t_mem") | $goal | $f_loss | $t_loss |"
    for e in "$f_err" "$t_err"; do [ -z "$e" ] || echo "|   | $e |||||||||"; done
  done
  echo
  echo "PyTorch $torch_version. Commands:"
  echo
  echo '```'
  printf '%s\n' "${cmds[@]}"
  echo "python3 bench/gpu_side.py ${t_args[*]}"
  echo '```'
done
exit $status
