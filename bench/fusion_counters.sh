#!/usr/bin/env bash
# Which fusions canonicalize matched, per model export, and what the training step saves for the
# backward: for each ONNX file, foundry-compile's `canonicalize:` counters and the saved-for-
# backward bytes of its report, at the fixtures' shape (batch 2, seq 16 unless the export fixed
# another), with attention fused
# (the default) and as exported (--no-attention-fusion).
# Default files: every committed fixture export (models/fixtures/*/model.onnx, model.stock.onnx,
# dynamo/model.onnx). Other files (exports of code written elsewhere, say) can be named instead;
# a file that does not compile gets its error line in the table.
# Prints a markdown section on stdout (bench/run.sh puts it in bench/RESULTS.md).
# Usage: bench/fusion_counters.sh [BUILD_DIR] [MODEL.onnx ...]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  for d in models/fixtures/*/; do
    for f in model.onnx model.stock.onnx dynamo/model.onnx; do
      [ -f "$d$f" ] && files+=("$d$f")
    done
  done
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --build "$build" --target foundry-compile >/dev/null
json() { /usr/bin/python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }
# --input-shape for every graph input that is not an initializer: its exported sizes, a symbolic
# first axis 2 and a symbolic second 16 (the fixtures' shape).
shapes() {
  /usr/bin/python3 - "$1" <<'EOF'
import sys
import onnx
m = onnx.load(sys.argv[1], load_external_data=False)
inits = {i.name for i in m.graph.initializer}
inputs = [i for i in m.graph.input if i.name not in inits and i.type.tensor_type.shape.dim]
# A symbolic axis takes the size another input has there (torch specialised input_ids but not
# labels), else 2 (axis 0) or 16.
fixed = {}
for i in inputs:
    for k, d in enumerate(i.type.tensor_type.shape.dim):
        if d.HasField("dim_value") or d.dim_param.isdigit():
            fixed.setdefault(k, str(d.dim_value) if d.HasField("dim_value") else d.dim_param)
for i in inputs:
    dims = i.type.tensor_type.shape.dim
    sizes = [str(d.dim_value) if d.HasField("dim_value") else d.dim_param if d.dim_param.isdigit()
             else fixed.get(k, "2" if k == 0 else "16") for k, d in enumerate(dims)]
    print(f"--input-shape={i.name}=" + "x".join(sizes))
EOF
}

rows=()
for f in "${files[@]}"; do
  mapfile -t flags < <(shapes "$f")
  compile() {  # compile() [EXTRA FLAG...]: the saved-for-backward bytes, or fails
    "$build/foundry-compile" "$f" "${flags[@]}" "$@" --dry-run --report-json "$tmp/r.json" \
      > "$tmp/out.txt" 2> "$tmp/err.txt" && json "$tmp/r.json" "d['memory']['saved_for_backward_bytes']"
  }
  if saved=$(compile); then
    counters=$(grep -o 'canonicalize: .*;' "$tmp/out.txt" | sed 's/^canonicalize: //; s/;$//')
    unfused=$(compile --no-attention-fusion || echo "-")
    rows+=("| \`$f\` | $counters | $saved | $unfused |")
  else
    rows+=("| \`$f\` | error: $(grep -m1 . "$tmp/err.txt" | cut -c1-200 | sed 's/|/\\|/g') | - | - |")
  fi
done

echo "## Fusions matched per export (canonicalize counters) and saved-for-backward bytes"
echo
echo "Measured by \`bench/fusion_counters.sh\` (batch 2 x seq 16, or the size an export fixed; saved for backward from \`--report-json\`; unfused: \`--no-attention-fusion\`)."
echo
echo "| export | canonicalize counters | saved bytes | saved bytes, attention unfused |"
echo "|---|---|---:|---:|"
printf '%s\n' "${rows[@]}"
