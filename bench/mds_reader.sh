#!/usr/bin/env bash
# The MDS reader against the training step it feeds: reading must never be what a step waits for.
#  1. An MDS split of MPT-125M-shaped samples, written by foundry's writer (models/mds.py): a
#     `tokens` column ndarray:int32 of BENCH_MDS_SEQ (2048) random ids below 50368 (numpy, seed 0)
#     per sample, BENCH_MDS_SAMPLES (16384) samples, zstd, hashes sha1 + xxh64, MDSWriter's default
#     shard size limit (64 MiB, as llm-foundry's converters write).
#  2. The reader alone, $BUILD/mds_reader_bench (bench/mds_reader_bench.cc): every window of the
#     epoch read through ReadStepWindows (foundry-run's own path), batch 1, in index order and in
#     foundry's shuffled order (--shuffle, the default block of 2^18 samples); cold (each shard's
#     first read: decompressed and its xxh64 verified) and warm (the shards held). Tokens/s, and
#     the median and longest read of one step's batch.
#     Then the same on a split of BENCH_MDS_LARGE_SAMPLES (262144 = 2^18, one shuffle block; 0
#     skips it) samples: 33 shards, 2 GiB decompressed, more than the reader holds
#     (MdsDataset::kMdsCacheBytes, 1 GiB): the shuffled order groups the shards into runs of at
#     most half of that, so each shard is decompressed once an epoch. Its first
#     BENCH_MDS_LARGE_WINDOWS (the whole epoch) windows; ~1.3 GB of scratch disk, ~2 min.
#  3. The step: MPT-125M (models/exports/mpt_125m.onnx, no weights: foundry initialises them)
#     compiled at batch 1 x seq BENCH_MDS_SEQ, foundry-run --data SPLIT --shuffle for
#     BENCH_MDS_STEPS (3) steps on BENCH_MDS_THREADS (1) thread(s); tokens/s the median of the
#     steps after the first, from foundry-run's own step lines (each step reads its batch itself,
#     so they include the read).
# Prints a markdown section on stdout (bench/run.sh puts it in bench/RESULTS.md).
# Usage: bench/mds_reader.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
samples=${BENCH_MDS_SAMPLES:-16384}
seq=${BENCH_MDS_SEQ:-2048}
steps=${BENCH_MDS_STEPS:-3}
threads=${BENCH_MDS_THREADS:-1}
large=${BENCH_MDS_LARGE_SAMPLES:-262144}
large_windows=${BENCH_MDS_LARGE_WINDOWS:-$large}
vocab=50368
model=models/exports/mpt_125m.onnx
(( samples >= 1 && seq >= 1 && steps >= 2 && threads >= 1 && large >= 0 && large_windows >= 1 )) ||
  { echo "mds_reader: error: BENCH_MDS_SAMPLES, BENCH_MDS_SEQ, BENCH_MDS_THREADS, BENCH_MDS_LARGE_WINDOWS >= 1, BENCH_MDS_STEPS >= 2, BENCH_MDS_LARGE_SAMPLES >= 0" >&2; exit 1; }
