#!/usr/bin/env bash
# The GPU check: build one self-contained folder on a build machine (CUDA toolkit, no GPU needed),
# copy it to any Linux machine with an NVIDIA GPU and its driver, run one command there, read one
# folder of results. docs/gpu-check.md is the walk-through.
#
#   scripts/gpu-check.sh build OUT [BUILD_DIR]   build machine: build for sm_90 (BUILD_DIR, default
#                                                build-bundle), fill OUT (<= 64 MiB), verify it
#   scripts/gpu-check.sh selftest OUT            build machine, no GPU: OUT is self-contained, its
#                                                tests skip, the run path works on stand-ins
#   scripts/gpu-check.sh pack OUT [ARCHIVE]      build machine: OUT without models/ in one .tar.xz
#                                                (about 7 MB; default OUT.tar.xz)
#   OUT/run.sh [RESULTS]                         GPU machine (= gpu-check.sh run OUT [RESULTS])
#   scripts/gpu-check.sh run ARCHIVE [RESULTS]   GPU machine, from a foundry checkout of the
#                                                archive's commit (its models/ stand in)
#
# OUT: bin/ (foundry-compile, foundry-run, foundry_gpu_tests: every GPU test in one binary;
# stripped; gtest linked in), lib/ (our libraries, stripped, cudart linked into the CUDA kernels';
# yaml-cpp; OpenBLAS's static library linked once into libfoundry_openblas.so; ONNX, which Debian
# ships only as a shared library, and the protobuf and zlib it links; zstd and OpenSSL's libcrypto,
# which the MDS reader links; found through the binaries'
# RPATH $ORIGIN/../lib; the C and C++ runtimes are the machine's, of the versions BUILD_INFO
# names), models/ (the fixtures the GPU tests train, the benchmark's exports, configs
# and models/mpt.py), plans/ (the benchmark's plans, compiled here, graphs gzipped), bench/,
# scripts/, run.sh, README.md (docs/gpu-check.md). The 64 MiB limit keeps the folder quick to copy.
# cuBLAS is not in it (libcublasLt alone is over 500 MB): run takes it from the GPU machine's
# PyTorch CUDA 13 wheels, and NCCL too (libnccl.so.2, loaded at run time: run sets
# FOUNDRY_NCCL_LIBRARY to the wheels' copy unless it is set; none found: the NCCL tests fail,
# saying so).
#
# run: at most GPU_CHECK_WINDOW_S (230) seconds from its start to the benchmark's end. A preflight
# (OS, glibc, driver, python and torch, cuBLAS, NCCL, ldd, the test list: a few seconds); one
# process per test suite of bin/foundry_gpu_tests (--gtest_filter=SUITE.*), each with its own
# timeout (GPU_CHECK_SUITE_TIMEOUT_S, 120, or what is left), log and XML file; each test that
# failed, crashed or hung once more alone under CUDA_LAUNCH_BLOCKING=1 FOUNDRY_CUDA_SYNC=1 (at most
# GPU_CHECK_MAX_RERUNS, 5, of GPU_CHECK_RERUN_TIMEOUT_S, 60, each); the benchmark last, in what is
# left (GPU_CHECK_BENCH=0: none). PyTorch's python: GPU_CHECK_PYTHON, else the first of python3,
# python, /usr/bin/python3, /opt/conda/bin/python and each python3.N on PATH whose sys.path has CUDA
# 13's cuBLAS. Everything goes into one new folder, RESULTS/gpu-check-YYYYMMDD-HHMMSS (RESULTS by
# default: OUT, or the archive's folder): summary.md (for bench/RESULTS.md), preflight.txt,
# logs.tar.gz (each suite's log and XML, the reruns', the benchmark's stderr).
#
# run exit status: 0 every GPU test passed and every benchmark row ran; 1 a GPU test failed,
# skipped, crashed or hung, or a suite exited non-zero; 2 nothing ran (no GPU or driver, no CUDA 13
# cuBLAS, the binaries do not start, no test listed); 3 the tests passed but a benchmark row failed
# or did not fit the time window; 4 every test that ran passed, but the suites' XML files hold
# fewer tests than --gtest_list_tests lists (the window ran out, or a suite wrote no XML).
# For tests: GPU_CHECK_TESTS_BIN replaces bin/foundry_gpu_tests (selftest's stand-in), and
# `gpu-check.sh resolve-libs < LDD_OUTPUT` is the build's library step alone.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
MAX_BYTES=$((64 * 1024 * 1024))
# What the binaries may load from OUT/lib (copied from this machine) and from the GPU machine.
FOUNDRY_LIBS="libfoundry_base.so libfoundry_compiler.so libfoundry_cpu_kernels.so libfoundry_cuda_kernels.so libfoundry_passes.so libfoundry_runtime.so libfoundry_driver.so"
BUNDLED_LIBS="$FOUNDRY_LIBS libfoundry_openblas.so libyaml-cpp.so.0.7 libonnx.so.1 libonnx_proto.so.1 libprotobuf.so.32 libz.so.1 libzstd.so.1 libcrypto.so.3"
# libstdc++ and libgcc_s: the machine's (CMakeLists.txt, FOUNDRY_BUNDLE, says why).
SYSTEM_LIBS="linux-vdso.so.1 libc.so.6 libm.so.6 libdl.so.2 librt.so.1 libpthread.so.0 ld-linux-x86-64.so.2 libstdc++.so.6 libgcc_s.so.1"
EXTERNAL_LIBS="libcuda.so.1 libcublas.so.13 libcublasLt.so.13"
BINARIES="foundry-compile foundry-run foundry_gpu_tests"
# What the GPU tests read of a fixture folder (tests/support/fixture_plans.cc, the cuda tests).
FIXTURE_FILES="config.json model.onnx inputs reference"

die() { echo "gpu-check: error: $*" >&2; exit "${code:-1}"; }
usage() { sed -n '6,14p' "$0" >&2; exit 2; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }

