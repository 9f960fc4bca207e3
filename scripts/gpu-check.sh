#!/usr/bin/env bash
# The GPU check (issue 11): build here one self-contained folder, run it on a GPU machine that
# has only the NVIDIA driver and PyTorch 2.x with its nvidia wheels.
#
#   scripts/gpu-check.sh build OUT [BUILD_DIR]   here: build for sm_90 (BUILD_DIR, default
#                                                build-bundle) and fill OUT (<= 64 MiB)
#   scripts/gpu-check.sh selftest OUT            here, without a GPU: OUT is self-contained and
#                                                every GPU test skips with its reason
#   OUT/run.sh [RESULTS_FILE]                    on the GPU machine (= gpu-check.sh run OUT ...)
#
# OUT: bin/ (foundry-compile, foundry-run, foundry_gpu_tests: every GPU test in one binary;
# stripped; gtest linked in), lib/ (our libraries, stripped, cudart linked into the CUDA kernels';
# yaml-cpp; OpenBLAS's static library linked once into libfoundry_openblas.so; ONNX, which Debian
# ships only as a shared library, and
# the protobuf and zlib it links; found through the binaries' RPATH $ORIGIN/../lib; the C and C++
# runtimes are the machine's: glibc >= 2.34, libstdc++ >= GCC 11, see BUILD_INFO), models/ (the fixtures
# the GPU tests train, the benchmark's exports, configs and models/mpt.py), plans/ (the
# benchmark's plans, compiled here, graphs gzipped), bench/, scripts/, run.sh. cuBLAS is not in
# it (libcublasLt alone is over 500 MB): run.sh takes it from the machine's PyTorch wheels.
#
# run exit status: 0 every GPU test passed and every benchmark row ran; 1 a GPU test failed or
# skipped; 2 no GPU, no driver, or no CUDA 13 cuBLAS (nothing ran); 3 the tests passed but a
# benchmark row failed or did not fit the time window.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
MAX_BYTES=$((64 * 1024 * 1024))
# What the binaries may load from OUT/lib (copied from this machine) and from the GPU machine.
FOUNDRY_LIBS="libfoundry_base.so libfoundry_compiler.so libfoundry_cpu_kernels.so libfoundry_cuda_kernels.so libfoundry_passes.so libfoundry_runtime.so"
BUNDLED_LIBS="$FOUNDRY_LIBS libfoundry_openblas.so libyaml-cpp.so.0.7 libonnx.so.1 libonnx_proto.so.1 libprotobuf.so.32 libz.so.1"
# libstdc++ and libgcc_s: the machine's (CMakeLists.txt, FOUNDRY_BUNDLE, says why).
SYSTEM_LIBS="linux-vdso.so.1 libc.so.6 libm.so.6 libdl.so.2 librt.so.1 libpthread.so.0 ld-linux-x86-64.so.2 libstdc++.so.6 libgcc_s.so.1"
EXTERNAL_LIBS="libcuda.so.1 libcublas.so.13 libcublasLt.so.13"
BINARIES="foundry-compile foundry-run foundry_gpu_tests"
# What the GPU tests read of a fixture folder (tests/support/fixture_plans.cc, the cuda tests).
FIXTURE_FILES="config.json model.onnx inputs reference"

die() { echo "gpu-check: error: $*" >&2; exit "${code:-1}"; }
usage() { sed -n '4,9p' "$0" >&2; exit 2; }
lib_name() { awk '{print $1}'; }

