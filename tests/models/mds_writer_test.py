#!/usr/bin/python3
"""Checks foundry's MDS writer (models/mds.py) and the fixtures it made (tests/data/mds/).

Run from anywhere: /usr/bin/python3 tests/models/mds_writer_test.py
Exits 77 (skip) where numpy, zstandard or xxhash are not importable, except under CI
(FOUNDRY_CI=1, set by .ci/run), where that is a failure.

- The committed fixtures are what models/make_mds_fixtures.py writes today (--check: regenerated
  into a temporary folder and compared file by file), so the C++ tests read the writer's output.
- text_tokens.py --mds writes byte tokens in samples of --concat-tokens, dropping the short tail.
- Bad input is refused in one line naming the column, and leaves no folder behind; an existing,
  non-empty folder is never written into.
(The outside check against the streaming package itself is bench/mds_streaming_check.sh.)
"""

import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

try:
    import numpy as np
    import xxhash  # noqa: F401 (the writer's hashes)
    import zstandard  # noqa: F401 (the writer's compression)
except ImportError as e:
    print(f"skip: {e}")
    sys.exit(1 if os.environ.get("FOUNDRY_CI") == "1" else 77)

from models.mds import write_mds  # noqa: E402

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


def fixtures_are_current():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "models/make_mds_fixtures.py"), "--check"],
                       capture_output=True, text=True)
    check(r.returncode == 0, "make_mds_fixtures.py --check: " + r.stdout + r.stderr)


def text_tokens_mds(tmp):
    text = os.path.join(tmp, "t.txt")
    with open(text, "wb") as f:
        f.write(bytes(range(256)) * 2 + b"tail")  # 516 bytes
    out = os.path.join(tmp, "tt")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "models/text_tokens.py"), text, "--mds", out,
                        "--concat-tokens", "32", "--val-fraction", "0.25"], capture_output=True, text=True)
    check(r.returncode == 0, "text_tokens.py --mds: " + r.stderr)
    check("wrote " + out + "/train (12 samples of 32 tokens)" in r.stdout, r.stdout)
    check(os.path.isfile(os.path.join(out, "val", "index.json")), "text_tokens.py --mds wrote no val split")


def refusals(tmp):
    def refused(columns, samples, message, **kw):
        out = os.path.join(tmp, "bad")
        try:
            write_mds(out, columns, samples, **kw)
            check(False, f"accepted: {columns} {message}")
        except ValueError as e:
            check(message in str(e) and "\n" not in str(e), f"message {str(e)!r} lacks {message!r}")
        check(not os.path.exists(out), f"left {out} behind")
        check(not any(n.startswith("bad.") for n in os.listdir(tmp)), "left a temporary folder behind")

    refused({"tokens": "ndarray:int32"}, [{"tokens": np.zeros(4, np.int64)}], "column 'tokens'")
    refused({"tokens": "ndarray:int32:4"}, [{"tokens": np.zeros(5, np.int32)}], "expects shape")
    refused({"id": "uint8"}, [{"id": 300}], "out of the range of uint8")
    refused({"x": "nosuch"}, [{"x": 1}], "nosuch")
    refused({"tokens": "bytes"}, [{"tokens": b"ab"}], "compression", compression="br")
    full = os.path.join(tmp, "full")
    os.makedirs(full)
    with open(os.path.join(full, "keep"), "w") as f:
        f.write("x")
    try:
        write_mds(full, {"tokens": "bytes"}, [{"tokens": b"ab"}])
        check(False, "wrote into a non-empty folder")
    except (FileExistsError, ValueError):
        pass
    check(os.listdir(full) == ["keep"], "touched a non-empty folder")


def main():
    fixtures_are_current()
    with tempfile.TemporaryDirectory() as tmp:
        text_tokens_mds(tmp)
        refusals(tmp)
    if failures:
        print(f"{len(failures)} checks failed")
        sys.exit(1)
    print("mds_writer_test: ok")


if __name__ == "__main__":
    main()
