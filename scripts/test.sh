#!/usr/bin/env bash
# Builds foundry and runs the whole test suite. Usage: scripts/test.sh [BUILD_DIR] [extra cmake args]
# FOUNDRY_TEST_EXCLUDE: a ctest -E regex of tests to leave out (the sanitizer pass uses it).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
bash scripts/setup.sh  # a no-op when everything is installed
jobs=$(nproc)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build "$build" -j "$jobs"
ctest_args=(--test-dir "$build" --output-on-failure -j "$jobs")
if [ -n "${FOUNDRY_TEST_EXCLUDE:-}" ]; then ctest_args+=(-E "$FOUNDRY_TEST_EXCLUDE"); fi
ctest "${ctest_args[@]}"