# ---------------------------------------------------------------------------------------------
cmd_build() {
  local out=$1 build=${2:-$here/build-bundle}
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-/work} CCACHE_NOHASHDIR=1
  local launcher=()
  if command -v ccache >/dev/null; then
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  fi
  mkdir -p "$build"
  cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFOUNDRY_BUNDLE=ON -DFOUNDRY_SHARED_LIBS=ON \
    -DFOUNDRY_CUDA_ARCH=90 "${launcher[@]}" > "$build/gpu-check.configure.log" ||
    die "cmake failed: $build/gpu-check.configure.log"
  cmake --build "$build" -j "${GPU_CHECK_JOBS:-$(nproc)}" --target $BINARIES

  rm -rf "$out"
  mkdir -p "$out"/{bin,lib,models/configs,models/exports,models/fixtures,plans,bench,scripts}
  out=$(cd "$out" && pwd)
  for b in $BINARIES; do strip --strip-all -o "$out/bin/$b" "$build/$b"; done

  # Shared libraries: exactly the expected ones, copied from where this machine resolves them.
  local needed lib path
  # (ldd of the build folder's binaries: their RPATH also holds $ORIGIN, where
  # libfoundry_openblas.so is; OUT/lib is still empty.)
  needed=$(for b in $BINARIES; do ldd "$build/$b"; done | lib_name | sort -u)
  for lib in $needed; do
    case " $BUNDLED_LIBS $SYSTEM_LIBS $EXTERNAL_LIBS " in
      *" $(basename "$lib") "*) ;;
      *) die "unexpected shared library $lib: link it statically or add it to BUNDLED_LIBS" ;;
    esac
  done
  for lib in $BUNDLED_LIBS; do
    path=$(for b in $BINARIES; do ldd "$build/$b"; done | awk -v l="$lib" '$1 == l {print $3; exit}')
    [ -f "$path" ] || die "$lib: not among the binaries' libraries (ldd: '$path'); update BUNDLED_LIBS"
    cp -L "$path" "$out/lib/$lib"
  done
  # Our own libraries carry their debug info in the build folder; the folder gets them stripped.
  for lib in $FOUNDRY_LIBS; do strip --strip-unneeded "$out/lib/$lib"; done

  # Models: the fixtures the GPU tests train, the benchmark's exports and PyTorch side.
  local f item
  for f in "$here"/models/fixtures/*/; do
    [ -d "$f/inputs" ] || continue
    mkdir -p "$out/models/fixtures/$(basename "$f")"
    for item in $FIXTURE_FILES; do
      [ -e "$f/$item" ] && cp -r "$f/$item" "$out/models/fixtures/$(basename "$f")/"
    done
  done
  cp "$here"/models/__init__.py "$here"/models/mpt.py "$out/models/"
  local rows cfg
  rows=$(bash "$here/bench/gpu_vs_pytorch.sh" rows)
  for cfg in $(awk '{print $1}' <<<"$rows"); do
    cp "$here/models/configs/$cfg.json" "$out/models/configs/"
    cp "$here/models/exports/$cfg.onnx" "$out/models/exports/"
  done
  cp "$here"/bench/gpu_vs_pytorch.sh "$here"/bench/gpu_side.py "$out/bench/"
  cp "$here/scripts/gpu-check.sh" "$out/scripts/"
  # The benchmark's plans, compiled by the folder's own compiler; the graphs (mostly the causal
  # masks folded to constants) shrink about 100x in gzip.
  bash "$out/bench/gpu_vs_pytorch.sh" compile "$out/bin" "$out/plans"
  for f in "$out"/plans/*.train.onnx; do gzip -9 "$f"; done
  cat > "$out/run.sh" <<'EOF'
#!/usr/bin/env bash
# The GPU check: every GPU test, then the benchmark; results in one file (README: "Checking on
# a GPU"). Usage: ./run.sh [RESULTS_FILE]   (default: gpu-results.md beside this script)
exec bash "$(dirname "$0")/scripts/gpu-check.sh" run "$(dirname "$0")" "$@"
EOF
  chmod +x "$out/run.sh" "$out/scripts/gpu-check.sh" "$out/bench/gpu_vs_pytorch.sh"
  {
    echo "built $(date -u +%Y-%m-%dT%H:%MZ) on $(uname -n) from $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$here" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
    echo "CUDA $(grep -ho 'CMAKE_CUDA_COMPILER_VERSION "[0-9.]*' "$build"/CMakeFiles/*/CMakeCUDACompiler.cmake | grep -o '[0-9.]*$'), sm_90, cudart static; cuBLAS 13 from the machine"
    echo "needs from the machine: $(objdump -T "$out"/bin/* "$out"/lib/* | grep -o 'GLIBC_[0-9.]*' | sort -V | tail -1) (glibc), $(objdump -T "$out"/bin/* "$out"/lib/* | grep -o 'GLIBCXX_[0-9.]*' | sort -V | tail -1) (libstdc++.so.6)"
  } > "$out/BUILD_INFO"

  local size
  size=$(du -sb "$out" | cut -f1)
  echo "gpu-check: $out: $size bytes ($(awk -v b="$size" 'BEGIN { printf "%.1f", b / 1048576 }') MiB of 64)"
  du -sh "$out"/* | sed 's/^/  /'
  [ "$size" -le "$MAX_BYTES" ] || die "$out is over 64 MiB"
}

# ---------------------------------------------------------------------------------------------
# Without a GPU, under env -i: what a GPU run would trip over first.
cmd_selftest() {
  local out
  out=$(cd "$1" && pwd)
  local failed=0
  check() {  # check NAME COMMAND...: runs it, prints PASS/FAIL
    local name=$1; shift
    if "$@" > "$tmp/check.log" 2>&1; then echo "PASS  $name"; else
      echo "FAIL  $name"; sed 's/^/      /' "$tmp/check.log" | tail -15; failed=1; fi
  }
  local tmp
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN

  local size
  size=$(du -sb "$out" | cut -f1)
  check "size $size bytes <= 64 MiB" test "$size" -le "$MAX_BYTES"
  # ldd under env -i: OUT/lib, the C library, and the three from the GPU machine.
  ldd_ok() {
    local b=$1 bad=0 line name path
    while read -r line; do
      name=$(awk '{print $1}' <<<"$line"); path=$(awk '{print $3}' <<<"$line")
      case " $BUNDLED_LIBS " in *" $name "*)
        [ "$(realpath -ms "$path")" = "$out/lib/$name" ] || { echo "$name -> $path, not OUT/lib"; bad=1; }
        continue ;; esac
      case " $SYSTEM_LIBS " in *" $(basename "$name") "*) continue ;; esac
      case " $EXTERNAL_LIBS " in *" $name "*) echo "  (from the GPU machine) $line"; continue ;; esac
      echo "unexpected: $line"; bad=1
    done < <(env -i ldd "$out/bin/$b")
    return $bad
  }
  for b in $BINARIES; do check "ldd bin/$b: only OUT/lib, libc, libcuda, libcublas*" ldd_ok "$b"; done
  # What the process really loads (libonnx.so.1's own libprotobuf and libz included): OUT/lib's
  # copies, and nothing from this machine but the C and C++ runtimes and cuBLAS.
  loads_ok() {
    local path name bad=0
    while read -r path; do
      path=$(realpath -ms "$path"); name=$(basename "$path")
      case " $BUNDLED_LIBS " in *" $name "*)
        [ "$path" = "$out/lib/$name" ] || { echo "$name from $path"; bad=1; }; continue ;; esac
      case " $SYSTEM_LIBS $EXTERNAL_LIBS " in *" $name "*) continue ;; esac
      echo "unexpected: $path"; bad=1
    done < <(env -i LD_DEBUG=libs "$out/bin/$1" --help 2>&1 >/dev/null |
             sed -n 's/.*calling init: //p')
    return $bad
  }
  check "bin/foundry-run loads OUT/lib's libraries, libc, libstdc++, cuBLAS (LD_DEBUG)" loads_ok foundry-run
  check "bin/foundry_gpu_tests loads OUT/lib's libraries, libc, libstdc++, cuBLAS (LD_DEBUG)" loads_ok foundry_gpu_tests
  check "env -i bin/foundry-compile --help" env -i "$out/bin/foundry-compile" --help
  check "env -i bin/foundry-run --help" env -i "$out/bin/foundry-run" --help
  local plan=$out/plans/mpt_125m.none
  no_gpu_error() {
    local rc=0
    env -i "$out/bin/foundry-run" "$plan" --device cuda > "$tmp/o" 2> "$tmp/e" || rc=$?
    cat "$tmp/e"
    [ "$rc" = 1 ] && [ "$(wc -l < "$tmp/e")" = 1 ] && grep -q "^foundry-run: error: --device cuda" "$tmp/e"
  }
  check "env -i bin/foundry-run PLAN --device cuda: one-line error, exit 1" no_gpu_error
  # A shipped plan loads from a copy elsewhere (graph decompressed beside it), on the CPU.
  plan_loads() {  # (the .plan names its graph file: the copy keeps the name)
    local p=$tmp/$(basename "$plan")
    cp "$plan.plan" "$p.plan" && gzip -dc "$plan.train.onnx.gz" > "$p.train.onnx" &&
      env -i "$out/bin/foundry-run" "$p" --steps 0
  }
  check "env -i bin/foundry-run (shipped plan mpt_125m.none, cpu, 0 steps)" plan_loads
  gpu_tests_skip() {
    env -i FOUNDRY_SOURCE_DIR="$out" "$out/bin/foundry_gpu_tests" > "$tmp/t" 2>&1 || { cat "$tmp/t"; return 1; }
    grep -E '^\[  SKIPPED \]|^\[  PASSED  \]|tests ran' "$tmp/t" | tail -4
    grep -m3 -A1 '^\[ RUN' "$tmp/t" | grep -i 'skip' | head -3
    # Every test skipped: "[  PASSED  ] 0 tests." and a skip line per test.
    grep -q '^\[  PASSED  \] 0 tests' "$tmp/t" && ! grep -q '^\[  FAILED  \]' "$tmp/t"
  }
  check "env -i FOUNDRY_SOURCE_DIR=OUT bin/foundry_gpu_tests: every test skips" gpu_tests_skip
  gpu_tests_fail() {
    local rc=0
    env -i FOUNDRY_SOURCE_DIR="$out" FOUNDRY_REQUIRE_GPU=1 "$out/bin/foundry_gpu_tests" > "$tmp/t" 2>&1 || rc=$?
    grep -E '^\[  (PASSED|FAILED|SKIPPED) \] [0-9]+ test' "$tmp/t"
    # run.sh counts a skip as a failure too, but a GPU test should not skip by itself.
    if grep -q '^\[  SKIPPED \] [0-9]' "$tmp/t"; then
      echo "these skip instead of failing (start them with FOUNDRY_REQUIRE_GPU(), tests/support/cuda_check.h):"
      grep -E '^\[  SKIPPED \] [A-Za-z]' "$tmp/t"
      return 1
    fi
    [ "$rc" != 0 ] && grep -q '^\[  PASSED  \] 0 tests' "$tmp/t"
  }
  check "... with FOUNDRY_REQUIRE_GPU=1: every test fails" gpu_tests_fail
  run_no_gpu() {
    local rc=0
    env -i PATH=/usr/bin:/bin "$out/run.sh" "$tmp/results.md" > "$tmp/o" 2>&1 || rc=$?
    cat "$tmp/o"
    [ "$rc" = 2 ]
  }
  check "env -i PATH=/usr/bin:/bin OUT/run.sh without a GPU: exit 2, says why" run_no_gpu
  # run.sh's own path past the GPU check, on a stand-in: a fake nvidia-smi and a "wheel" folder
  # holding this machine's CUDA 13 cuBLAS. The tests run (and their skip counts as a failure),
  # the benchmark's tables come out with each row's error, exit 1.
  local cuda_lib=/usr/local/cuda/lib64
  if [ -e "$cuda_lib/libcublas.so.13" ]; then
    mkdir -p "$tmp/fake/bin" "$tmp/fake/site13/nvidia/cu13/lib" "$tmp/fake/site12/nvidia/cublas/lib"
    printf '#!/bin/sh
case "$1" in -L) echo "GPU 0: stand-in (UUID: GPU-0)";; *) echo "stand-in, 0, 0 MiB";; esac
' \
      > "$tmp/fake/bin/nvidia-smi"
    chmod +x "$tmp/fake/bin/nvidia-smi"
    ln -s "$cuda_lib/libcublas.so.13" "$cuda_lib/libcublasLt.so.13" "$tmp/fake/site13/nvidia/cu13/lib/"
    touch "$tmp/fake/site12/nvidia/cublas/lib/libcublas.so.12"
    fake_run() {  # fake_run SITE: exit status of run.sh
      local rc=0
      env -i PATH="$tmp/fake/bin:/usr/bin:/bin" PYTHONPATH="$tmp/fake/$1" GPU_CHECK_PYTHON=python3 \
        "$out/run.sh" "$tmp/fake/results.md" > "$tmp/fake/out" 2>&1 || rc=$?
      return $rc
    }
    run_cuda12() {
      local rc=0; fake_run site12 || rc=$?; cat "$tmp/fake/out"
      [ $rc = 2 ] && grep -q 'libcublas.so.12' "$tmp/fake/out"
    }
    check "OUT/run.sh, stand-in GPU, only a CUDA 12 cuBLAS wheel: exit 2, says so" run_cuda12
    run_stand_in() {
      local rc=0; fake_run site13 || rc=$?
      tail -3 "$tmp/fake/out"
      grep -E '^(## |### |\| none )' "$tmp/fake/results.md"
      [ $rc = 1 ] && grep -q '^## GPU tests' "$tmp/fake/results.md" &&
        [ "$(grep -c '^| none |' "$tmp/fake/results.md")" = 2 ]
    }
    check "OUT/run.sh, stand-in GPU + CUDA 13 cuBLAS: tests and benchmark run, results file, exit 1" run_stand_in
  fi
  check "bench/gpu_side.py parses (python3)" python3 -m py_compile "$out/bench/gpu_side.py"
  check "scripts parse (bash -n)" bash -n "$out/run.sh" "$out/scripts/gpu-check.sh" \
    "$out/bench/gpu_vs_pytorch.sh"
  [ $failed = 0 ] && echo "selftest: all passed" || { echo "selftest: FAILED"; return 1; }
}

# ---------------------------------------------------------------------------------------------
# On the GPU machine, given only OUT.
cmd_run() {
  local out
  out=$(cd "$1" && pwd)
  local results=${2:-$out/gpu-results.md}
  local start=$SECONDS py=${GPU_CHECK_PYTHON:-python3}
  # The whole check must end within 4 minutes; the benchmark gets what the tests leave.
  local window=${GPU_CHECK_WINDOW_S:-230}
  local deadline=$(( $(date +%s) + window ))
  : > "$results" || code=2 die "cannot write $results"
  say() { echo "$*" | tee -a "$results"; }
  local host_line="$(uname -n), $(date -u +%Y-%m-%dT%H:%MZ)"

  # 1. A GPU and its driver.
  command -v nvidia-smi >/dev/null ||
    code=2 die "nvidia-smi not found: no NVIDIA driver on this machine (the GPU check needs one)"
  local smi
  smi=$(nvidia-smi -L 2>&1) || code=2 die "nvidia-smi -L failed, no usable GPU: $smi"
  grep -q '^GPU ' <<<"$smi" || code=2 die "nvidia-smi lists no GPU: $smi"

  # 2. cuBLAS 13 from PyTorch's wheels (CUDA 13 wheels: nvidia/cu13/lib; older layout:
  # nvidia/cublas/lib), on every sys.path folder.
  command -v "$py" >/dev/null || code=2 die "$py not found (set GPU_CHECK_PYTHON to PyTorch's python)"
  local found
  found=$("$py" - <<'EOF' 2>&1
import glob, os, sys
dirs = []
for base in sys.path:
    for sub in ("nvidia/cu13/lib", "nvidia/cublas/lib", "torch/lib"):
        d = os.path.join(base or ".", sub)
        if os.path.isdir(d) and d not in dirs:
            dirs.append(d)
with13 = [d for d in dirs if os.path.exists(os.path.join(d, "libcublas.so.13"))
          and os.path.exists(os.path.join(d, "libcublasLt.so.13"))]
if with13:
    print("ok " + with13[0])
else:
    other = sorted({os.path.basename(p) for d in dirs for p in glob.glob(os.path.join(d, "libcublas.so.*"))})
    try:
        import torch
        tv = f"torch {torch.__version__} (CUDA {torch.version.cuda})"
    except Exception as e:  # noqa: BLE001
        tv = f"no torch ({type(e).__name__})"
    print("missing " + tv + "; cuBLAS found: " + (", ".join(other) or "none") +
          " in " + (", ".join(dirs) or "no nvidia/*/lib folder on sys.path"))
