#!/usr/bin/env bash
# What a checkpoint's manifest costs (runtime/checkpoint_manifest.h): CRC-32C over memory, and
# writing / verifying the manifest of a save-shaped folder of BENCH_MANIFEST_GIB GiB (default 2)
# just written, best of BENCH_MANIFEST_REPEATS (default 3), through $BUILD/checkpoint_manifest_bench
# (bench/checkpoint_manifest_bench.cc). Prints a markdown section on stdout (bench/run.sh puts it
# in bench/RESULTS.md).
# Usage: bench/checkpoint_manifest.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
bench=$build/checkpoint_manifest_bench
gib=${BENCH_MANIFEST_GIB:-2}
repeats=${BENCH_MANIFEST_REPEATS:-3}
cmake --build "$build" --target checkpoint_manifest_bench >/dev/null ||
  { echo "checkpoint_manifest: error: building $bench failed (configure $build first: scripts/test.sh)" >&2; exit 1; }
out=$("$bench" --gib "$gib" --repeats "$repeats")
field() { awk -v k="$1" '$1 == k {print $2}' <<< "$out"; }
rate() { awk -v k="$1" '$1 == k {gsub(/[()]/, "", $3); print $3}' <<< "$out"; }
echo "## What a checkpoint's manifest costs (CRC-32C of every file, at save and at resume)"
echo
echo "Measured by \`bench/checkpoint_manifest.sh\` (\`$bench --gib $gib --repeats $repeats\`, worktree at $(git rev-parse --short HEAD 2>/dev/null || echo '?')), load average $(cut -d' ' -f1-3 /proc/loadavg) at the start, $(nproc) cores; best of $repeats. A folder laid out like a save ($(field save_gib) GiB in $(awk '$1 == "save_gib" {print $4}' <<< "$out") files: the weights twice, AdamW's two slots, state.json), its files just written (in the page cache, as right after a save). CRC-32C is computed in software, eight bytes a step through tables, one thread."
echo
echo "| what | seconds | GB/s |"
echo "|---|---:|---:|"
echo "| CRC-32C over 256 MiB in memory | | $(field crc32c_memory_gbps) |"
echo "| write the manifest (every file read and checksummed) | $(field write_manifest_s) | $(rate write_manifest_s) |"
echo "| verify the whole save (--resume) | $(field verify_s) | $(rate verify_s) |"
