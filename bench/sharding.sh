#!/usr/bin/env bash
# Sharded data parallelism on paper: per-rank planned bytes by class of MPT-1B, MPT-7B
# and MPT-30B at llm-foundry's pretraining configs (scripts/train/yamls/pretrain/mpt-*.yaml:
# seq 2048, device_train_microbatch_size 4 / 8 / 8, global_train_batch_size 512 / 1024 / 2048,
# precision amp_bf16) on 8 ranks, for each sharding strategy and each uniform checkpointing
# target; the communication one rank moves per optimizer step; and the fewest ranks (powers of 2)
# at which a plan fits 40 GB and 80 GB per GPU. Compile only (the no-weights structure exports):
# nothing runs on a GPU.
# Prints a markdown section on stdout (bench/run.sh puts it in bench/RESULTS.md).
# Usage: bench/sharding.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
py=/usr/bin/python3
world=8

# model micro accumulation (global / (world x micro))
configs=("mpt_1b 4 16" "mpt_7b 8 16" "mpt_30b 8 32")
targets=("none" "multihead_attention" "mptmlp" "mptblock")

gib() { $py -c "import sys; print(f'{int(sys.argv[1]) / 2**30:.1f}')" "$1"; }
field() { $py -c "
import json, sys
j = json.load(open(sys.argv[1]))
m, s = j['memory'], j.get('sharding', {})
print(' '.join(str(x) for x in [m['parameter_bytes'], m['gradient_bytes'], m['optimizer_state_bytes'],
      m['arena_bytes'], m['total_bytes'], s.get('communication_bytes_per_step', 0)]))" "$1"; }

echo "## Sharded data parallelism on paper: MPT-1B / 7B / 30B at llm-foundry's configs (per rank)"
echo
echo "Measured by \`bench/sharding.sh\` (\`foundry-compile models/exports/MODEL.onnx --dim batch=MICRO --dim seq=2048 --precision amp_bf16 --grad-accum K --world-size $world --sharding S [--ckpt TARGET] --dry-run --report-json\`) on $(date -u +%Y-%m-%d), load average $(cut -d' ' -f1-3 /proc/loadavg). Planned bytes of ONE rank of $world (HYBRID_SHARD: of 16 ranks in shard groups of 8, two nodes of 8 GPUs). Microbatch and accumulation as llm-foundry's pretraining YAMLs give them on 8 GPUs. FSDP mixed precision DEFAULT (foundry's default for several ranks, llm-foundry's): parameters gathered and computed in bf16, gradients reduced in f32; parameters, gradients and AdamW state held as f32 shards. *Comm*: what one rank moves over its link per optimizer step (all microbatches; bf16 gathers, f32 reductions). Compile only: no GPU ran any of this."
echo
echo "| model | strategy | target | parameters GiB | gradients GiB | AdamW GiB | arena GiB | total GiB | comm GiB/step |"
echo "|---|---|---|---:|---:|---:|---:|---:|---:|"
for cfg in "${configs[@]}"; do
  read -r model micro accum <<< "$cfg"
  for strategy in NO_SHARD SHARD_GRAD_OP FULL_SHARD HYBRID_SHARD; do
    ranks=$world
    [ "$strategy" = HYBRID_SHARD ] && ranks=16
    for target in "${targets[@]}"; do
      ckpt=()
      [ "$target" != none ] && ckpt=(--ckpt "$target")
      "$build/foundry-compile" "models/exports/$model.onnx" --dim "batch=$micro" --dim seq=2048 \
        --precision amp_bf16 --grad-accum "$accum" --world-size "$ranks" --sharding "$strategy" \
        --shard-group 8 "${ckpt[@]}" --dry-run --report-json "$tmp/r.json" > "$tmp/log" 2>&1 ||
        { echo "| $model | $strategy | $target | failed: $(tail -1 "$tmp/log") |||||| "; continue; }
      read -r p g o a t c <<< "$(field "$tmp/r.json")"
      echo "| $model | $strategy | $target | $(gib "$p") | $(gib "$g") | $(gib "$o") | $(gib "$a") | $(gib "$t") | $(gib "$c") |"
    done
  done
done
echo
echo "Fewest ranks (powers of 2) at which every block checkpointed (\`mptblock\`) fits the budget per GPU, FULL_SHARD, from \`foundry-compile ... --world-size 8 --sharding FULL_SHARD --memory-budget B\` (its \"fewest ranks\" line), and what the budget search chose on 8 ranks:"
echo
echo "| model | budget per GPU | fewest ranks | its plan per rank | chosen on 8 ranks | planned total on 8 ranks |"
echo "|---|---|---:|---:|---|---:|"
for cfg in "${configs[@]}"; do
  read -r model micro accum <<< "$cfg"
  for budget in 40GB 80GB; do
    if "$build/foundry-compile" "models/exports/$model.onnx" --dim "batch=$micro" --dim seq=2048 \
      --precision amp_bf16 --grad-accum "$accum" --world-size $world --sharding FULL_SHARD \
      --memory-budget "$budget" --dry-run --report-json "$tmp/b.json" > "$tmp/b.log" 2>&1; then
      fewest=$($py -c "import json,sys; s=json.load(open(sys.argv[1]))['sharding']; print(s['fewest_ranks_for_budget'], s['fewest_ranks_total_bytes'])" "$tmp/b.json")
      read -r n nb <<< "$fewest"
      chosen=$(sed -nE 's/^checkpointing: [0-9]+ instances? of (.*)$/\1/p' "$tmp/b.log" | head -1)
      [ -z "$chosen" ] && chosen="nothing"
      total=$($py -c "import json,sys; print(json.load(open(sys.argv[1]))['memory']['total_bytes'])" "$tmp/b.json")
      echo "| $model | $budget | $n | $(gib "$nb") GiB | $chosen | $(gib "$total") GiB |"
    else
      # Impossible on 8 ranks: the error's smallest plan and its "it fits on N ranks" hint.
      err=$(tail -1 "$tmp/b.log")
      n=$(echo "$err" | sed -nE 's/.*it fits on ([0-9]+) ranks.*/\1/p')
      nb=$(echo "$err" | sed -nE 's/.*plans ([0-9.]+ [KMGT]iB) per rank.*/\1/p')
      least=$(echo "$err" | sed -nE 's/.*smallest plan foundry finds, ([0-9.]+ [KMGT]iB).*/\1/p')
      echo "| $model | $budget | ${n:-none} | ${nb:-—} | impossible on 8 ranks (the smallest plan, every block checkpointed, is $least) | — |"
    fi
  done
done
echo
