#!/usr/bin/env bash
# --memory-budget on the MPT-7B structure: for 10 budgets spread evenly between the
# every-block plan and the plain plan (batch 1, seq 2048), the chosen checkpointing, its planned
# total and recompute share, against the cheapest uniform llm-foundry target that fits (none,
# attention, FFN, attention + FFN, block, with first-n forms; the search evaluates them all and
# foundry-compile prints the cheapest), the plans made and the wall time of the whole command.
# Prints a markdown section on stdout (bench/run.sh puts it in bench/RESULTS.md).
# Usage: bench/budget_7b.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
model=models/exports/mpt_7b.onnx
dims=(--dim batch=1 --dim seq=2048)
py=/usr/bin/python3
total() { $py -c "import json,sys; print(json.load(open(sys.argv[1]))['memory']['total_bytes'])" "$1"; }

"$build/foundry-compile" "$model" "${dims[@]}" --dry-run --report-json "$tmp/plain.json" > /dev/null
"$build/foundry-compile" "$model" "${dims[@]}" --dry-run --ckpt mptblock \
  --report-json "$tmp/block.json" > /dev/null
hi=$(total "$tmp/plain.json")
lo=$(total "$tmp/block.json")

echo "## --memory-budget on the MPT-7B structure (batch 1, seq 2048)"
echo
echo "Measured by \`bench/budget_7b.sh\` (\`foundry-compile $model --dim batch=1 --dim seq=2048 --memory-budget B --dry-run\`), load average $(cut -d' ' -f1-3 /proc/loadavg) at the start, 2 cores. Budgets: 10 evenly spaced from the every-block plan ($lo B) to the plain plan ($hi B). *Uniform*: the cheapest of llm-foundry's uniform targets (none, grouped_query_attention, mptmlp, both, mptblock, each also as first-n) that fits the budget. Recompute: % of the step's FLOPs."
echo
echo "| budget B | chosen activation_checkpointing_target | planned total B | recompute | cheapest uniform that fits | its recompute | plans | time s |"
echo "|---:|---|---:|---:|---|---:|---:|---:|"
for k in 0 1 2 3 4 5 6 7 8 9; do
  budget=$((lo + (hi - lo) * k / 9))
  start=$(date +%s.%N)
  "$build/foundry-compile" "$model" "${dims[@]}" --memory-budget "$budget" --dry-run \
    --report-json "$tmp/r.json" > /dev/null
  secs=$(echo "$(date +%s.%N) - $start" | bc -l | xargs printf "%.1f")
  # Everything but the time from the report's "budget" object (the search's result as printed).
  row=$($py - "$tmp/r.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
b, total = r["budget"], r["memory"]["total_bytes"]
c, u = b["chosen"], b["uniform"]
config = c["yaml"] or "(none needed)"
uniform = ("%s|%.2f" % (u["target"], u["recompute_percent"])) if u else "(none fits)|-"
print("%d|%.2f|%d|%s|%s" % (total, c["recompute_percent"], b["plans_tried"], uniform, config))
PY
)
  IFS='|' read -r planned recompute plans uniform_target uniform_recompute config <<< "$row"
  [ "$planned" -le "$budget" ] || { echo "budget_7b: planned $planned > budget $budget" >&2; exit 1; }
  echo "| $budget | \`$config\` | $planned | $recompute % | $uniform_target | $uniform_recompute % | $plans | $secs |"
done
