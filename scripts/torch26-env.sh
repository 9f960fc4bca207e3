#!/usr/bin/env bash
# The PyTorch 2.6 side environment: Debian 13 ("trixie") in a chroot, with Debian's own PyTorch
# (python3-torch 2.6), ONNX, ONNX Runtime and NumPy. Debian 12 packages PyTorch 1.13 only; the
# comparisons against PyTorch 2.6 in bench/ (attention_vs_torch26.sh, step_vs_torch26.sh) and the
# torch 2.6 fixtures and references in models/ (make_fixtures.py --dynamo, amp_reference.py) run
# their PyTorch side in here.
#
#   scripts/torch26-env.sh setup [ROOT] [--onnxscript FILE]
#       Builds the chroot at ROOT with debootstrap from the Debian mirror this machine's apt uses
#       (about 1.6 GB, about 6 minutes), or completes one built before. Needs root and the
#       network to that mirror. Running it again installs only what is missing.
#   scripts/torch26-env.sh run [CMD ARGS...]
#       Runs CMD (default python3) inside, in the current folder. This repository, the current
#       folder's git checkout, the current folder and /tmp are bind-mounted at their own paths (in
#       a private mount namespace: nothing stays mounted afterwards), so paths mean the same inside
#       and out. The environment is cleared (PATH, HOME=/tmp, LANG, PYTHONPATH, PYTHONUNBUFFERED);
#       pass variables as `run env NAME=VALUE CMD ...`. Needs root.
#   scripts/torch26-env.sh status
#       Prints ROOT and the versions inside; exit status 0 ready, 1 not set up. Needs no root.
#
# ROOT: FOUNDRY_TORCH26_ROOT, default /opt/foundry-torch26 (run and status read only the variable,
# so set it when setup was given another ROOT).
#
# onnxscript: torch.onnx.export(dynamo=True), the exporter PyTorch uses by default today, is
# written on top of onnxscript, which Debian 13 does not package (nor ml_dtypes, which onnxscript
# imports). setup --onnxscript FILE (or FOUNDRY_TORCH26_ONNXSCRIPT=FILE) installs it from a release
# you downloaded: the PyPI source archive onnxscript-VERSION.tar.gz, its wheel, or a .tar.gz of
# the onnxscript/ package folder named onnxscript-VERSION.tar.gz (0.2.x goes with torch 2.6; 0.2.5
# is the one tested). It is pure Python and is unpacked into ROOT/opt/py, with a small stand-in
# for ml_dtypes (its dtype names as NumPy dtypes of the right size: enough for fp32 and integer
# models; no bf16/fp8 arithmetic). Without it everything else works, and
# `models/make_fixtures.py --dynamo` stops saying onnxscript is missing. (Debian's onnxruntime
# registers ONNX's operator schemas a second time: in one process, import onnxscript or
# onnx.reference before onnxruntime, never after.)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
self=$repo/scripts/torch26-env.sh
root=${FOUNDRY_TORCH26_ROOT:-/opt/foundry-torch26}
suite=trixie
# What bench/ and models/ import inside (torch, onnx, numpy; onnxruntime to run exports), the
# OpenBLAS the step benchmark reports, what onnxscript imports besides NumPy and ONNX, and
# libre2-11: onnxruntime depends on the virtual package libre2-11-absl20240722, which debootstrap
# cannot resolve by itself.
packages=(python3 python3-torch python3-onnx python3-onnxruntime libre2-11 python3-numpy
  libopenblas0-pthread python3-typing-extensions python3-packaging python3-yaml)

cleanup=()
trap 'rm -rf "${cleanup[@]}"' EXIT
die() { echo "torch26-env: error: $*" >&2; exit 1; }
usage() { sed -n '8,22p' "$self" >&2; exit 2; }
need_root() { [[ $(id -u) == 0 ]] || die "$1 needs root (it uses chroot and mount); run it as root or with sudo"; }

# Version of installed package $1 inside ROOT (read from dpkg's status file), or nothing.
pkg_version() {
  awk -v p="$1" '
    /^Package: / { name = $2; ok = 0; ver = "" }
    /^Status: / { ok = ($0 ~ / installed$/) }
    /^Version: / { ver = $2 }
    /^$/ { if (name == p && ok && ver != "") { found = ver; exit } name = "" }
    END { if (found == "" && name == p && ok && ver != "") found = ver; if (found != "") print found }' \
    "$root/var/lib/dpkg/status" 2>/dev/null
}

onnxscript_version() {
  local meta
  for meta in "$root"/opt/py/onnxscript-*.dist-info/METADATA; do
    [[ -f $meta && -f $root/opt/py/onnxscript/__init__.py ]] || continue
    awk '/^Version: / { print $2; exit }' "$meta"
    return
  done
}

