#!/usr/bin/env bash
# foundry's MDS fixtures (tests/data/mds) against mosaicml-streaming's own reader and writer:
# every fixture read by streaming (hash-validated, decompressed and decoded by its code, in order)
# must equal its expected.json, and the same datasets written by streaming's MDSWriter must be
# byte-identical to ours (bench/mds_streaming_check.py says how, and which stand-ins it uses for
# the Python modules Debian 12 lacks). Outside CI: it needs a source checkout of
# mosaicml/streaming, which nothing installs.
# Usage: bench/mds_streaming_check.sh [STREAMING_CHECKOUT]   (default: $STREAMING_SRC)
#   STREAMING_CHECKOUT is the folder holding streaming/ (a clone, or an unpacked archive).
# Prints one line per check and "N passed, M failed"; exit status 1 if any failed.
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:-${STREAMING_SRC:-}}
if [[ -z $src ]]; then
  echo "mds_streaming_check: error: give the streaming checkout as the argument or in STREAMING_SRC" >&2
  exit 2
fi
[[ -d $src/streaming ]] || { echo "mds_streaming_check: error: $src holds no streaming/ folder" >&2; exit 2; }
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# TMPDIR: StreamingDataset keeps its lock files in the temp folder; keep them in the scratch one.
TMPDIR=$scratch /usr/bin/python3 bench/mds_streaming_check.py --streaming "$(cd "$src" && pwd)" \
  --scratch "$scratch"
