#!/usr/bin/env bash
# Builds foundry and runs the whole test suite. Usage: scripts/test.sh [BUILD_DIR] [extra cmake args]
# FOUNDRY_TEST_EXCLUDE: a ctest -E regex of tests to leave out (the sanitizer pass uses it).
# Ends with the ten slowest tests of the run (BUILD_DIR/test-times.txt holds them all).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
bash scripts/setup.sh  # a no-op when everything is installed
jobs=$(nproc)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
build_start=$(date +%s)
cmake --build "$build" -j "$jobs"
echo "test.sh: built in $(( $(date +%s) - build_start )) s"
ctest_args=(--test-dir "$build" --output-on-failure -j "$jobs")
if [ -n "${FOUNDRY_TEST_EXCLUDE:-}" ]; then ctest_args+=(-E "$FOUNDRY_TEST_EXCLUDE"); fi
test_start=$(date +%s)
rc=0
ctest "${ctest_args[@]}" | tee "$build/ctest.log" || rc=$?
# ctest's result lines: "  3/144 Test  #12: NAME ......   Passed   1.23 sec"
sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) .* ([0-9]+\.[0-9]+) sec$/\2 \1/p' "$build/ctest.log" |
  sort -rn > "$build/test-times.txt"
echo "test.sh: tests ran for $(( $(date +%s) - test_start )) s; the ten slowest (s, ctest -j $jobs):"
head -10 "$build/test-times.txt" | awk '{ printf "  %8.1f  %s\n", $1, $2 }'
exit $rc
