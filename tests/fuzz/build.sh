#!/usr/bin/env bash
# Builds the libFuzzer targets (one binary per tests/fuzz/*_fuzz.cc) with Debian's clang and
# libclang-rt-14-dev, outside the CMake build (whose compiler is gcc):
#   bash tests/fuzz/build.sh [OUT_DIR] [TARGET ...]   # default build-fuzz/, every target
#   build-fuzz/import_compile_fuzz -max_len=8192 -runs=1000000 CORPUS_COPY tests/fuzz/corpus
# Needs the libraries the CMake build links (onnx, protobuf, openblas, yaml-cpp, zstd, OpenSSL's
# libcrypto for the MDS reader's shard hashes).
# Give a target a scratch copy of its corpus as the first directory: libFuzzer adds what it finds
# there. The targets share the objects of the libraries; each links its own *_fuzz.cc.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-build-fuzz}
shift || true
targets=("$@")
if (( ${#targets[@]} == 0 )); then
  for f in tests/fuzz/*_fuzz.cc; do targets+=("$(basename "$f" .cc)"); done
fi
command -v clang++ >/dev/null || { echo "build.sh: clang++ not found (apt-get install clang)"; exit 1; }
mkdir -p "$out/obj"
flags=(-std=c++20 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined
       -fno-sanitize-recover=undefined -DONNX_ML=1 -DONNX_NAMESPACE=onnx -I.)
srcs=(base/*.cc compiler/*.cc compiler/ops/*.cc kernels/cpu/*.cc passes/*.cc passes/grad/*.cc
      runtime/*.cc tests/support/compile_bytes.cc)
for t in "${targets[@]}"; do srcs+=("tests/fuzz/$t.cc"); done
objs=()
pids=()
jobs=${JOBS:-$(nproc)}
for src in "${srcs[@]}"; do
  obj="$out/obj/${src//\//_}.o"
  [[ "$src" == tests/fuzz/*_fuzz.cc ]] || objs+=("$obj")
  # Rebuilt when its source or any project header is newer (no dependency tracking here).
  if [[ ! -f "$obj" || "$src" -nt "$obj" ||
        -n "$(find base compiler kernels/cpu passes runtime tests/support -name '*.h' -newer "$obj" | head -1)" ]]; then
    clang++ "${flags[@]}" -c "$src" -o "$obj" &
    pids+=($!)
    if (( ${#pids[@]} >= jobs )); then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
  fi
done
for p in "${pids[@]}"; do wait "$p"; done
for t in "${targets[@]}"; do
  clang++ -fsanitize=fuzzer,address,undefined "${objs[@]}" "$out/obj/tests_fuzz_$t.cc.o" \
    -o "$out/$t" -lonnx -lonnx_proto -lprotobuf -lopenblas -lyaml-cpp -lzstd -lcrypto -lpthread
  echo "built $out/$t"
done