# ---------------------------------------------------------------------------------------------
# ldd output of the binaries on stdin -> "NAME PATH" for each of BUNDLED_LIBS, where this machine
# resolves it. Fails, naming them, on a library in none of the lists and on a bundled one that is
# missing or unresolved. One awk reads all of it: an `awk '... exit'` behind an ldd loop under
# pipefail killed the loop with SIGPIPE in about one build in four.
resolve_libs() {
  awk -v bundled="$BUNDLED_LIBS" -v others="$SYSTEM_LIBS $EXTERNAL_LIBS" '
    BEGIN {
      nb = split(bundled, b, " "); for (i = 1; i <= nb; i++) want[b[i]] = 1
      n = split(others, o, " "); for (i = 1; i <= n; i++) known[o[i]] = 1
    }
    NF == 0 { next }
    { name = $1; sub(/.*\//, "", name) }
    name in want {
      if ($2 == "=>" && $3 ~ /^\//) { if (!(name in path)) path[name] = $3 }
      else { print "gpu-check: error: " name " is not resolved here: " $0 > "/dev/stderr"; bad = bad_name[name] = 1 }
      next
    }
    !(name in known) {
      print "gpu-check: error: unexpected shared library " $1 ": link it statically or add it to BUNDLED_LIBS" > "/dev/stderr"
      bad = 1
    }
    END {
      for (i = 1; i <= nb; i++) {
        if (b[i] in path) print b[i], path[b[i]]
        else if (!bad_name[b[i]]) { print "gpu-check: error: " b[i] ": not among the binaries'"'"' libraries; update BUNDLED_LIBS" > "/dev/stderr"; bad = 1 }
      }
      exit bad
    }'
}

# ldd of DIR/bin/BINARY under env -i: the bundled libraries from DIR/lib, the C and C++ runtimes,
# and the three that the GPU machine has (printed). Prints every other line; returns 1 if any.
ldd_from_bundle() {
  local d=$1 b=$2 bad=0 listing name arrow path rest
  listing=$(env -i ldd "$d/bin/$b" 2>&1) || { echo "ldd failed (exit $?): ${listing:-no output}"; return 1; }
  while read -r name arrow path rest; do
    case " $BUNDLED_LIBS " in *" $name "*)
      [ "$(realpath -ms "$path")" = "$(realpath -ms "$d/lib/$name")" ] ||
        { echo "$name -> $path, not OUT/lib"; bad=1; }
      continue ;; esac
    case " $SYSTEM_LIBS " in *" ${name##*/} "*) continue ;; esac
    case " $EXTERNAL_LIBS " in *" $name "*) echo "  (from the GPU machine) $name $arrow $path"; continue ;; esac
    echo "unexpected: $name $arrow $path $rest"; bad=1
  done <<<"$listing"
  return $bad
}

# What a complete folder holds: every file, ELF files of sane sizes, ldd resolving from its own
# lib/, the size limit. One line per problem; returns 1 if any. The build runs it before the
# folder replaces OUT, the selftest first.
verify_bundle() {
  local d=$1 bad=0 b lib f item cfg p n listing
  problem() { echo "$*"; bad=1; }
  elf() {  # elf PATH MIN_BYTES
    local s
    [ -f "$d/$1" ] || { problem "missing: $1"; return; }
    cmp -s -n 4 "$d/$1" <(printf '\177ELF') || problem "not an ELF file: $1"
    s=$(stat -c %s "$d/$1")
    [ "$s" -ge "$2" ] || problem "$1: $s bytes, fewer than $2"
  }
  for b in $BINARIES; do
    elf "bin/$b" 65536
    [ -x "$d/bin/$b" ] || problem "not executable: bin/$b"
  done
  for lib in $BUNDLED_LIBS; do
    case $lib in
      libfoundry_cuda_kernels.so) elf "lib/$lib" $((1024 * 1024)) ;;  # its sm_90 device code
      libfoundry_openblas.so) elf "lib/$lib" $((4 * 1024 * 1024)) ;;  # OpenBLAS's kernels
      *) elf "lib/$lib" 16384 ;;
    esac
  done
  for f in BUILD_INFO run.sh scripts/gpu-check.sh bench/gpu_vs_pytorch.sh bench/gpu_side.py \
           models/__init__.py models/mpt.py; do
    [ -s "$d/$f" ] || problem "missing or empty: $f"
  done
  [ -x "$d/run.sh" ] || problem "not executable: run.sh"
  n=0
  for f in "$d"/models/fixtures/*/; do
    [ -d "$f" ] || continue
    n=$((n + 1))
    for item in config.json model.onnx inputs; do
      [ -e "$f$item" ] || problem "missing: ${f#"$d"/}$item"
    done
  done
  [ $n -gt 0 ] || problem "no fixture in models/fixtures/"
  for cfg in $(bash "$d/bench/gpu_vs_pytorch.sh" rows | awk '{print $1}'); do
    for f in "models/configs/$cfg.json" "models/exports/$cfg.onnx"; do
      [ -s "$d/$f" ] || problem "missing or empty: $f"
    done
    n=0
    for p in "$d/plans/$cfg".*.compile.log; do
      [ -e "$p" ] || continue
      p=${p%.compile.log}
      n=$((n + 1))
      [ -s "$p.plan" ] || problem "missing: ${p#"$d"/}.plan"
      gzip -t "$p.train.onnx.gz" 2>/dev/null || problem "missing or corrupt: ${p#"$d"/}.train.onnx.gz"
    done
    [ $n -gt 0 ] || problem "no plan for $cfg in plans/"
  done
  for b in $BINARIES; do
    listing=$(ldd_from_bundle "$d" "$b") || problem "ldd bin/$b: $(tr '\n' ' ' <<<"$listing")"
  done
  for f in run.sh scripts/gpu-check.sh bench/gpu_vs_pytorch.sh; do
    bash -n "$d/$f" 2>/dev/null || problem "does not parse (bash -n): $f"
  done
  n=$(du -sb "$d" | cut -f1)
  [ "$n" -le "$MAX_BYTES" ] || problem "$n bytes: over the 64 MiB limit ($MAX_BYTES)"
  return $bad
}

# ---------------------------------------------------------------------------------------------
cmd_build() {
  local dest=$1 build=${2:-$here/build-bundle}
  # ccache: paths below the checkout's parent folder hashed relative to it, so that checkouts
  # beside each other share hits.
  CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(dirname "$here")}
  export CCACHE_BASEDIR CCACHE_NOHASHDIR=1
  local launcher=()
  if command -v ccache >/dev/null; then
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  fi
  mkdir -p "$build"
  # Without MPI (an optional package): the GPU tests use none, and libmpi with its dependencies
  # would have to travel in the folder or be on the GPU machine.
  cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFOUNDRY_BUNDLE=ON -DFOUNDRY_SHARED_LIBS=ON \
    -DFOUNDRY_CUDA_ARCH=90 -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON "${launcher[@]}" > "$build/gpu-check.configure.log" ||
    die "cmake failed: $build/gpu-check.configure.log"
  # shellcheck disable=SC2086  # (BINARIES: one target a word)
  cmake --build "$build" -j "${GPU_CHECK_JOBS:-$(nproc)}" --target $BINARIES || die "the build failed (above)"

  # The folder is filled beside OUT and replaces it only once it has checked itself: a failed
  # build leaves OUT as it was, never half built.
  mkdir -p "$(dirname "$dest")"
  local parent name out
  parent=$(cd "$(dirname "$dest")" && pwd)
  name=$(basename "$dest")
  out=$(mktemp -d "$parent/.$name.building.XXXXXX")
  building=$out  # (global: the trap runs after this function)
  trap 'rm -rf "$building"' EXIT
  chmod 755 "$out"
  mkdir -p "$out"/{bin,lib,models/configs,models/exports,models/fixtures,plans,bench,scripts}
  local b lib path
  for b in $BINARIES; do strip --strip-all -o "$out/bin/$b" "$build/$b"; done

  # Shared libraries: exactly the expected ones, copied from where this machine resolves them.
  # (ldd of the build folder's binaries: their RPATH also holds $ORIGIN, where
  # libfoundry_openblas.so is. Into a file first, then read whole.)
  for b in $BINARIES; do ldd "$build/$b" || die "ldd $build/$b failed"; done > "$build/gpu-check.ldd"
  resolve_libs < "$build/gpu-check.ldd" > "$build/gpu-check.libs" ||
    die "the binaries' shared libraries, above (ldd: $build/gpu-check.ldd)"
  while read -r lib path; do cp -L "$path" "$out/lib/$lib"; done < "$build/gpu-check.libs"
  # Our own libraries carry their debug info in the build folder; the folder gets them stripped.
  for lib in $FOUNDRY_LIBS; do strip --strip-unneeded "$out/lib/$lib"; done

  # Models: the fixtures the GPU tests train, the benchmark's exports and PyTorch side.
  local f item
  for f in "$here"/models/fixtures/*/; do
    [ -d "$f/inputs" ] || continue
    mkdir -p "$out/models/fixtures/$(basename "$f")"
    for item in $FIXTURE_FILES; do
      if [ -e "$f/$item" ]; then cp -r "$f/$item" "$out/models/fixtures/$(basename "$f")/"; fi
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
  cp "$here/docs/gpu-check.md" "$out/README.md"
  # The benchmark's plans, compiled by the folder's own compiler; the graphs (mostly the causal
  # masks folded to constants) shrink about 100x in gzip.
  bash "$out/bench/gpu_vs_pytorch.sh" compile "$out/bin" "$out/plans" || die "compiling the benchmark's plans failed"
  for f in "$out"/plans/*.train.onnx; do gzip -9 "$f"; done
  cat > "$out/run.sh" <<'EOF'
#!/usr/bin/env bash
# The GPU check: a preflight, every GPU test suite, then the benchmark, in one time window; the
# results in one new folder (README.md beside this script). Usage: ./run.sh [RESULTS]   (default:
# beside this script; the folder is RESULTS/gpu-check-YYYYMMDD-HHMMSS)
exec bash "$(dirname "$0")/scripts/gpu-check.sh" run "$(dirname "$0")" "$@"
EOF
  chmod +x "$out/run.sh" "$out/scripts/gpu-check.sh" "$out/bench/gpu_vs_pytorch.sh"
  {
    echo "built $(date -u +%Y-%m-%dT%H:%MZ) on $(uname -n) from $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$here" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
    echo "CUDA $(grep -ho 'CMAKE_CUDA_COMPILER_VERSION "[0-9.]*' "$build"/CMakeFiles/*/CMakeCUDACompiler.cmake | grep -o '[0-9.]*$'), sm_90, cudart static; cuBLAS 13 from the machine"
    echo "needs from the machine: $(objdump -T "$out"/bin/* "$out"/lib/* | grep -o 'GLIBC_[0-9.]*' | sort -V | tail -1) (glibc), $(objdump -T "$out"/bin/* "$out"/lib/* | grep -o 'GLIBCXX_[0-9.]*' | sort -V | tail -1) (libstdc++.so.6)"
  } > "$out/BUILD_INFO"

  local problems
  problems=$(verify_bundle "$out") ||
    die "the new folder failed its own check; $dest is left as it was:"$'\n'"$problems"
  rm -rf "$dest"
  mv -T "$out" "$parent/$name"
  building=""
  out=$parent/$name
  local size
  size=$(du -sb "$out" | cut -f1)
  echo "gpu-check: $out: $size bytes ($(mib "$size") MiB of 64), checked"
  du -sh "$out"/* | sed 's/^/  /'
}

# ---------------------------------------------------------------------------------------------
# The folder without models/ in one archive, for a GPU machine that has a foundry checkout of the
# same commit (run ARCHIVE takes models/ from it): about 6 MB to copy instead of the whole folder.
cmd_pack() {
  local out archive problems size
  out=$(cd "$1" && pwd)
  archive=${2:-$out.tar.xz}
  problems=$(verify_bundle "$out") || die "$out is not a complete folder:"$'\n'"$problems"
  XZ_OPT=-9 tar -C "$out" --exclude=./models -cJf "$archive.part" . || die "tar -cJf $archive.part failed"
  mv -f "$archive.part" "$archive"
  size=$(stat -c %s "$archive")
  echo "gpu-check: $archive: $size bytes ($(mib "$size") MiB): $out without models/ (run it from a" \
    "checkout of $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo 'the same commit'))"
}

# ---------------------------------------------------------------------------------------------
# Without a GPU, under env -i: what a GPU run would trip over first.
cmd_selftest() {
  local out self=$here/scripts/gpu-check.sh
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
  check "the build's own check: every file, sizes, ldd, $size bytes <= 64 MiB" verify_bundle "$out"
  # ldd under env -i: OUT/lib, the C library, and the three from the GPU machine.
  local b
  for b in $BINARIES; do
    check "ldd bin/$b: only OUT/lib, libc, libcuda, libcublas*" ldd_from_bundle "$out" "$b"
  done
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
    local p
    p=$tmp/$(basename "$plan")
    cp "$plan.plan" "$p.plan" && gzip -dc "$plan.train.onnx.gz" > "$p.train.onnx" &&
      env -i "$out/bin/foundry-run" "$p" --steps 0
  }
  check "env -i bin/foundry-run (shipped plan mpt_125m.none, cpu, 0 steps)" plan_loads
  gpu_tests_skip() {
    env -i FOUNDRY_SOURCE_DIR="$out" "$out/bin/foundry_gpu_tests" > "$tmp/t" 2>&1 || { cat "$tmp/t"; return 1; }
    grep -E '^\[  SKIPPED \]|^\[  PASSED  \]|tests ran' "$tmp/t" | tail -4
    awk '/^\[ RUN/ {getline; if (tolower($0) ~ /skip/ || n < 3) print; n++}' "$tmp/t" | sed -n '1,3p'
    # Every test skipped: "[  PASSED  ] 0 tests." and a skip line per test.
    grep -q '^\[  PASSED  \] 0 tests' "$tmp/t" && ! grep -q '^\[  FAILED  \]' "$tmp/t"
  }
  check "env -i FOUNDRY_SOURCE_DIR=OUT bin/foundry_gpu_tests: every test skips" gpu_tests_skip
  gpu_tests_fail() {
    local rc=0
    env -i FOUNDRY_SOURCE_DIR="$out" FOUNDRY_REQUIRE_GPU=1 "$out/bin/foundry_gpu_tests" > "$tmp/t" 2>&1 || rc=$?
    grep -E '^\[  (PASSED|FAILED|SKIPPED) \] [0-9]+ test' "$tmp/t"
    # run counts a skip as a failure too, but a GPU test should not skip by itself.
    if grep -q '^\[  SKIPPED \] [0-9]' "$tmp/t"; then
      echo "these skip instead of failing (start them with FOUNDRY_REQUIRE_GPU(), tests/support/cuda_check.h):"
      grep -E '^\[  SKIPPED \] [A-Za-z]' "$tmp/t"
      return 1
    fi
    [ "$rc" != 0 ] && grep -q '^\[  PASSED  \] 0 tests' "$tmp/t"
  }
  check "... with FOUNDRY_REQUIRE_GPU=1: every test fails" gpu_tests_fail

  # The run path. Each run makes one folder RESULTS/gpu-check-*: results_dir prints it.
  results_dir() {
    local d=("$1"/gpu-check-*)
    if [ ${#d[@]} = 1 ] && [ -d "${d[0]}" ]; then echo "${d[0]}"; return 0; fi
    echo "not one results folder in $1: ${d[*]}"
    return 1
  }
  run_no_gpu() {
    local rc=0 r
    env -i PATH=/usr/bin:/bin "$out/run.sh" "$tmp/r0" > "$tmp/o" 2>&1 || rc=$?
    cat "$tmp/o"
    r=$(results_dir "$tmp/r0") || return 1
    [ "$rc" = 2 ] && grep -q '^gpu-check: error: no GPU' "$r/summary.md" &&
      grep -q '^## glibc' "$r/preflight.txt" && [ "$(cd "$r" && echo *)" = "logs.tar.gz preflight.txt summary.md" ]
  }
  check "env -i PATH=/usr/bin:/bin OUT/run.sh without a GPU: exit 2, says why, in RESULTS/gpu-check-*/" run_no_gpu
  check "pack OUT: one .tar.xz without models/" bash "$self" pack "$out" "$tmp/gpu-check.tar.xz"

  # Past the GPU check, on stand-ins: a fake nvidia-smi, "wheel" folders holding this machine's
  # CUDA 13 cuBLAS (or only a CUDA 12 name), python3.99 on PATH: the one python that has it.
  local cuda_lib=/usr/local/cuda/lib64
  if [ -e "$cuda_lib/libcublas.so.13" ]; then
    local fake=$tmp/fake
    mkdir -p "$fake/bin" "$fake/py13" "$fake/site13/nvidia/cu13/lib" "$fake/site12/nvidia/cublas/lib"
    printf '#!/bin/sh