cmake --build "$build" --target mds_reader_bench foundry-compile foundry-run >/dev/null ||
  { echo "mds_reader: error: building $build/mds_reader_bench failed (configure $build first: scripts/test.sh)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cores=$(nproc)  # before OMP_NUM_THREADS, which nproc follows
export OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads
load_start=$(cut -d' ' -f1-3 /proc/loadavg)

# write_split DIR SAMPLES: the split; prints the seconds it took.
write_split() {
  local t0 t1
  t0=$(date +%s.%N)
  /usr/bin/python3 -c '
import os, sys
import numpy as np
sys.path.insert(0, os.getcwd())
from models.mds import write_mds
out, n, seq, vocab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(0)
write_mds(out, {"tokens": "ndarray:int32"},
          ({"tokens": rng.integers(0, vocab, seq, dtype=np.int32)} for _ in range(n)),
          compression="zstd", hashes=("sha1", "xxh64"))
' "$1" "$2" "$seq" "$vocab"
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}'
}
raw_mib() {
  /usr/bin/python3 -c "import json,sys; print(round(sum(s['raw_data']['bytes'] for s in json.load(open(sys.argv[1]))['shards']) / 2**20))" "$1/index.json"
}
# field KEY [NAME]: from the bench's output in $out, the value after KEY (or after NAME on KEY's line).
field() {
  awk -v k="$1" -v f="${2:-}" '$1 == k {if (f == "") print $2; else for (i = 1; i < NF; i++) if ($i == f) print $(i + 1)}' <<< "$out"
}
millions() {  # 114.1 M, 31.7 K
  awk -v v="$1" 'BEGIN {if (v == "") print "n/a"; else if (v >= 1e6) printf "%.1f M", v / 1e6; else if (v >= 1e3) printf "%.1f K", v / 1e3; else printf "%.0f", v}'
}
row() {  # row KEY LABEL: a table row from $out
  local k=$1_tokens_per_s
  echo "| $2 | $(millions "$(field "$k")") | $(field "$k" windows) | $(field "$k" seconds) | $(awk -v s="$(field "$k" seconds)" -v n="$(field "$k" windows)" 'BEGIN {printf "%.3f", 1000 * s / n}') | $(field "$k" step_read_p50_ms) | $(field "$k" step_read_max_ms) |"
}
scratch() { sed "s|$tmp|SCRATCH|g" <<< "$*"; }

# 1. The split.
write_s=$(write_split "$tmp/mds" "$samples")
zip_mib=$(du -sm "$tmp/mds" | cut -f1)

# 2. The reader alone.
reader_cmd=("$build/mds_reader_bench" --data "$tmp/mds" --seq "$seq" --batch 1 --vocab "$vocab")
out=$("${reader_cmd[@]}")
format=$(sed -nE 's/^dataset samples [0-9]+ shards [0-9]+ format (.*)$/\1/p' <<< "$out")
shards=$(awk '$1 == "dataset" {print $5}' <<< "$out")
rows=("$(row order_cold "index order, cold")" "$(row order_warm "index order, warm")"
      "$(row shuffled_cold "shuffled (--shuffle, block 2^18), cold")" "$(row shuffled_warm "shuffled, warm")")
reader_order=$(field order_cold_tokens_per_s)
reader_shuf=$(field shuffled_cold_tokens_per_s)
worst_ms=$(field order_cold_tokens_per_s step_read_max_ms)

large_note=""
if (( large > 0 )); then
  large_write_s=$(write_split "$tmp/large" "$large")
  large_cmd=("$build/mds_reader_bench" --data "$tmp/large" --seq "$seq" --batch 1 --vocab "$vocab" --windows "$large_windows")
  out=$("${large_cmd[@]}")
  large_shards=$(awk '$1 == "dataset" {print $5}' <<< "$out")
  rows+=("$(row order_cold "$large samples ($large_shards shards, $(raw_mib "$tmp/large") MiB raw): index order, cold")"
         "$(row shuffled_cold "$large samples: shuffled, cold")")
  large_shuf=$(field shuffled_cold_tokens_per_s)
  large_worst=$(field shuffled_cold_tokens_per_s step_read_max_ms)
  large_note=" The second split (written in ${large_write_s} s) is one shuffle block of $large samples in $large_shards shards, twice what the reader holds decompressed (1 GiB, \`MdsDataset::kMdsCacheBytes\`); the shuffled order permutes its block within groups of shards of at most half of that, so each shard is decompressed once; its first $large_windows windows: \`$(scratch "${large_cmd[*]}")\`."
fi

# 3. The step.
"$build/foundry-compile" "$model" --dim batch=1 --dim "seq=$seq" --threads "$threads" \
  -o "$tmp/mpt125m" > "$tmp/compile.log"
run_cmd=("$build/foundry-run" "$tmp/mpt125m" --data "$tmp/mds" --shuffle --steps "$steps" --threads "$threads")
"${run_cmd[@]}" > "$tmp/run.log"
step_tps=$(awk '/^step /{split($2, a, "/"); if (a[1] > 1) for (i = 2; i <= NF; i++) if ($i == "tok/s") print $(i - 1)}' "$tmp/run.log" |
  sort -g | awk '{v[NR] = $1} END {if (NR == 0) print "n/a"; else printf "%.1f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}')
