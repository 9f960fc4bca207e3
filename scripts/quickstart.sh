#!/usr/bin/env bash
# Fresh machine to a training run: installs dependencies, builds the two CLIs, compiles the
# shipped tiny MPT (models/fixtures/mpt_tiny) into a training plan and trains it for 20 steps.
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