case "$1" in -L) echo "GPU 0: stand-in (UUID: GPU-0)";; *) echo "stand-in, 0, 0 MiB";; esac
' > "$fake/bin/nvidia-smi"
    printf '#!/bin/sh\nPYTHONPATH=%s exec /usr/bin/python3 "$@"\n' "$fake/site13" > "$fake/py13/python3.99"
    chmod +x "$fake/bin/nvidia-smi" "$fake/py13/python3.99"
    ln -s "$cuda_lib/libcublas.so.13" "$cuda_lib/libcublasLt.so.13" "$fake/site13/nvidia/cu13/lib/"
    touch "$fake/site12/nvidia/cublas/lib/libcublas.so.12"
    # A stand-in for bin/foundry_gpu_tests (GPU_CHECK_TESTS_BIN): gtest's flags, list, log lines
    # and XML. FAKE_TESTS: what it lists; FAKE_RUNS: what it runs (default: those). *Boom
    # crashes, *Sleeps hangs, *Bad fails unless CUDA_LAUNCH_BLOCKING=1 FOUNDRY_CUDA_SYNC=1.
    cat > "$fake/gtest" <<'EOF'
#!/usr/bin/env bash
filter='*' xml='' cases='' rc=0 prev=''
for a in "$@"; do
  case $a in
    --gtest_list_tests)
      for t in $FAKE_TESTS; do [ "${t%%.*}" = "$prev" ] || echo "${t%%.*}."; prev=${t%%.*}; echo "  ${t#*.}"; done
      exit 0 ;;
    --gtest_filter=*) filter=${a#--gtest_filter=} ;;
    --gtest_output=xml:*) xml=${a#--gtest_output=xml:} ;;
  esac
done
for t in ${FAKE_RUNS:-$FAKE_TESTS}; do
  # shellcheck disable=SC2053  # (a gtest filter is a glob)
  [[ $t == $filter ]] || continue
  echo "[ RUN      ] $t"
  ok=1
  case $t in
    *Boom) echo "boom"; kill -SEGV $$ ;;
    *Sleeps) sleep 100 ;;
    *Bad) if [ "${CUDA_LAUNCH_BLOCKING:-}${FOUNDRY_CUDA_SYNC:-}" != 11 ]; then echo "fake.cc:1: Failure"; ok=0; fi ;;
  esac
  c="    <testcase name=\"${t#*.}\" status=\"run\" result=\"completed\" time=\"0\" classname=\"${t%%.*}\""
  if [ $ok = 1 ]; then echo "[       OK ] $t (0 ms)"; cases+="$c />"$'\n'
  else echo "[  FAILED  ] $t (0 ms)"; rc=1
    cases+="$c>"$'\n'"      <failure message=\"bad\" type=\"\"><![CDATA[bad]]></failure>"$'\n'"    </testcase>"$'\n'
  fi