# Built: debootstrap finished (it removes ROOT/debootstrap last) and torch is installed.
is_ready() { [[ -x $root/usr/bin/python3 && ! -d $root/debootstrap && -n $(pkg_version python3-torch) ]]; }

cmd_status() {
  if ! is_ready; then
    echo "torch26-env: not set up at $root (scripts/torch26-env.sh setup, as root)"
    return 1
  fi
  local os p v line=""
  for p in python3-torch python3-onnx python3-onnxruntime; do
    v=$(pkg_version "$p")
    line+="$p ${v:-missing (run setup again)}, "
  done
  os=$(onnxscript_version)
  echo "torch26-env: ready at $root: ${line}onnxscript ${os:-not installed (dynamo exports need it: setup --onnxscript FILE)}"
}

# The Debian mirror this machine's apt uses: deb822 sources first, then sources.list; never the
# security archive.
find_mirror() {
  local m
  m=$(grep -h '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -v security | head -1 || true)
  [[ -n $m ]] || m=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
    awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i !~ /^\[/ && $i !~ /\]$/) { if ($i !~ /security/) print $i; break } }' | head -1)
  [[ -n $m ]] || die "no Debian mirror in /etc/apt/sources.list.d/*.sources or /etc/apt/sources.list; is this a Debian machine?"
  echo "$m"
}

# Installs the onnxscript release in $1 into ROOT/opt/py (see the header).
install_onnxscript() {
  local file=$1 tmp dir version
  [[ -f $file ]] || die "--onnxscript $file: no such file"
  tmp=$(mktemp -d)
  cleanup+=("$tmp")
  case $file in
    *.whl | *.zip) python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$file" "$tmp" ;;
    *.tar.gz | *.tgz | *.tar.xz | *.tar.bz2 | *.tar) tar -xf "$file" -C "$tmp" ;;
    *) die "--onnxscript $file: not a .tar.gz, .tgz, .tar.xz, .whl or .zip" ;;
  esac || die "--onnxscript $file: could not unpack it"
  dir=$(find "$tmp" -maxdepth 3 -type f -path '*/onnxscript/__init__.py' -printf '%h\n' | sort | head -1)
  [[ -n $dir ]] || die "--onnxscript $file: holds no onnxscript/__init__.py; give onnxscript's source archive or wheel"
  # The version: the archive's own metadata (PKG-INFO, a wheel's METADATA), else the file's name.
  version=$(find "$tmp" -maxdepth 3 -type f \( -name PKG-INFO -o -path '*.dist-info/METADATA' \) \
    -exec awk '/^Version: / { print $2; exit }' {} \; | head -1)
  [[ -n $version ]] || version=$(basename "$file" | sed -n -E 's/^onnxscript-([0-9][0-9A-Za-z.+]*)(-py3.*)?\.(tar\.gz|tgz|tar\.xz|tar\.bz2|tar|whl|zip)$/\1/p')
  [[ -n $version ]] || die "--onnxscript $file: cannot tell its version (no PKG-INFO); name the file onnxscript-VERSION.tar.gz"
  rm -rf "$root/opt/py/onnxscript" "$root"/opt/py/onnxscript-*.dist-info
  mkdir -p "$root/opt/py/onnxscript-$version.dist-info"
  cp -a "$dir" "$root/opt/py/onnxscript"
  # torch and onnxscript ask importlib.metadata for onnxscript's version.
  printf 'Metadata-Version: 2.1\nName: onnxscript\nVersion: %s\n' "$version" \
    > "$root/opt/py/onnxscript-$version.dist-info/METADATA"
  rm -rf "$tmp"
  echo "torch26-env: onnxscript $version installed in $root/opt/py"
}

# ml_dtypes stand-in for onnxscript (not packaged by Debian 13; see the header).
install_ml_dtypes_standin() {
  [[ -f $root/opt/py/ml_dtypes/__init__.py ]] && return
  mkdir -p "$root/opt/py/ml_dtypes"
  cat > "$root/opt/py/ml_dtypes/__init__.py" << 'PY'
"""Stand-in for ml_dtypes (scripts/torch26-env.sh): each name is a distinct NumPy structured
dtype of the right size, which is all onnxscript needs of them for fp32 and integer models."""
import numpy as _np

_SIZES = {"bfloat16": 2, "float8_e4m3fn": 1, "float8_e4m3fnuz": 1, "float8_e5m2": 1,
          "float8_e5m2fnuz": 1, "float8_e4m3b11fnuz": 1, "float8_e8m0fnu": 1, "float4_e2m1fn": 1,
          "int2": 1, "uint2": 1, "int4": 1, "uint4": 1}
for _name, _size in _SIZES.items():
    globals()[_name] = _np.dtype([(_name, f"<u{_size}")])
__version__ = "0.0+foundry-standin"
PY
}