EOF
) || true
  case "$found" in
    ok\ *) ;;
    missing*)
      code=2 die "no libcublas.so.13 + libcublasLt.so.13 in this python's nvidia wheels: ${found#missing }. The folder is built for CUDA 13: install PyTorch's CUDA 13 build (e.g. pip install torch --index-url https://download.pytorch.org/whl/cu130), or set GPU_CHECK_PYTHON to a python that has it." ;;
    *) code=2 die "looking for cuBLAS with $py failed: $found" ;;
  esac
  local cublas=${found#ok }
  export LD_LIBRARY_PATH=$cublas${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export FOUNDRY_REQUIRE_GPU=1 FOUNDRY_SOURCE_DIR=$out
  local err
  err=$("$out/bin/foundry-run" --help 2>&1 >/dev/null) ||
    code=2 die "bin/foundry-run does not start on this machine: $err. It needs what BUILD_INFO says ($(tail -1 "$out/BUILD_INFO")): Debian 12, Ubuntu 22.04 or newer."

  say "# foundry GPU check"
  say ""
  say "- run on $host_line"
  sed 's/^/- /' "$out/BUILD_INFO" | tee -a "$results"
  say ""
  say '```'
  say "$smi"
  say "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)"
  say "cuBLAS: $cublas"
  say '```'

  # 3. Every GPU test. A skip under FOUNDRY_REQUIRE_GPU=1 is a failure already; the summary is
  # checked as well.
  local t0=$SECONDS rc=0 log
  log=$(dirname "$results")/gpu-tests.log  # (and gpu-tests.log.bench.err: the benchmark's stderr)
  echo "gpu-check: running bin/foundry_gpu_tests (log: $log)"
  timeout $(( deadline - $(date +%s) )) "$out/bin/foundry_gpu_tests" > "$log" 2>&1 || rc=$?
  local passed failed skipped total
  passed=$(grep -oE '^\[  PASSED  \] [0-9]+' "$log" | grep -oE '[0-9]+$' || echo 0)
  failed=$(grep -oE '^\[  FAILED  \] [0-9]+ test' "$log" | grep -oE '[0-9]+' || echo 0)
  skipped=$(grep -oE '^\[  SKIPPED \] [0-9]+ test' "$log" | grep -oE '[0-9]+' || echo 0)
  total=$(grep -oE '[0-9]+ tests? from [0-9]+ test suites? ran' "$log" | grep -oE '^[0-9]+' || echo '?')
  local tests_ok=1
  if [ "$rc" != 0 ] || [ "$failed" != 0 ] || [ "$skipped" != 0 ] || [ "$passed" = 0 ] ||
     [ "$passed" != "$total" ]; then tests_ok=0; fi
  say ""
  say "## GPU tests"
  say ""
  say "\`FOUNDRY_REQUIRE_GPU=1 FOUNDRY_SOURCE_DIR=OUT LD_LIBRARY_PATH=<cuBLAS> bin/foundry_gpu_tests\`: $passed of $total passed, $failed failed, $skipped skipped, exit $rc$([ "$rc" = 124 ] && echo ' (cut at the time window)'), $((SECONDS - t0)) s."
  say ""
  say '```'
  # One line a test (its result and time), then the output of every test that did not pass.
  grep -E '^\[ +(OK|FAILED|SKIPPED) +\] .*\([0-9]+ ms\)$' "$log" >> "$results" || true
  if [ $tests_ok = 0 ]; then
    say "--- tests that did not pass, with their output (all of it: gpu-tests.log) ---"
    awk '/^\[ RUN/ {block = $0 "\n"; next}
         block != "" {block = block $0 "\n"}
         /^\[ +(FAILED|SKIPPED) +\] .*\([0-9]+ ms\)$/ {printf "%s", block}
         /^\[ +(OK|FAILED|SKIPPED) +\] .*\([0-9]+ ms\)$/ {block = ""}' "$log" |
      head -200 >> "$results" || true
    tail -5 "$log" >> "$results"
  fi
  say '```'

  # 4. The benchmark, in what is left of the window.
  t0=$SECONDS
  local bench_rc=0
  echo "gpu-check: benchmark ($(( deadline - $(date +%s) )) s left)"
  GPU_BENCH_DEADLINE=$deadline GPU_BENCH_PYTHON=$py \
    bash "$out/bench/gpu_vs_pytorch.sh" run "$out/bin" "$out/plans" > "$log.bench.md" 2> "$log.bench.err" || bench_rc=$?
  say ""
  tee -a "$results" < "$log.bench.md" > /dev/null
  cat "$log.bench.md"
  rm -f "$log.bench.md"
  say ""
  say "Benchmark: $((SECONDS - t0)) s, exit $bench_rc. Whole check: $((SECONDS - start)) s."
  echo "gpu-check: results in $results"
  [ $tests_ok = 1 ] || { echo "gpu-check: GPU tests FAILED ($passed of $total passed, $failed failed, $skipped skipped)" >&2; exit 1; }
  [ $bench_rc = 0 ] || { echo "gpu-check: the tests passed; a benchmark row failed or was skipped (see $results)" >&2; exit 3; }
  echo "gpu-check: all GPU tests passed; benchmark complete"
}

[ $# -ge 2 ] || usage
case $1 in
  build) [ $# -le 3 ] || usage; cmd_build "$2" "${3:-}" ;;
  selftest) [ $# -eq 2 ] || usage; cmd_selftest "$2" ;;
  run) [ $# -le 3 ] || usage; cmd_run "$2" "${3:-}" ;;
  *) usage ;;
esac