done
if [ -n "$xml" ]; then
  printf '<?xml version="1.0" encoding="UTF-8"?>\n<testsuites name="AllTests">\n  <testsuite name="fake">\n%s  </testsuite>\n</testsuites>\n' "$cases" > "$xml"
fi
exit $rc
EOF
    chmod +x "$fake/gtest"
    fake_run() {  # fake_run NAME SRC VAR=VALUE...: run SRC into $fake/NAME; its exit status
      local name=$1 src=$2 rc=0; shift 2
      env -i HOME="$tmp" PATH="$fake/bin:$fake/py13:/usr/bin:/bin" "$@" \
        bash "$self" run "$src" "$fake/$name" > "$fake/$name.out" 2>&1 || rc=$?
      return $rc
    }
    run_cuda12() {
      local rc=0 r
      fake_run r12 "$out" PATH="$fake/bin:/usr/bin:/bin" PYTHONPATH="$fake/site12" || rc=$?
      cat "$fake/r12.out"
      r=$(results_dir "$fake/r12") || return 1
      [ $rc = 2 ] && grep -q 'libcublas.so.12' "$fake/r12.out" && grep -q 'libcublas.so.12' "$r/preflight.txt"
    }
    check "run, stand-in GPU, only a CUDA 12 cuBLAS wheel: exit 2, says so" run_cuda12
    # The real tests from the packed archive (models/ from this checkout): each fails without a
    # GPU, two are rerun; the benchmark's tables come out with each row's error; exit 1.
    run_stand_in() {
      local rc=0 r suites
      fake_run r13 "$tmp/gpu-check.tar.xz" GPU_CHECK_MAX_RERUNS=2 || rc=$?
      tail -3 "$fake/r13.out"
      r=$(results_dir "$fake/r13") || return 1
      grep -E '^(## |### |#### |\| none |\| Cuda)' "$r/summary.md"
      tar -tzf "$r/logs.tar.gz" > "$fake/r13.files"
      suites=$(grep -c '^Cuda.*\.$' "$r/preflight.txt")
      [ $rc = 1 ] && grep -q "^chosen: $fake/py13/python3.99\$" "$r/preflight.txt" &&
        grep -q '^## ldd ' "$r/preflight.txt" && grep -q '^preflight: [0-9]* s$' "$r/preflight.txt" &&
        grep -qE '([0-9]+) listed by --gtest_list_tests, \1 in the suites' "$r/summary.md" &&
        [ "$(grep -c '^| Cuda' "$r/summary.md")" = "$suites" ] &&
        [ "$(grep -c '^logs/Cuda[A-Za-z0-9]*\.xml$' "$fake/r13.files")" = "$suites" ] &&
        [ "$(grep -c '^#### .*: failed; alone with CUDA_LAUNCH_BLOCKING=1 FOUNDRY_CUDA_SYNC=1: failed' "$r/summary.md")" = 2 ] &&
        [ "$(grep -c '^logs/rerun\..*\.xml$' "$fake/r13.files")" = 2 ] &&
        [ "$(grep -c '^| none |' "$r/summary.md")" = 2 ] && grep -q '^Result: exit 1' "$r/summary.md"
    }
    check "run ARCHIVE, stand-in GPU + CUDA 13 cuBLAS: a process a suite, reruns, benchmark, exit 1" run_stand_in
    # The stand-in test binary: a crash and a hang end their own suite alone; both are counted,
    # rerun, and missing from the XML count; *Bad passes when rerun synchronous.
    run_faults() {
      local rc=0 r
      fake_run rf "$out" GPU_CHECK_TESTS_BIN="$fake/gtest" GPU_CHECK_BENCH=0 GPU_CHECK_SUITE_TIMEOUT_S=2 \
        GPU_CHECK_RERUN_TIMEOUT_S=2 FAKE_TESTS="FakeCrash.Boom FakeCrash.After FakeHang.Sleeps FakePass.A FakePass.B FakeFail.Good FakeFail.Bad" || rc=$?
      r=$(results_dir "$fake/rf") || return 1
      cat "$r/summary.md"
      tar -tzf "$r/logs.tar.gz" > "$fake/rf.files"
      [ $rc = 1 ] &&
        grep -q '^| FakeCrash | 2 | 0 | 0 | 1 | 0 | 139 (signal 11) |' "$r/summary.md" &&
        grep -q '^| FakeHang | 1 | 0 | 0 | 1 | 0 | 124 (cut at 2 s) |' "$r/summary.md" &&
        grep -q '^| FakePass | 2 | 2 | 2 | 0 | 0 | 0 |' "$r/summary.md" &&
        grep -q '^| FakeFail | 2 | 2 | 1 | 1 | 0 | 1 |' "$r/summary.md" &&
        grep -q '^#### FakeCrash.Boom: crashed; alone with .*: crashed, exit 139' "$r/summary.md" &&
        grep -q '^#### FakeHang.Sleeps: hung; alone with .*: hung, exit 124' "$r/summary.md" &&
        grep -q '^#### FakeFail.Bad: failed; alone with CUDA_LAUNCH_BLOCKING=1 FOUNDRY_CUDA_SYNC=1: passed' "$r/summary.md" &&
        grep -q "7 listed by --gtest_list_tests, 4 in the suites' XML files (not in any XML file: FakeCrash.Boom FakeCrash.After FakeHang.Sleeps)" "$r/summary.md" &&
        grep -q '^logs/FakeCrash.log$' "$fake/rf.files" && grep -q '^logs/rerun.FakeFail.Bad.xml$' "$fake/rf.files"
    }
    check "run, stand-in tests that crash, hang and fail: each suite alone, reruns, XML count, exit 1" run_faults
    run_short() {
      local rc=0 r
      fake_run rs "$out" GPU_CHECK_TESTS_BIN="$fake/gtest" GPU_CHECK_BENCH=0 \
        FAKE_TESTS="FakePass.A FakePass.B FakePass.Unreported" FAKE_RUNS="FakePass.A FakePass.B" || rc=$?
      r=$(results_dir "$fake/rs") || return 1
      grep -E "listed|^Result" "$r/summary.md"
      [ $rc = 4 ] && grep -q "3 listed by --gtest_list_tests, 2 in the suites' XML files (not in any XML file: FakePass.Unreported)" "$r/summary.md"
    }
    check "run, a listed test in no XML file: exit 4" run_short
    run_pass() {
      local rc=0 r
      fake_run rp "$out" GPU_CHECK_TESTS_BIN="$fake/gtest" GPU_CHECK_BENCH=0 FAKE_TESTS="FakePass.A FakeFail.Good" || rc=$?
      r=$(results_dir "$fake/rp") || return 1
      grep -E "listed|^Result" "$r/summary.md"
      [ $rc = 0 ] && grep -q '^Result: exit 0, all 2 GPU tests passed\.$' "$r/summary.md"
    }
    check "run, every stand-in test passes (no benchmark): exit 0" run_pass
  fi
  check "bench/gpu_side.py parses (python3)" python3 -m py_compile "$out/bench/gpu_side.py"
  if [ $failed = 0 ]; then echo "selftest: all passed"; else echo "selftest: FAILED"; return 1; fi
}

