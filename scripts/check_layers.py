#!/usr/bin/env python3
"""Every #include of the project's own headers points down the layer order (docs/design.md §8).

    python3 scripts/check_layers.py          # exit 0, or 1 with one line per include that points up

The order, bottom first: base < compiler < kernels/cpu < kernels/cuda < passes | runtime < driver <
tools. passes and runtime are siblings: neither includes the other (the runtime runs a compiled plan
and never compiles). A file may include headers of its own layer and of the layers below it. tests/,
bench/ and models/ sit outside the libraries and may include anything.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# layer -> the layers its files may include (itself included)
BELOW = {
    "base": {"base"},
    "compiler": {"base", "compiler"},
    "kernels/cpu": {"base", "compiler", "kernels/cpu"},
    "kernels/cuda": {"base", "compiler", "kernels/cpu", "kernels/cuda"},
    "passes": {"base", "compiler", "kernels/cpu", "passes"},
    "runtime": {"base", "compiler", "kernels/cpu", "kernels/cuda", "runtime"},
    "driver": {"base", "compiler", "kernels/cpu", "kernels/cuda", "passes", "runtime", "driver"},
    "tools": {"base", "compiler", "kernels/cpu", "kernels/cuda", "passes", "runtime", "driver", "tools"},
}
SOURCE_EXTS = (".cc", ".cu", ".h", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def layer_of(path):
    for layer in sorted(BELOW, key=len, reverse=True):
        if path == layer or path.startswith(layer + "/"):
            return layer
    return None


def main():
    files = subprocess.run(["git", "-C", ROOT, "ls-files", "--cached", "--others", "--exclude-standard"],
                           capture_output=True, text=True, check=True).stdout.split()
    checked, bad = 0, []
    for f in files:
        if not f.endswith(SOURCE_EXTS):
            continue
        own = layer_of(f)
        if own is None:
            continue
        checked += 1
        try:
            with open(os.path.join(ROOT, f), encoding="utf-8", errors="replace") as src:
                lines = src.read().split("\n")
        except FileNotFoundError:
            continue  # deleted in the working tree, not yet in the index
        for number, line in enumerate(lines, 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            target = m.group(1)
            theirs = layer_of(target)
            if theirs is None:
                if target.split("/")[0] in ("tests", "bench", "models"):
                    bad.append(f"{f}:{number}: {own} includes {target} (tests/, bench/ and models/ "
                               "are outside the libraries)")
                continue
            if theirs not in BELOW[own]:
                bad.append(f"{f}:{number}: {own} includes {target} ({theirs} is not below {own}; "
                           "see docs/design.md §8 for the layer order)")
    for line in bad:
        print(line)
    if bad:
        print(f"check_layers: {len(bad)} include(s) point up or sideways across layers", file=sys.stderr)
        return 1
    print(f"check_layers: {checked} files, every include points down the layer order")
    return 0


if __name__ == "__main__":
    sys.exit(main())
