#!/usr/bin/env bash
# FSDP memory per rank, foundry's plan side by side with what PyTorch itself keeps live: MPT-125M
# (models/configs/mpt_125m.json; foundry compiles models/exports/mpt_125m.onnx, the same config
# exported without weights) on 2 ranks, for each shape (batch x seq), sharding strategy
# (NO_SHARD, SHARD_GRAD_OP, FULL_SHARD), checkpointing (none, every block) and FSDP mixed
# precision (Composer's fsdp_config.mixed_precision under precision amp_bf16: FULL, DEFAULT, PURE).
#  - PyTorch: bench/fsdp_peer.py in the PyTorch 2.6 chroot (scripts/torch26-env.sh run; CPU, gloo,
#    FSDP1 as Composer sets it up, torch.autocast bf16, AdamW): the peak of live tensor storage
#    during the second training step (the CPU allocator's own allocations, from torch.profiler;
#    fsdp_peer.py --counter allocator), the largest over the 2 ranks; gloo's own collective
#    buffers left out (NCCL needs none) and, in their own column, kept in.
#  - foundry: `foundry-compile models/exports/mpt_125m.onnx --dim batch=B --dim seq=S --precision
#    amp_bf16 --fsdp-mixed-precision MP --loss-fn torch_crossentropy --world-size 2 --sharding S
#    [--ckpt mptblock] --dry-run
#    --report-json F`: memory.total_bytes of F, the planned step of one rank.
# A PyTorch row takes about a minute at 1 x 256 and 6 to 9 at 4 x 1024 (two ranks on 2 CPU cores).
# Without the chroot the PyTorch cells read n/a.
# Prints a markdown section on stdout (bench/run.sh puts it in bench/RESULTS.md).
# Usage: bench/fsdp_vs_pytorch.sh [BUILD_DIR]
#   BENCH_FSDP_SHAPES (default "1x256 4x1024"), BENCH_FSDP_STRATEGIES (default "NO_SHARD
#   SHARD_GRAD_OP FULL_SHARD"), BENCH_FSDP_CKPT (default "none mptblock"), BENCH_FSDP_MP (default
#   "FULL DEFAULT PURE"): the rows.
#   BENCH_FSDP_PEER_JSONL=FILE: PyTorch rows found in FILE (bench/fsdp_peer.py's JSON lines, one
#   per rank, counted by the allocator: rows of the older --counter memtracker are not taken) are
#   read from it instead of measured again; rows measured are appended to it.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
compile=$build/foundry-compile
model=models/exports/mpt_125m.onnx
torch26=scripts/torch26-env.sh
py=/usr/bin/python3
world=2
read -ra shapes <<< "${BENCH_FSDP_SHAPES:-1x256 4x1024}"
read -ra strategies <<< "${BENCH_FSDP_STRATEGIES:-NO_SHARD SHARD_GRAD_OP FULL_SHARD}"
read -ra ckpts <<< "${BENCH_FSDP_CKPT:-none mptblock}"
read -ra precisions <<< "${BENCH_FSDP_MP:-FULL DEFAULT PURE}"
jsonl=${BENCH_FSDP_PEER_JSONL:-}
[[ -x $compile ]] || { echo "fsdp_vs_pytorch: error: $compile not found; build first" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[[ -z $jsonl || -f $jsonl ]] || touch "$jsonl"
have_torch26=0
bash "$torch26" status > /dev/null 2>&1 && have_torch26=1

mib() { [[ $1 == n/a ]] && { echo n/a; return; }; echo "$1 / 1048576" | bc -l | xargs printf "%.1f"; }
ratio() { [[ $1 == n/a || $2 == n/a ]] && { echo n/a; return; }; echo "$1 / $2" | bc -l | xargs printf "%.2f"; }

# The rank lines of row ($1 batch, $2 seq, $3 strategy, $4 ckpt, $5 mixed precision) in the JSON
# lines file $6, written to $7; fails when not every rank has one.
pick_rows() {
  $py - "$@" << 'PY'
import json, sys
batch, seq, strategy, ckpt, mp, path, out = sys.argv[1:]
key = (int(batch), int(seq), strategy, ckpt, mp, "allocator")
rows = {}
for line in open(path):
    if not line.startswith("{"):
        continue
    d = json.loads(line)
    if "error" not in d and (d.get("batch"), d.get("seq"), d.get("sharding"), d.get("ckpt"),
                             d.get("mixed_precision"), d.get("counter", "memtracker")) == key \
            and d.get("world_size") == 2:
        rows[d["rank"]] = line  # a later measurement of the same row wins
if len(rows) != 2:
    sys.exit(1)
with open(out, "w") as f:
    f.writelines(rows[r] for r in sorted(rows))
PY
}
# "peak with_buffers seconds" of the rank lines in $1: the largest over the ranks.
peer_fields() {
  $py -c "
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(max(r['peak_bytes'] for r in rows), max(r['peak_bytes_with_collective_buffers'] for r in rows),
      max(sum(r['seconds_by_step']) for r in rows))" "$1"
}

measured=0
from_file=0
body=$tmp/body.md
for shape in "${shapes[@]}"; do
  b=${shape%x*}
  s=${shape#*x}
  for strategy in "${strategies[@]}"; do
    for ckpt in "${ckpts[@]}"; do
      for mp in "${precisions[@]}"; do
        # PyTorch: the JSON lines file, else a measurement, else n/a.
        peak=n/a
        with_buffers=n/a
        if [[ -n $jsonl ]] && pick_rows "$b" "$s" "$strategy" "$ckpt" "$mp" "$jsonl" "$tmp/row.jsonl"; then
          from_file=$((from_file + 1))
          read -r peak with_buffers _ <<< "$(peer_fields "$tmp/row.jsonl")"
        elif [[ $have_torch26 == 1 ]]; then
          if bash "$torch26" run python3 bench/fsdp_peer.py --batch "$b" --seq "$s" \
              --sharding "$strategy" --ckpt "$ckpt" --mixed-precision "$mp" \
              --world-size $world > "$tmp/peer.out" 2> "$tmp/peer.err" &&
              pick_rows "$b" "$s" "$strategy" "$ckpt" "$mp" "$tmp/peer.out" "$tmp/row.jsonl"; then
            measured=$((measured + 1))
            read -r peak with_buffers _ <<< "$(peer_fields "$tmp/row.jsonl")"
            [[ -z $jsonl ]] || cat "$tmp/row.jsonl" >> "$jsonl"
          else
            echo "fsdp_vs_pytorch: bench/fsdp_peer.py failed at $shape $strategy $ckpt $mp: $(tail -1 "$tmp/peer.err")" >&2
          fi
        fi
        # foundry: one rank's planned step.
        ckpt_args=()
        [[ $ckpt == none ]] || ckpt_args=(--ckpt "$ckpt")
        if "$compile" "$model" --dim "batch=$b" --dim "seq=$s" --precision amp_bf16 \
            --fsdp-mixed-precision "$mp" --loss-fn torch_crossentropy --world-size $world \
            --sharding "$strategy" "${ckpt_args[@]}" \
            --dry-run --report-json "$tmp/r.json" > "$tmp/compile.log" 2>&1; then
          planned=$($py -c "import json,sys; print(json.load(open(sys.argv[1]))['memory']['total_bytes'])" "$tmp/r.json")
          cell=$(mib "$planned")
        else
          planned=n/a
          cell="failed: $(tail -1 "$tmp/compile.log")"
        fi
        echo "| $b x $s | $strategy | $ckpt | $mp | $(mib "$peak") | $(mib "$with_buffers") | $cell | $(ratio "$planned" "$peak") |"
      done
    done
  done
done > "$body"

echo "## FSDP memory per rank: foundry's plan against PyTorch FSDP1's own peak (MPT-125M, $world ranks)"
echo
echo "Measured by \`bench/fsdp_vs_pytorch.sh\` on $(date -u +%Y-%m-%d), load average $(cut -d' ' -f1-3 /proc/loadavg) at the start. PyTorch: \`bench/fsdp_peer.py\` (PyTorch 2.6 in \`scripts/torch26-env.sh\`'s chroot, CPU, gloo, $world ranks): FSDP1 with one unit per MPTBlock plus the root, Composer's defaults (use_orig_params, limit_all_gathers, BACKWARD_POST), \`MixedPrecision\` as Composer maps \`fsdp_config.mixed_precision\` under \`precision: amp_bf16\` (FULL = f32/f32/f32, DEFAULT = bf16 params, f32 reduce, bf16 buffers, PURE = bf16/bf16/bf16), forward and loss under \`torch.autocast(\"cpu\", bfloat16)\`, attention through SDPA, AdamW; *every block* = torch's non-reentrant checkpoint_wrapper on each MPTBlock inside its FSDP unit. *PyTorch peak*: the most bytes the CPU allocator holds during the second training step (forward, loss, backward, AdamW step, zero_grad; the AdamW state exists then), from torch.profiler's allocation events (\`fsdp_peer.py --counter allocator\`; MemTracker, which counted the earlier table, changes what a FULL run holds: see fsdp_peer.py's header), the larger of the two ranks, without the buffers gloo's collectives allocate for themselves (a gather buffer of the output's size, a clone of the reduce-scatter's whole input), which NCCL does not need; *with gloo's buffers* counts them too. *foundry*: \`foundry-compile $model --dim batch=B --dim seq=S --precision amp_bf16 --fsdp-mixed-precision MP --loss-fn torch_crossentropy --world-size $world --sharding S [--ckpt mptblock] --dry-run\`, the report's \`memory.total_bytes\` (one rank's planned step: arena, parameters, gradients, AdamW state, inputs, constants), with its defaults for an FSDP run (gathered parameters live until their unit's last gradient, autocast's weight copies saved) and the loss the peer runs (nn.CrossEntropyLoss). CPU autocast runs LayerNorm in its input's dtype where CUDA's runs it in f32: with DEFAULT and PURE (a bf16 residual stream) a CUDA step saves 2 more bytes per element of each of the 25 LayerNorm inputs than this CPU measurement (9.4 MiB at 1 x 256, 150 MiB at 4 x 1024)."
if [[ $from_file -gt 0 ]]; then
  echo
  echo "$from_file of the PyTorch rows were read from \`$(basename "$jsonl")\` (an earlier run of \`bench/fsdp_peer.py\`), not measured by this run; $measured measured now."
fi
if [[ $have_torch26 == 0 && $from_file == 0 ]]; then
  echo
  echo "The PyTorch 2.6 chroot is not set up here (\`scripts/torch26-env.sh setup\`, as root): the PyTorch cells read n/a."
fi
echo
echo "| batch x seq | sharding | checkpointing | FSDP mixed precision | PyTorch peak MiB | with gloo's buffers MiB | foundry MiB | foundry / PyTorch |"
echo "|---|---|---|---|---:|---:|---:|---:|"
cat "$body"
