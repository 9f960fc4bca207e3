#!/usr/bin/env bash
# Activation checkpointing, foundry side by side with PyTorch eager, on
# models/mpt.py's MPT-125M config (foundry compiles models/exports/mpt_125m.onnx, the same config
# exported without weights), batch 1, fp32, for each target: none, grouped_query_attention, mptmlp,
# both (= grouped_query_attention + mptmlp), mptblock.
#  - Saved-for-backward bytes at seq 1024: foundry's compile-time report
#    (`foundry-compile --ckpt ...`) against what PyTorch keeps with llm-foundry-style non-reentrant
#    checkpoint wrapping (bench/pytorch_side.py --ckpt: the unique storages saved_tensors_hooks
#    see plus each checkpointed region's inputs; parameters and feeds excluded on both sides), and
#    foundry's recompute FLOPs as a share of forward + backward FLOPs (flops.recompute /
#    (flops.forward + flops.backward) of the report).
#  - Step time at seq BENCH_CKPT_SEQ (default 256: a seq-1024 step takes ~15 s per side on one
#    core, 5 targets x 2 sides x several steps would not fit beside the other builds), one thread
#    (OPENBLAS_NUM_THREADS = OMP_NUM_THREADS = 1 on both sides, torch.set_num_threads(1), as
#    bench/vs_pytorch.sh): median ms/step of BENCH_CKPT_STEPS (default 4) steps after one warm-up
#    on each side, and each target's overhead over the same side's plain step, with foundry's
#    recompute-FLOP ratio at that seq beside it. Each target's plain step is measured right
#    before it on each side (foundry plain, foundry target, PyTorch plain, PyTorch target), so slow
#    drift of the machine's load does not land in the ratios.
# Prints a markdown section on stdout (bench/run.sh puts it in bench/RESULTS.md).
# Usage: bench/ckpt_vs_pytorch.sh [BUILD_DIR]
#   BENCH_CKPT_TARGETS (default "none grouped_query_attention mptmlp both mptblock"): the targets;
#   none must come first (the overheads are relative to it). BENCH_CKPT_STEPS=0: saved bytes only.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
compile=$build/foundry-compile
run=$build/foundry-run
steps=${BENCH_CKPT_STEPS:-4}
tseq=${BENCH_CKPT_SEQ:-256}
read -ra targets <<< "${BENCH_CKPT_TARGETS:-none grouped_query_attention mptmlp both mptblock}"
model=models/exports/mpt_125m.onnx
py=/usr/bin/python3
[[ -x $compile && -x $run ]] || { echo "ckpt_vs_pytorch: error: $compile or $run not found; build first" >&2; exit 1; }
[[ ${targets[0]} == none ]] || { echo "ckpt_vs_pytorch: error: BENCH_CKPT_TARGETS must start with none (overheads are relative to it)" >&2; exit 1; }
if [[ ${#targets[@]} -gt 1 ]] && ! "$compile" --help | grep -q -- '--ckpt'; then
  echo "ckpt_vs_pytorch: error: $compile has no --ckpt option; build a tree with the checkpointing pass" >&2
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
json() { $py -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, {'d': d}))" "$@"; }
# The JSON line of target $2 in the JSON-lines file $1, written to $3.
pick() { $py -c "import json,sys; [print(l, end='') for l in open(sys.argv[1]) if json.loads(l)['ckpt'] == sys.argv[2]]" "$1" "$2" > "$3"; }
ratio() { echo "$1 / $2" | bc -l | xargs printf "%.2f"; }
mib() { echo "$1 / 1048576" | bc -l | xargs printf "%.1f"; }
pct() { echo "($1 / $2 - 1) * 100" | bc -l | xargs printf "%+.1f %%"; }
median() { sort -g | awk '{v[NR] = $1} END {if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
ckpt_args() {
  case $1 in
    none) ;;
    both) echo --ckpt grouped_query_attention --ckpt mptmlp ;;
    *) echo --ckpt "$1" ;;
  esac
}
# foundry-compile at seq $2 with target $1's flags, writing $tmp/$1_$2.{train.onnx,plan,json}.
compile_target() {
  local target=$1 seq=$2
  # shellcheck disable=SC2046  # ckpt_args is word lists by design
  if ! "$compile" "$model" --dim batch=1 --dim "seq=$seq" $(ckpt_args "$target") \
      --report-json "$tmp/${target}_$seq.json" -o "$tmp/${target}_$seq" > "$tmp/compile.log" 2>&1; then
    echo "ckpt_vs_pytorch: error: foundry-compile --ckpt $target at seq $seq failed:" >&2
    cat "$tmp/compile.log" >&2
    exit 1
  fi
}
# Which saved tensors differ: foundry's saved values (recomputed from PREFIX.train.onnx as
# tests/models/saved_bytes_test.py does: forward values a backward or recompute node reads, views
# folded into their root, graph inputs/initializers/outputs excluded) against PyTorch's storages,
# both grouped by size in bytes; prints the sizes where the counts differ, with up to two of
# foundry's value names of each.
saved_diff() {
  $py - "$1" "$2" << 'PY'
import json, sys
import onnx
T = onnx.TensorProto
ELEM = {T.FLOAT: 4, T.DOUBLE: 8, T.FLOAT16: 2, T.BFLOAT16: 2, T.INT64: 8, T.INT32: 4, T.INT16: 2,
        T.INT8: 1, T.UINT8: 1, T.BOOL: 1}
VIEWS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}
g = onnx.load(sys.argv[1], load_external_data=False).graph
outputs = {o.name for o in g.output}
excluded = outputs | {i.name for i in g.input} | {t.name for t in g.initializer}
phase, producer, root = {}, {}, {}
for n in g.node:
    marks = dict(l.split("=", 1) for l in n.doc_string.split("\n") if "=" in l)
    phase[n.name] = marks.get("mark.phase", "forward")
    for o in n.output:
        producer[o] = n
    if n.domain in ("", "ai.onnx") and n.op_type in VIEWS and n.output[0] not in outputs:
        root[n.output[0]] = root.get(n.input[0], n.input[0])
