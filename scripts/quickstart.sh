#!/usr/bin/env bash
# Fresh machine to a training run: installs dependencies, builds the two CLIs, compiles the
# shipped tiny MPT (models/fixtures/mpt_tiny) into a training plan and trains it for 20 steps;
# then the loop an llm-foundry user runs: the same model compiled and trained from an
# llm-foundry training YAML (configs/mpt-tiny.yaml: schedule, clipping, accumulation, eval,
# checkpoints, and its data: MDS splits of byte-level tokens of a text, written by
# models/text_tokens.py --mds), with its metrics and loss curve in out/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)" --target foundry-compile foundry-run
model=models/fixtures/mpt_tiny/model.onnx
set -x
build/foundry-compile "$model" --list-modules
build/foundry-compile "$model" --dim batch=2 --dim seq=16 -o out/mpt_tiny
inputs=models/fixtures/mpt_tiny/inputs
build/foundry-run out/mpt_tiny --device cpu --steps 20 \
  --feed input_ids=$inputs/input_ids.pb --feed labels=$inputs/labels.pb
build/foundry-compile "$model" --config configs/mpt-tiny.yaml -o out/tiny
rm -rf out/tiny-data  # the MDS splits configs/mpt-tiny.yaml's train_loader / eval_loader read
/usr/bin/python3 models/text_tokens.py /usr/share/common-licenses/GPL-3 --mds out/tiny-data
build/foundry-run out/tiny --config configs/mpt-tiny.yaml --metrics out/tiny.jsonl \
  --loss-curve out/tiny_loss.svg