data_line=$(scratch "$(grep -m1 -E '^ *data ' "$tmp/run.log" | sed -E 's/^ *//' || true)")
ratio() { awk -v r="$1" -v s="$2" 'BEGIN {if (s + 0 > 0 && r != "") printf "%.0f", r / s; else print "n/a"}'; }
share() { awk -v r="$1" -v s="$2" 'BEGIN {if (r + 0 > 0) printf "%.4f", 100 * s / r; else print "n/a"}'; }
step_ms=$(awk -v s="$step_tps" -v t="$seq" 'BEGIN {if (s + 0 > 0) printf "%.0f", 1000 * t / s; else print "n/a"}')
of_step() { awk -v w="$1" -v s="$step_ms" 'BEGIN {if (s + 0 > 0 && w != "") printf "%.2f", 100 * w / s; else print "n/a"}'; }

echo "## MDS reader vs the step (CPU, MPT-125M, batch 1 x seq $seq)"
echo
echo "Measured by \`bench/mds_reader.sh\` (worktree at $(git rev-parse --short HEAD 2>/dev/null || echo '?')) on $(date -u +%Y-%m-%d), $cores cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), load average $load_start at the start and $(cut -d' ' -f1-3 /proc/loadavg) at the end (other jobs share the machine). The split: $samples samples of $seq random int32 ids below $vocab (numpy, seed 0), written by \`models/mds.py\` in ${write_s} s: $shards zstd shards (MDSWriter's default 64 MiB limit), $(raw_mib "$tmp/mds") MiB raw, $zip_mib MiB on disk, sha1 + xxh64 ($format)."
echo
echo "The reader alone: \`$(scratch "${reader_cmd[*]}")\`: every window of the epoch read by \`ReadStepWindows\` (what a step of \`foundry-run --data\` calls), one thread, a fresh \`MdsDataset\` per order; cold = each shard's first read (zstd decompressed into memory, xxh64 of the compressed file verified; the files themselves in the page cache, just written), warm = the same windows again with the shards held; tokens/s counts the $seq ids of each window. A step's read: one window (batch 1); the longest is a step that first touches a shard and waits for all of it.${large_note}"
echo
echo "| read | tokens/s | windows | seconds | step read mean ms | p50 ms | max ms |"
echo "|---|---:|---:|---:|---:|---:|---:|"
printf '%s\n' "${rows[@]}"
echo
echo "The step: \`foundry-compile $model --dim batch=1 --dim seq=$seq --threads $threads\`, then \`$(scratch "${run_cmd[*]}")\`, OPENBLAS_NUM_THREADS=$threads; median tok/s of steps 2-$steps (each reads its own batch). ${data_line:+foundry-run: \`$data_line\`.}"
echo
echo "| | tokens/s | reader / step | reading's share of a step |"
echo "|---|---:|---:|---:|"
echo "| step (MPT-125M, $threads thread(s), $step_ms ms) | $step_tps | | |"
echo "| reader, index order, cold | $(millions "$reader_order") | $(ratio "$reader_order" "$step_tps")x | $(share "$reader_order" "$step_tps") % |"
echo "| reader, shuffled, cold | $(millions "$reader_shuf") | $(ratio "$reader_shuf" "$step_tps")x | $(share "$reader_shuf" "$step_tps") % |"
echo "| the longest step read ($worst_ms ms: a shard's first read) | | | $(of_step "$worst_ms") % of that step |"
if (( large > 0 )); then
  echo "| reader, $large samples, shuffled, cold | $(millions "$large_shuf") | $(ratio "$large_shuf" "$step_tps")x | $(share "$large_shuf" "$step_tps") % |"
  echo "| its longest step read ($large_worst ms) | | | $(of_step "$large_worst") % of that step |"
fi
echo
echo -n "Reads are synchronous: \`Trainer::BuildBatch\` calls \`ReadStepWindows\` before the step's kernels run, with no read-ahead, so every step waits for its own batch's read, a shard's first read included ($worst_ms ms here)."
if (( large > 0 )); then
  echo " Over a whole epoch of a block larger than the reader's cache, the shuffled read gives $(millions "$large_shuf") tokens/s; its longest step read is a group's first read of a shard ($large_worst ms)."
else
  echo
fi
