#!/usr/bin/env bash
# Installs everything foundry needs from Debian's packages. Safe to re-run: apt-get skips what is
# already installed, and nothing else is touched.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libonnx-dev libprotobuf-dev protobuf-compiler
  libcli11-dev libgtest-dev libgmock-dev
  libopenblas-dev
  libzstd-dev libxxhash-dev libssl-dev
  nlohmann-json3-dev libyaml-cpp-dev
  python3-torch python3-onnx python3-numpy python3-zstandard python3-xxhash
  libonnx-testdata
  bc ccache
  openmpi-bin libopenmpi-dev
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages already installed"
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