saved = set()
for n in g.node:
    if phase[n.name] in ("backward", "recompute"):
        for v in n.input:
            if v in producer and phase[producer[v].name] == "forward":
                r = root.get(v, v)
                if r not in excluded:
                    saved.add(r)
size = {}
for vi in g.value_info:
    t = vi.type.tensor_type
    k = ELEM[t.elem_type]
    for d in t.shape.dim:
        k *= d.dim_value
    size[vi.name] = k
foundry = {}
for r in sorted(saved):
    foundry.setdefault(size[r], []).append(r)
torch = {int(k): v for k, v in json.load(open(sys.argv[2]))["saved_storage_sizes"].items()}
parts = []
for b in sorted(set(foundry) | set(torch), reverse=True):
    f, t = len(foundry.get(b, [])), torch.get(b, 0)
    if f != t:
        names = ", ".join(f"`{n}`" for n in foundry.get(b, [])[:2])
        human = f"{b / 2**20:.2f} MiB" if b >= 2**20 else f"{b} B"
        parts.append(f"{human}: {f} vs {t}" + (f" (e.g. {names})" if names else ""))
print("; ".join(parts) if parts else "the same storages")
PY
}
recompute_pct() {
  json "$1" "'%.1f %%' % (100 * d['flops']['recompute'] / (d['flops']['forward'] + d['flops']['backward']))"
}

# --- saved for backward, seq 1024 ---
ckpt_flags=()
for t in "${targets[@]}"; do ckpt_flags+=(--ckpt "$t"); done
$py bench/pytorch_side.py --config mpt_125m --seq 1024 --steps 0 "${ckpt_flags[@]}" \
  > "$tmp/t1024.jsonl" 2> "$tmp/t1024.err" || { cat "$tmp/t1024.err" >&2; exit 1; }
saved_rows=()
grad_notes=()
diff_notes=()
for t in "${targets[@]}"; do
  compile_target "$t" 1024
  f_saved=$(json "$tmp/${t}_1024.json" "d['memory']['saved_for_backward_bytes']")
  pick "$tmp/t1024.jsonl" "$t" "$tmp/t.json"
  t_all=$(json "$tmp/t.json" "d['saved_for_backward_bytes']")
  t_feeds=$(json "$tmp/t.json" "d['saved_input_bytes']")
  t_region=$(json "$tmp/t.json" "d['region_input_bytes']")
  t_saved=$((t_all - t_feeds))
  [[ $t == none ]] && { f_none=$f_saved; t_none=$t_saved; }
  saved_rows+=("| $t | $(mib "$f_saved") | $(mib "$t_saved") (of which region inputs $(mib "$t_region")) | $((f_saved - t_saved)) | $(ratio "$f_saved" "$t_saved") | $(ratio "$f_saved" "$f_none") | $(ratio "$t_saved" "$t_none") | $(recompute_pct "$tmp/${t}_1024.json") |")
  diff_notes+=("- $t: $(saved_diff "$tmp/${t}_1024.train.onnx" "$tmp/t.json")")
  if [[ $t != none ]]; then
    grad_notes+=("$t $(json "$tmp/t.json" "'%g' % d['grad_max_abs_diff_vs_plain']") ($(json "$tmp/t.json" "d['checkpointed_modules']") modules wrapped)")
  fi
  torch_version=$(json "$tmp/t.json" "d['torch']")
done