cmd_setup() {
  local onnxscript=${FOUNDRY_TORCH26_ONNXSCRIPT:-}
  while (($#)); do
    case $1 in
      --onnxscript) (($# >= 2)) || die "--onnxscript needs a file"; onnxscript=$2; shift 2 ;;
      --onnxscript=*) onnxscript=${1#*=}; shift ;;
      -h | --help) usage ;;
      -*) die "setup: unknown option $1 (setup [ROOT] [--onnxscript FILE])" ;;
      *) root=$1; shift ;;
    esac
  done
  [[ $root == /* ]] || die "setup: ROOT must be an absolute path, not '$root'"
  need_root setup
  if [[ -n $onnxscript ]]; then
    [[ -f $onnxscript ]] || die "--onnxscript $onnxscript: no such file"
    onnxscript=$(realpath "$onnxscript")
  fi
  if [[ ! -x $root/usr/bin/python3 || -d $root/debootstrap ]]; then
    [[ ! -e $root || -z $(ls -A "$root" 2>/dev/null) ]] ||
      die "$root exists but holds no finished environment (an earlier setup stopped?); remove it (rm -rf $root) and run setup again"
    local mirror log=$root.debootstrap.log
    mirror=$(find_mirror)
    if ! command -v debootstrap > /dev/null; then
      echo "torch26-env: installing debootstrap"
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap; } > /dev/null ||
        die "could not install debootstrap (apt-get install debootstrap)"
    fi
    echo "torch26-env: debootstrap $suite from $mirror into $root (a few minutes; log: $log)"
    mkdir -p "$root"
    local include
    include=$(IFS=,; echo "${packages[*]}")
    if ! debootstrap --variant=minbase --include="$include" "$suite" "$root" "$mirror" > "$log" 2>&1; then
      local why
      why=$(grep -h -A1 'depends on' "$root/debootstrap/debootstrap.log" 2>/dev/null | head -2 | tr -s ' \n' ' ')
      die "debootstrap failed${why:+: $why}; see $log and $root/debootstrap/debootstrap.log, then rm -rf $root and run setup again"
    fi
  fi
  local p missing=""
  for p in "${packages[@]}"; do [[ -n $(pkg_version "$p") ]] || missing+=" $p"; done
  if [[ -n $missing ]]; then
    echo "torch26-env: installing$missing in $root"
    cp /etc/resolv.conf "$root/etc/resolv.conf" 2> /dev/null || true
    chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
      sh -c "apt-get update -qq && apt-get install -y -qq$missing" > "$root.apt.log" 2>&1 ||
      die "could not install$missing in $root (see $root.apt.log)"
  fi
  mkdir -p "$root/opt/py"
  if [[ -n $onnxscript ]]; then
    install_onnxscript "$onnxscript"
    install_ml_dtypes_standin
  fi
  cmd_status
}

# Inside a private mount namespace (run re-executes itself under unshare): mount and chroot.
cmd_enter() {
  is_ready || die "not set up at $root; run scripts/torch26-env.sh setup (as root) first"
  local here top d m
  here=$(pwd -P)
  top=$(git -C "$here" rev-parse --show-toplevel 2> /dev/null || true)
  mount -t proc proc "$root/proc"
  mount --rbind /dev "$root/dev"
  local -a done_=()
  for d in "$repo" $top "$here" /tmp; do
    [[ -d $d ]] || continue
    for m in "${done_[@]}"; do [[ $d == "$m" || $d == "$m"/* ]] && continue 2; done
    mkdir -p "$root$d"
    mount --bind "$d" "$root$d"
    done_+=("$d")
  done
  (($#)) || set -- python3
  # shellcheck disable=SC2016  # ($0 and $@ are the inner shell's: the folder, then CMD)
  exec chroot "$root" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/tmp LANG=C.UTF-8 \
    PYTHONPATH=/opt/py PYTHONUNBUFFERED=1 /bin/sh -c 'cd "$0" && exec "$@"' "$here" "$@"
}

cmd_run() {
  need_root run
  is_ready || die "not set up at $root; run scripts/torch26-env.sh setup (as root) first"
  exec unshare --mount --propagation private -- bash "$self" __enter "$@"
}

(($#)) || usage
sub=$1
shift
case $sub in
  setup) cmd_setup "$@" ;;
  run) cmd_run "$@" ;;
  status) cmd_status ;;
  __enter) cmd_enter "$@" ;;
  -h | --help | help) usage ;;
  *) echo "torch26-env: error: unknown command '$sub'" >&2; usage ;;
esac
