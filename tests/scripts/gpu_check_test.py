#!/usr/bin/python3
"""scripts/gpu-check.sh's library step (`resolve-libs`) on made-up ldd output.

The build copies into OUT/lib each library of BUNDLED_LIBS from where ldd resolves it here, and
stops on one it does not expect. Checked: every bundled library mapped to its first path; an
unexpected library, an unresolved bundled one and a missing bundled one each fail with their
message; a long input is read whole (an `awk '... exit'` behind an ldd loop under pipefail
killed the build with SIGPIPE about one run in four). And run's NCCL finder (FIND_NCCL_PY) on
made-up wheel folders.

Run from anywhere: /usr/bin/python3 tests/scripts/gpu_check_test.py
"""

import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "scripts", "gpu-check.sh")


def script_list(var):
    """A list variable of the script: FOUNDRY_LIBS="..." or BUNDLED_LIBS="$FOUNDRY_LIBS ..."."""
    with open(SCRIPT) as f:
        for line in f:
            if line.startswith(var + '="'):
                value = line.split('"')[1]
                if "$FOUNDRY_LIBS" in value:
                    value = value.replace("$FOUNDRY_LIBS", " ".join(script_list("FOUNDRY_LIBS")))
                return value.split()
    raise SystemExit(f"FAIL: no {var}= line in {SCRIPT}")


BUNDLED = script_list("BUNDLED_LIBS")
assert "libz.so.1" in BUNDLED and "libyaml-cpp.so.0.7" in BUNDLED, BUNDLED
SYSTEM = ["\tlinux-vdso.so.1 (0x00007ffd)",
          "\tlibstdc++.so.6 => /lib/x86_64-linux-gnu/libstdc++.so.6 (0x00007f01)",
          "\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f02)",
          "\tlibcublas.so.13 => /usr/local/cuda/lib64/libcublas.so.13 (0x00007f03)",
          "\tlibcuda.so.1 => not found",
          "\t/lib64/ld-linux-x86-64.so.2 (0x00007f04)"]


def ldd(paths):
    """ldd's lines for the bundled libraries at paths[name], then the system ones."""
    return [f"\t{name} => {paths[name]} (0x00007f10)" for name in BUNDLED] + SYSTEM


def resolve(lines):
    p = subprocess.run(["bash", SCRIPT, "resolve-libs"], input="\n".join(lines) + "\n",
                       capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL: " + message)


build = {name: f"/b/{name}" for name in BUNDLED}
other = {name: f"/other/{name}" for name in BUNDLED}

# Three binaries' worth: each library mapped once, to the first path ldd gave.
rc, out, err = resolve(ldd(build) + ldd(other) + ldd(other))
check(rc == 0, f"plain ldd output: exit {rc}, stderr {err!r}")
check(out.splitlines() == [f"{name} /b/{name}" for name in BUNDLED], f"mapping: {out!r}")

rc, out, err = resolve(ldd(build) + ["\tlibfoo.so.1 => /usr/lib/libfoo.so.1 (0x1)"])
check(rc == 1 and "unexpected shared library libfoo.so.1: link it statically or add it to BUNDLED_LIBS"
      in err, f"an unexpected library: exit {rc}, stderr {err!r}")

lines = [line for line in ldd(build) if "libz.so.1" not in line] + ["\tlibz.so.1 => not found"]
rc, out, err = resolve(lines)
check(rc == 1 and "libz.so.1 is not resolved here: \tlibz.so.1 => not found" in err
      and "libz.so.1: not among" not in err, f"an unresolved bundled library: exit {rc}, stderr {err!r}")

rc, out, err = resolve([line for line in ldd(build) if "libyaml-cpp" not in line])
check(rc == 1 and "libyaml-cpp.so.0.7: not among the binaries' libraries; update BUNDLED_LIBS" in err,
      f"a missing bundled library: exit {rc}, stderr {err!r}")

# 3000 binaries' worth through a pipe: read to the end (no broken pipe), same answer.
rc, out, err = resolve(ldd(build) * 3000)
check(rc == 0 and len(out.splitlines()) == len(BUNDLED), f"a long input: exit {rc}, stderr {err[:200]!r}")


def script_python(var):
    """A python snippet of the script: VAR=' ... ' over several lines."""
    with open(SCRIPT) as f:
        lines = f.read().split("\n")
    start = lines.index(var + "='")
    return "\n".join(lines[start + 1:lines.index("'", start + 1)])


# The NCCL finder (run's FOUNDRY_NCCL_LIBRARY): the first libnccl.so.2 of a wheel folder on
# sys.path, PyTorch's nvidia/nccl/lib before torch/lib; none: "missing" and where it looked.
FIND_NCCL = script_python("FIND_NCCL_PY")
with tempfile.TemporaryDirectory() as tmp:
    site1, site2 = os.path.join(tmp, "site1"), os.path.join(tmp, "site2")
    for d in (os.path.join(site1, "torch", "lib"), os.path.join(site2, "nvidia", "nccl", "lib"),
              os.path.join(site2, "torch", "lib")):
        os.makedirs(d)
    env = dict(os.environ, PYTHONPATH=site2 + os.pathsep + site1)
    p = subprocess.run([sys.executable, "-S", "-c", FIND_NCCL], env=env, capture_output=True,
                       text=True, timeout=60)
    check(p.returncode == 0 and p.stdout.startswith("missing: no libnccl.so.2 in ")
          and os.path.join(site2, "nvidia", "nccl", "lib") in p.stdout,
          f"no libnccl.so.2 anywhere: exit {p.returncode}, {p.stdout!r} {p.stderr!r}")
    for d in (os.path.join(site1, "torch", "lib"), os.path.join(site2, "nvidia", "nccl", "lib"),
              os.path.join(site2, "torch", "lib")):
        open(os.path.join(d, "libnccl.so.2"), "w").close()
    p = subprocess.run([sys.executable, "-S", "-c", FIND_NCCL], env=env, capture_output=True,
                       text=True, timeout=60)
    want = "ok " + os.path.join(site2, "nvidia", "nccl", "lib", "libnccl.so.2")
    check(p.returncode == 0 and p.stdout.strip() == want,
          f"libnccl.so.2 in the wheels: want {want!r}, got {p.stdout!r} {p.stderr!r}")

if failures:
    sys.exit(1)
print("gpu_check_test: all passed")