# ---------------------------------------------------------------------------------------------
# On the GPU machine, given only OUT (or the packed archive and a checkout).

# Prints "ok DIR" for the first folder on sys.path with CUDA 13's cuBLAS (the CUDA 13 wheels:
# nvidia/cu13/lib; the older layout: nvidia/cublas/lib), else "missing: " and what it found.
FIND_CUBLAS_PY='
import glob, os, sys
dirs = []
for base in sys.path:
    for sub in ("nvidia/cu13/lib", "nvidia/cublas/lib", "torch/lib"):
        d = os.path.join(base or ".", sub)
        if os.path.isdir(d) and d not in dirs:
            dirs.append(d)
ok = [d for d in dirs if os.path.exists(os.path.join(d, "libcublas.so.13"))
      and os.path.exists(os.path.join(d, "libcublasLt.so.13"))]
if ok:
    print("ok " + ok[0])
else:
    other = sorted({os.path.basename(p) for d in dirs for p in glob.glob(os.path.join(d, "libcublas.so.*"))})
    print("missing: cuBLAS found: " + (", ".join(other) or "none") + " in " +
          (", ".join(dirs) or "no nvidia/*/lib folder on sys.path"))
'
# Prints "ok PATH" for the first libnccl.so.2 in a folder on sys.path, else "missing: " and where
# it looked. PyTorch's nvidia wheels keep it in nvidia/nccl/lib, for CUDA 13 too (whose other
# libraries moved to nvidia/cu13/lib); then nvidia/cu13/lib, nvidia/cu12/lib, torch/lib. foundry
# loads NCCL at run time (runtime/nccl_communicator.h): FOUNDRY_NCCL_LIBRARY.
FIND_NCCL_PY='
import os, sys
dirs = []
for base in sys.path:
    for sub in ("nvidia/nccl/lib", "nvidia/cu13/lib", "nvidia/cu12/lib", "torch/lib"):
        d = os.path.join(base or ".", sub)
        if os.path.isdir(d) and d not in dirs:
            dirs.append(d)
ok = [os.path.join(d, "libnccl.so.2") for d in dirs if os.path.exists(os.path.join(d, "libnccl.so.2"))]
if ok:
    print("ok " + ok[0])
else:
    print("missing: no libnccl.so.2 in " + (", ".join(dirs) or "no nvidia/*/lib or torch/lib folder on sys.path"))
'
# The driver asked directly (no nvidia-smi needed), then torch; "gpus=N" for the GPU check.
INFO_PY='
import ctypes, sys
print("python: %s %s" % (sys.executable, sys.version.split()[0]))
try:
    cu = ctypes.CDLL("libcuda.so.1")
    rc = cu.cuInit(0)
    if rc != 0:
        raise OSError("cuInit returned %d" % rc)
    n, v = ctypes.c_int(0), ctypes.c_int(0)
    cu.cuDriverGetVersion(ctypes.byref(v))
    cu.cuDeviceGetCount(ctypes.byref(n))
    names = []
    for i in range(n.value):
        dev, buf = ctypes.c_int(0), ctypes.create_string_buffer(256)
        cu.cuDeviceGet(ctypes.byref(dev), i)
        cu.cuDeviceGetName(buf, 256, dev)
        names.append(buf.value.decode())
    print("driver: libcuda.so.1, CUDA %d.%d, %d GPU(s): %s" %
          (v.value // 1000, v.value % 1000 // 10, n.value, ", ".join(names)))
    print("gpus=%d" % n.value)
except Exception as e:  # noqa: BLE001
    print("driver: libcuda.so.1 does not load or start: %s" % e)
    print("gpus=0")
try:
    import torch
    print("torch: %s, CUDA %s, torch.cuda.is_available() %s" %
          (torch.__version__, torch.version.cuda, torch.cuda.is_available()))
except Exception as e:  # noqa: BLE001
    print("torch: none (%s: %s)" % (type(e).__name__, e))
'
UNPACK_PY='
import sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    t.extractall(sys.argv[2], **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))
'

# PyTorch's python, the candidates in order: GPU_CHECK_PYTHON alone when set, else python3,
# python, /usr/bin/python3, /opt/conda/bin/python and each python3.N on PATH; each path once.
python_candidates() {
  if [ -n "${GPU_CHECK_PYTHON:-}" ]; then echo "$GPU_CHECK_PYTHON"; return 0; fi
  local c dir seen=" "
  local -a all=()
  for c in python3 python /usr/bin/python3 /opt/conda/bin/python; do
    if c=$(command -v "$c"); then all+=("$c"); fi
  done
  local IFS=:
  for dir in $PATH; do
    for c in "$dir"/python3.[0-9]*; do
      case $c in *-config) continue ;; esac
      if [ -f "$c" ] && [ -x "$c" ]; then all+=("$c"); fi
    done
  done
  for c in "${all[@]}"; do
    case $seen in *" $c "*) ;; *) seen+="$c "; echo "$c" ;; esac
  done
}