# --- step time, seq $tseq, one thread ---
# Median ms/step of target $1 on foundry's side, then on PyTorch's.
foundry_ms() {
  OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 "$run" "$tmp/${1}_$tseq" --steps $((steps + 1)) > "$tmp/f.log"
  awk '/^step /{split($2, a, "/"); if (a[1] > 1) print $5}' "$tmp/f.log" | median
}
torch_ms() {
  OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 $py bench/pytorch_side.py --config mpt_125m \
    --seq "$tseq" --threads 1 --steps "$steps" --ckpt "$1" > "$tmp/t.json"
  json "$tmp/t.json" "round(d['step_seconds'] * 1000, 1)"
}
time_rows=()
[[ $steps -gt 0 ]] && compile_target none "$tseq"
for t in "${targets[@]:1}"; do
  [[ $steps -gt 0 ]] || break
  compile_target "$t" "$tseq"
  # Each overhead against a plain step measured right beside it: the machine's load drifts over
  # minutes (other builds share its cores), so a plain step measured once at the start would not do.
  f_plain=$(foundry_ms none)
  f_ms=$(foundry_ms "$t")
  t_plain=$(torch_ms none)
  t_ms=$(torch_ms "$t")
  rc=$(json "$tmp/${t}_$tseq.json" "'%.8f' % (d['flops']['recompute'] / (d['flops']['forward'] + d['flops']['backward']))")
  f_over=$(pct "$f_ms" "$f_plain")
  t_over=$(pct "$t_ms" "$t_plain")
  diff=$(echo "($f_ms / $f_plain - $t_ms / $t_plain) * 100" | bc -l | xargs printf "%+.1f")
  vs_flops=$(echo "$rc > 0" | bc -l | grep -q 1 &&
    echo "($f_ms / $f_plain - 1) / $rc" | bc -l | xargs printf "%.2f" || echo "-")
  time_rows+=("| $t | $f_plain | $f_ms | $f_over | $(recompute_pct "$tmp/${t}_$tseq.json") | $vs_flops | $t_plain | $t_ms | $t_over | $diff |")
done

echo "## Activation checkpointing side by side with PyTorch (CPU, MPT-125M, batch 1, fp32)"
echo
echo "Measured by \`bench/ckpt_vs_pytorch.sh\` (PyTorch $torch_version, \`bench/pytorch_side.py --ckpt\`: models/mpt.py's modules wrapped in torch's \`checkpoint_wrapper(..., CheckpointImpl.NO_REENTRANT)\` as llm-foundry trains with \`activation_checkpointing: true\`; same config, both randomly initialised), load average $(cut -d' ' -f1-3 /proc/loadavg) at the end. \`both\` = grouped_query_attention + mptmlp. Recompute FLOPs: foundry's \`flops.recompute / (flops.forward + flops.backward)\`."
echo
echo "Seq 1024: saved for backward in MiB, parameters and feeds excluded. foundry: the compile-time report. PyTorch: unique storages seen by \`saved_tensors_hooks\` plus the checkpointed regions' inputs, which the non-reentrant checkpoint keeps for its recompute (the tensors saved inside a region exist only during the backward's recompute and are not counted on either side)."
echo
echo "| target | foundry MiB | PyTorch MiB | foundry - PyTorch bytes | foundry / PyTorch | foundry vs none | PyTorch vs none | recompute FLOPs |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
printf '%s\n' "${saved_rows[@]}"
echo
echo "Where the two differ, by storage size (size: how many foundry keeps vs how many PyTorch keeps; foundry: the saved values recomputed from the compiled \`.train.onnx\`; PyTorch: the storages counted above, feeds included; a PyTorch view keeps its whole base storage, so one PyTorch storage can stand for several foundry values):"
echo
printf '%s\n' "${diff_notes[@]}"
echo
if [[ ${#grad_notes[@]} -gt 0 ]]; then
  echo "PyTorch's wrapping leaves the numbers alone: the largest |gradient difference| against the unwrapped model, same weights and inputs, seq 1024: $(printf '%s; ' "${grad_notes[@]}" | sed 's/; $//')."
  echo
fi
[[ $steps -gt 0 ]] || exit 0
echo "Seq $tseq, one thread on both sides (OPENBLAS_NUM_THREADS = OMP_NUM_THREADS = torch.set_num_threads = 1): median ms/step of $steps steps after one warm-up (forward, backward, AdamW), and each target's overhead over the same side's plain step, measured right before it (foundry plain, foundry checkpointed, PyTorch plain, PyTorch checkpointed, one target after the other). Goals: foundry's overhead <= PyTorch's (last column, foundry's overhead minus PyTorch's in percentage points, <= 0) and within 20 % of its recompute-FLOP ratio (overhead / recompute FLOPs between 0.8 and 1.2). An earlier PyTorch measurement, for scale: attention +22 %, mptmlp +3 %, mptblock +12 %."
echo
echo "| target | foundry plain ms | foundry ms | foundry overhead | foundry recompute FLOPs | overhead / recompute FLOPs | PyTorch plain ms | PyTorch ms | PyTorch overhead | foundry - PyTorch overhead (points) |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
printf '%s\n' "${time_rows[@]}"
