#!/usr/bin/env bash
# The runtime's fixed costs: the step time of an almost empty training graph and the
# cost of each further node, through the real compile + Trainer path ($BUILD/node_overhead_bench,
# bench/node_overhead_bench.cc: a chain of N Adds of a constant on a [1, 1, 16] tensor after an
# embedding Gather, foundry's appended loss, AdamW), at each thread count.
# Prints a markdown section on stdout (bench/run.sh puts it in bench/RESULTS.md).
# Usage: bench/node_overhead.sh [BUILD_DIR]
#   BENCH_NODE_LINKS (default 0,100,1000,10000), BENCH_NODE_THREADS (default "1 2"),
#   BENCH_NODE_SECONDS (default 2: timed seconds per chain, after 20 warm-up steps).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
bench=$build/node_overhead_bench
links=${BENCH_NODE_LINKS:-0,100,1000,10000}
read -ra threads <<< "${BENCH_NODE_THREADS:-1 2}"
seconds=${BENCH_NODE_SECONDS:-2}
# Built on request (not part of the default build): cmake --build BUILD --target node_overhead_bench.
cmake --build "$build" --target node_overhead_bench >/dev/null ||
  { echo "node_overhead: error: building $bench failed (configure $build first: scripts/test.sh)" >&2; exit 1; }
tmp_out=$(mktemp)
trap 'rm -f "$tmp_out"' EXIT

echo "## Per-node overhead of the CPU runtime (empty step, cost per further node)"
echo
echo "Measured by \`bench/node_overhead.sh\` (\`$bench\`, worktree at $(git rev-parse --short HEAD 2>/dev/null || echo '?')), load average $(cut -d' ' -f1-3 /proc/loadavg) at the start, $(nproc) cores. The model: \`x0 = Gather(emb, input_ids)\` (emb [16, 16], batch 1 x seq 1), then a chain of N \`Add(x, c)\` (c a [16] constant; its gradient is the identity, so autodiff adds no node and each link is one executed node), foundry's appended cross-entropy, AdamW on the 256 weights; compiled by the library call behind \`foundry-compile\` and run by the \`Trainer\` behind \`foundry-run\` (synthetic batch written into the inputs, the planned \`Executor\`, the finite check, the optimizer). N = 0 is the empty step. Median µs of the whole step (wall clock around \`Trainer::Step\`), of the graph alone (\`Executor::Run\`) and of the rest, after 20 warm-up steps, over ${seconds} s of steps per chain; ns per node = (step(N) - step(0)) / (nodes(N) - nodes(0))."
echo
first=1
for t in "${threads[@]}"; do
  env -u OPENBLAS_CORETYPE "$bench" --links "$links" --threads "$t" --seconds "$seconds" > "$tmp_out" 2>&1 ||
    { echo "node_overhead: error: $bench --threads $t failed:" >&2; cat "$tmp_out" >&2; exit 1; }
  if (( first )); then cat "$tmp_out"; first=0; else tail -n +3 "$tmp_out"; fi
done