# "STATUS SUITE.TEST" for each test one gtest process reported: from its XML file when it wrote
# one (passed, failed, skipped), else from its log, where a test that started and never ended
# crashed, or hung when `timeout` cut it (RC 124 or 137).
outcomes() {  # outcomes XML LOG RC
  if [ -s "$1" ]; then
    awk '
      function attr(k) {
        if (match($0, " " k "=\"[^\"]*\"")) return substr($0, RSTART + length(k) + 3, RLENGTH - length(k) - 4)
        return ""
      }
      function emit() { if (name != "") print st, cls "." name; name = "" }
      /<testcase / {
        emit(); name = attr("name"); cls = attr("classname")
        st = (attr("result") == "skipped" || attr("status") == "notrun") ? "skipped" : "passed"
        if ($0 ~ /\/>[ \t]*$/) emit()
        next
      }
      /<failure/ && name != "" { st = "failed" }
      /<skipped/ && name != "" && st != "failed" { st = "skipped" }
      /<\/testcase>/ { emit() }
      END { emit() }' "$1"
  else
    awk -v rc="$3" '
      $1 == "[" && $2 == "RUN" && $3 == "]" { cur = $4; next }
      $1 == "[" && $3 == "]" && $NF == "ms)" {
        if ($2 == "OK") print "passed", $4; else if ($2 == "FAILED") print "failed", $4
        else if ($2 == "SKIPPED") print "skipped", $4
        if ($4 == cur) cur = ""
      }
      END { if (cur != "") print (rc == 124 || rc == 137 ? "hung" : "crashed"), cur }' "$2"
  fi
}
tally() {  # tally OUTCOMES: "PASSED FAILED SKIPPED" (failed: also crashed and hung)
  awk '$1 == "passed" {p++} $1 ~ /^(failed|crashed|hung)$/ {f++} $1 == "skipped" {s++}
       END {print p + 0, f + 0, s + 0}' "$1"
}
# A test's lines in a gtest log, from its [ RUN ] to its result (or the end), at most MAX.
test_output() {  # test_output LOG NAME MAX
  awk -v t="$2" -v max="$3" -v file="${1##*/}" '
    !on && !done && $0 == "[ RUN      ] " t { on = 1 }
    on { if (n < max) print; n++ }
    on && index($0, "] " t " (") > 0 && $NF == "ms)" { on = 0; done = 1 }
    END { if (n > max) printf "... %d more lines: logs/%s\n", n - max, file }' "$1"
}
exit_text() {  # exit_text RC TIMEOUT_S
  case $1 in
    124|137) echo "$1 (cut at $2 s)" ;;
    0|1) echo "$1" ;;
    *) if [ "$1" -gt 128 ]; then echo "$1 (signal $(( $1 - 128 )))"; else echo "$1"; fi ;;
  esac
}
file_name() { local s=${1//[^A-Za-z0-9._-]/_}; echo "$s"; }

# After any end of a run: the logs packed into one file, so that the results folder is three
# files, easy to copy back whole.
on_run_exit() { local s=$?; finish_run || true; exit $s; }
finish_run() {
  [ -z "${run_unpacked:-}" ] || rm -rf "$run_unpacked"
  [ -n "${run_res:-}" ] && [ -d "$run_res/logs" ] || return 0
  tar -czf "$run_res/logs.tar.gz" -C "$run_res" logs && rm -rf "$run_res/logs"
  echo "gpu-check: results in $run_res: $(cd "$run_res" && echo *)"
}

cmd_run() {
  local src=$1 start=$SECONDS
  local window=${GPU_CHECK_WINDOW_S:-230} suite_timeout=${GPU_CHECK_SUITE_TIMEOUT_S:-120}
  local rerun_timeout=${GPU_CHECK_RERUN_TIMEOUT_S:-60} max_reruns=${GPU_CHECK_MAX_RERUNS:-5}
  local deadline=$(( $(date +%s) + window ))
  [ -e "$src" ] || code=2 die "$src: no such folder or archive"
  local root=${2:-}
  if [ -z "$root" ]; then if [ -d "$src" ]; then root=$src; else root=$(dirname "$src"); fi; fi
  mkdir -p "$root" || code=2 die "cannot make $root"
  run_res=$(cd "$root" && pwd)/gpu-check-$(date -u +%Y%m%d-%H%M%S)
  mkdir "$run_res" "$run_res/logs" || code=2 die "cannot make $run_res"
  trap on_run_exit EXIT
  local res=$run_res logs=$run_res/logs
  local summary=$res/summary.md pre=$res/preflight.txt
  say() { echo "$*" | tee -a "$summary"; }
  stop() { echo "gpu-check: error: $*" | tee -a "$summary" >&2; exit 2; }
  echo "gpu-check: window $window s; results: $res"

  # 1. Preflight: what this machine has, in preflight.txt; the reasons nothing can run, exit 2.
  {
    echo "# gpu-check preflight, $(uname -n), $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo; echo "## OS"; uname -srm; sed -n 's/^PRETTY_NAME=//p' /etc/os-release 2>/dev/null || true
    echo; echo "## glibc"; getconf GNU_LIBC_VERSION 2>&1 || true
    echo; echo "## driver"
    cat /proc/driver/nvidia/version 2>/dev/null || echo "/proc/driver/nvidia/version: none"
  } >> "$pre"
  local smi="" has_smi=0
  if command -v nvidia-smi >/dev/null; then
    has_smi=1
    timeout 10 nvidia-smi >> "$pre" 2>&1 || echo "(nvidia-smi: exit $?)" >> "$pre"
    smi=$(timeout 10 nvidia-smi -L 2>&1) || smi="nvidia-smi -L failed: $smi"
  else
    echo "nvidia-smi: not on PATH (optional: the driver is asked through libcuda.so.1 below)" >> "$pre"
  fi
  { echo; echo "## python: the first with CUDA 13's cuBLAS on its sys.path"; } >> "$pre"
  local py="" py_any="" cublas="" c r tried=""
  while read -r c; do
    r=$(timeout 10 "$c" -c "$FIND_CUBLAS_PY" 2>&1) || r="does not run (exit $?): $r"
    echo "$c: $r" >> "$pre"
    case $r in ok\ *) py=$c; cublas=${r#ok }; break ;; esac
    case $r in missing*) [ -n "$py_any" ] || py_any=$c ;; esac
    tried+="; $c: ${r#missing: }"
  done < <(python_candidates)
  [ -z "$py" ] || echo "chosen: $py${GPU_CHECK_PYTHON:+ (GPU_CHECK_PYTHON)}" >> "$pre"
  py_any=${py:-$py_any}
  local info=$logs/info.txt
  if [ -n "$py_any" ]; then
    timeout 20 "$py_any" -c "$INFO_PY" > "$info" 2>&1 || echo "(exit $?)" >> "$info"
  else
    printf 'driver: not asked (no python found)\ngpus=0\ntorch: none (no python found)\n' > "$info"
  fi
  cat "$info" >> "$pre"

  local out
  if [ -d "$src" ]; then
    out=$(cd "$src" && pwd)
  else
    [ -n "$py_any" ] || stop "no python here to unpack $src with"
    run_unpacked=$(mktemp -d -t gpu-check.XXXXXX)
    "$py_any" -c "$UNPACK_PY" "$src" "$run_unpacked" >> "$pre" 2>&1 || stop "cannot unpack $src (preflight.txt)"
    [ -e "$run_unpacked/models" ] || ln -s "$here/models" "$run_unpacked/models"
    [ -x "$run_unpacked/bin/foundry_gpu_tests" ] || stop "$src is not a packed GPU check folder"
    [ -d "$run_unpacked/models/fixtures" ] ||
      stop "$src has no models/ and $here/models/fixtures is missing: run it from a foundry checkout of the commit it was built from"
    out=$run_unpacked
    echo "unpacked $src into $out; models/ -> $here/models" >> "$pre"
  fi
  local tests=${GPU_CHECK_TESTS_BIN:-$out/bin/foundry_gpu_tests}

  if [ $has_smi = 1 ]; then
    grep -q '^GPU ' <<<"$smi" || stop "nvidia-smi lists no GPU, no usable GPU: $smi"
  else
    grep -qx 'gpus=[1-9][0-9]*' "$info" ||
      stop "no GPU: nvidia-smi is not on PATH, and $(sed -n 's/^driver: //p' "$info" | cut -c1-300)"
  fi
  [ -n "$py" ] || stop "no libcublas.so.13 + libcublasLt.so.13 in any python's nvidia wheels (${tried#; }${tried:-no python found: tried python3, python, /usr/bin/python3, /opt/conda/bin/python, python3.N on PATH}). The folder is built for CUDA 13: install PyTorch's CUDA 13 build (e.g. pip install torch --index-url https://download.pytorch.org/whl/cu130), or set GPU_CHECK_PYTHON to a python that has it."
  export LD_LIBRARY_PATH=$cublas${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export FOUNDRY_REQUIRE_GPU=1 FOUNDRY_SOURCE_DIR=$out
  # NCCL: the same python's wheels; without it the NCCL tests fail and say why.
  local nccl
  if [ -n "${FOUNDRY_NCCL_LIBRARY:-}" ]; then nccl="ok $FOUNDRY_NCCL_LIBRARY (FOUNDRY_NCCL_LIBRARY, as given)"
  else nccl=$(timeout 10 "$py" -c "$FIND_NCCL_PY" 2>&1) || nccl="missing: the finder failed (exit $?): $nccl"; fi
  { echo; echo "## NCCL (FOUNDRY_NCCL_LIBRARY)"; echo "$nccl"; } >> "$pre"
  case $nccl in
    ok\ *) [ -n "${FOUNDRY_NCCL_LIBRARY:-}" ] || export FOUNDRY_NCCL_LIBRARY=${nccl#ok } ;;
    *) nccl="$nccl (the NCCL tests will fail)" ;;
  esac
  { echo; echo "## ldd ${tests#"$out"/} (LD_LIBRARY_PATH=$cublas)"; ldd "$tests" 2>&1 || true; } >> "$pre"
  local err
  err=$("$out/bin/foundry-run" --help 2>&1 >/dev/null) ||
    stop "bin/foundry-run does not start on this machine: $err. It needs what BUILD_INFO says ($(tail -1 "$out/BUILD_INFO")): Debian 12, Ubuntu 22.04 or newer."
  local listing=$logs/gtest-list.txt list=$logs/tests.txt
  timeout 20 "$tests" --gtest_list_tests > "$listing" 2>&1 < /dev/null ||
    stop "${tests#"$out"/} --gtest_list_tests failed: $(tail -3 "$listing" | tr '\n' ' ')"
  { echo; echo "## tests (${tests#"$out"/} --gtest_list_tests)"; cat "$listing"; } >> "$pre"
  # Suites are the lines "Suite." (gtest may add "  # TypeParam ..."), their tests the indented ones.
  awk '$1 ~ /\.$/ && /^[^ ]/ {s = $1; next} /^  [^ ]/ && s != "" {print s $1}' "$listing" > "$list"
  local -a suites=()
  mapfile -t suites < <(awk '$1 ~ /\.$/ && /^[^ ]/ {print $1}' "$listing")
  local listed
  listed=$(wc -l < "$list")
  [ "$listed" -gt 0 ] || stop "${tests#"$out"/} lists no tests"
  local pre_s=$((SECONDS - start))
  echo "preflight: $pre_s s" >> "$pre"
  echo "gpu-check: preflight $pre_s s: python $py, cuBLAS $cublas, $listed tests in ${#suites[@]} suites"

  say "# foundry GPU check"
  say ""
  say "- run on $(uname -n), $(date -u +%Y-%m-%dT%H:%MZ) (results: $(basename "$res"))"
  sed 's/^/- /' "$out/BUILD_INFO" | tee -a "$summary"
  say "- $(grep '^torch:' "$info" || echo 'torch: ?'); python $py$([ -z "${GPU_CHECK_PYTHON:-}" ] || echo ' (GPU_CHECK_PYTHON)')"
  say "- cuBLAS: $cublas"
  say "- NCCL: ${nccl#ok }"
  say ""
  say '```'
  if [ $has_smi = 1 ]; then
    say "$smi"
    say "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || true)"
  fi
  say "$(grep '^driver:' "$info" || true)"
  say '```'

  # 2. One process a suite, each with its own timeout, log and XML: a fault or a hang ends that
  # suite alone.
  local t_tests=$SECONDS suite f left t rc t0 n_list n_xml p fl sk rows="" suites_ok=1
  : > "$logs/outcomes.txt"; : > "$logs/seen.txt"; : > "$logs/lines.txt"
  for suite in "${suites[@]}"; do
    f=$(file_name "${suite%.}")
    n_list=$(awk -v s="$suite" 'index($0, s) == 1 {n++} END {print n + 0}' "$list")
    left=$(( deadline - $(date +%s) ))
    if [ "$left" -lt 5 ]; then
      awk -v s="$suite" 'index($0, s) == 1 {print "notrun", $0}' "$list" >> "$logs/outcomes.txt"
      rows+="| ${suite%.} | $n_list | 0 | 0 | 0 | 0 | not run: the window was over | 0 |"$'\n'
      echo "gpu-check: ${suite%.}: not run (the window was over)"
      continue
    fi
    t=$(( left < suite_timeout ? left : suite_timeout ))
    rc=0; t0=$SECONDS
    timeout -k 5 "$t" "$tests" --gtest_filter="$suite*" --gtest_output="xml:$logs/$f.xml" \
      > "$logs/$f.log" 2>&1 < /dev/null || rc=$?
    outcomes "$logs/$f.xml" "$logs/$f.log" "$rc" > "$logs/$f.outcomes"
    n_xml=0
    if [ -s "$logs/$f.xml" ]; then
      n_xml=$(wc -l < "$logs/$f.outcomes")
      awk '{print $2}' "$logs/$f.outcomes" >> "$logs/seen.txt"
    fi
    cat "$logs/$f.outcomes" >> "$logs/outcomes.txt"
    grep -E '^\[ +(OK|FAILED|SKIPPED) +\] .*\([0-9]+ ms\)$' "$logs/$f.log" >> "$logs/lines.txt" || true
    read -r p fl sk < <(tally "$logs/$f.outcomes")
    [ "$rc" = 0 ] || suites_ok=0
    rows+="| ${suite%.} | $n_list | $n_xml | $p | $fl | $sk | $(exit_text "$rc" "$t") | $((SECONDS - t0)) |"$'\n'
    echo "gpu-check: ${suite%.}: $p of $n_list passed, $fl failed, $sk skipped, exit $rc, $((SECONDS - t0)) s"
  done
  rm -f "$logs"/*.outcomes
  local n_pass n_fail n_skip n_seen missing count_ok=1 tests_ok=1
  read -r n_pass n_fail n_skip < <(tally "$logs/outcomes.txt")
  # Did every listed test run? Counted in the XML files alone: a suite that died wrote none.
  n_seen=$(wc -l < "$logs/seen.txt")
  missing=$(awk -v f="$logs/seen.txt" 'BEGIN {while ((getline l < f) > 0) seen[l] = 1} !($0 in seen)' "$list")
  if [ "$n_seen" != "$listed" ] || [ -n "$missing" ]; then count_ok=0; fi
  if [ $suites_ok = 0 ] || [ "$n_fail" != 0 ] || [ "$n_skip" != 0 ]; then tests_ok=0; fi

  # 3. Each test that failed, crashed or hung, once more alone and synchronous: the CUDA error
  # surfaces at the kernel that caused it, and FOUNDRY_CUDA_SYNC=1 names the node.
  local notpassed=$logs/notpassed.md st name rrc rst n_rerun=0 n_notpassed=0 rf
  : > "$notpassed"
  while read -r st name; do
    n_notpassed=$((n_notpassed + 1))
    f=$(file_name "${name%%.*}"); rf=rerun.$(file_name "$name")
    local title="#### $name: $st" rerun=0
    case $st in
      failed|crashed|hung)
        left=$(( deadline - $(date +%s) ))
        if [ $n_rerun -ge "$max_reruns" ]; then title+="; not rerun (GPU_CHECK_MAX_RERUNS=$max_reruns)"
        elif [ "$left" -lt 5 ]; then title+="; not rerun (the window was over)"
        else
          rerun=1; n_rerun=$((n_rerun + 1))
          t=$(( left < rerun_timeout ? left : rerun_timeout ))
          rrc=0; t0=$SECONDS
          CUDA_LAUNCH_BLOCKING=1 FOUNDRY_CUDA_SYNC=1 timeout -k 5 "$t" "$tests" --gtest_filter="$name" \
            --gtest_output="xml:$logs/$rf.xml" > "$logs/$rf.log" 2>&1 < /dev/null || rrc=$?
          rst=$(outcomes "$logs/$rf.xml" "$logs/$rf.log" "$rrc" | awk -v t="$name" '$2 == t {print $1}')
          title+="; alone with CUDA_LAUNCH_BLOCKING=1 FOUNDRY_CUDA_SYNC=1: ${rst:-no result}, exit $(exit_text "$rrc" "$t"), $((SECONDS - t0)) s"
          echo "gpu-check: rerun $name: ${rst:-no result}, exit $rrc"
        fi ;;
    esac
    {
      echo; echo "$title"; echo; echo '```'
      test_output "$logs/$f.log" "$name" 20
      if [ $rerun = 1 ]; then echo "--- rerun alone (logs/$rf.log) ---"; test_output "$logs/$rf.log" "$name" 40; fi
      echo '```'
    } >> "$notpassed"
  done < <(awk '$1 != "passed" && $1 != "notrun"' "$logs/outcomes.txt")

  local count_line="$listed listed by --gtest_list_tests, $n_seen in the suites' XML files"
  if [ $count_ok = 0 ]; then
    count_line+=" (not in any XML file: $(awk 'NR <= 20 {printf "%s%s", (NR > 1 ? " " : ""), $0} NR == 21 {printf " ..."}' <<<"$missing"))"
  fi
  say ""
  say "## GPU tests"
  say ""
  say "\`FOUNDRY_REQUIRE_GPU=1 FOUNDRY_SOURCE_DIR=OUT LD_LIBRARY_PATH=<cuBLAS> bin/foundry_gpu_tests --gtest_filter=SUITE.*\`, one process a suite (each cut at $suite_timeout s or the window): $n_pass passed, $n_fail failed, $n_skip skipped; $count_line; $((SECONDS - t_tests)) s."
  say ""
  say "| suite | listed | in XML | passed | failed | skipped | exit | s |"
  say "|---|---:|---:|---:|---:|---:|---|---:|"
  printf '%s' "$rows" | tee -a "$summary"
  { echo; echo '```'; cat "$logs/lines.txt"; echo '```'; } >> "$summary"
  if [ $n_notpassed -gt 0 ]; then
    say ""
    say "### Did not pass: $n_notpassed (each failed, crashed or hung test rerun once alone, at most $max_reruns)"
    tee -a "$summary" < "$notpassed" > /dev/null
  fi

  # 4. The benchmark, in what is left of the window.
  local bench_rc=0 t_b=$SECONDS
  if [ "${GPU_CHECK_BENCH:-1}" = 0 ]; then
    say ""
    say "Benchmark: not run (GPU_CHECK_BENCH=0)."
  else
    left=$(( deadline - $(date +%s) ))
    echo "gpu-check: benchmark ($left s left)"
    [ "$left" -gt 0 ] || left=0
    GPU_BENCH_DEADLINE=$deadline GPU_BENCH_PYTHON=$py timeout -k 5 $((left + 30)) \
      bash "$out/bench/gpu_vs_pytorch.sh" run "$out/bin" "$out/plans" \
      > "$logs/bench.md" 2> "$logs/bench.err" < /dev/null || bench_rc=$?
    say ""
    tee -a "$summary" < "$logs/bench.md"
    say ""
    say "Benchmark: $((SECONDS - t_b)) s, exit $bench_rc (its stderr: logs/bench.err)."
  fi
  say "Whole check: $((SECONDS - start)) s of a $window s window, the preflight $pre_s s."
  say ""
  if [ $tests_ok = 0 ]; then
    say "Result: exit 1, GPU tests FAILED ($n_pass of $listed passed, $n_fail failed, $n_skip skipped; $count_line)."
    exit 1
  fi
  if [ $count_ok = 0 ]; then
    say "Result: exit 4, every test that ran passed, but not every listed test ran ($count_line)."
    exit 4
  fi
  if [ $bench_rc != 0 ]; then
    say "Result: exit 3, all $listed GPU tests passed; a benchmark row failed or was skipped."
    exit 3
  fi
  say "Result: exit 0, all $listed GPU tests passed$([ "${GPU_CHECK_BENCH:-1}" = 0 ] || echo '; benchmark complete')."
}

case ${1:-} in
  resolve-libs) [ $# -eq 1 ] || usage; resolve_libs; exit ;;
esac
[ $# -ge 2 ] || usage
case $1 in
  build) [ $# -le 3 ] || usage; cmd_build "$2" "${3:-}" ;;
  selftest) [ $# -eq 2 ] || usage; cmd_selftest "$2" ;;
  pack) [ $# -le 3 ] || usage; cmd_pack "$2" "${3:-}" ;;
  run) [ $# -le 3 ] || usage; cmd_run "$2" "${3:-}" ;;
  *) usage ;;
esac
