#!/usr/bin/python3
"""foundry-run --data reads the token files numpy writes as nanoGPT and llm.c write them.

The ids are written by numpy, never by foundry's code:
- nanoGPT: `np.array(ids, dtype=np.uint16).tofile(path)` (data/shakespeare_char/prepare.py; its
  openwebtext script writes the same bytes through np.memmap(dtype=np.uint16));
- llm.c: dev/data/data_common.py write_datafile for "gpt-2": a header of np.zeros(256, np.int32)
  with [0] = 20240520, [1] = 1, [2] = len(toks), then np.array(toks, dtype=np.uint16);
- raw int32: `np.array(ids, dtype=np.int32).tofile(path)`, read with --data-dtype int32.
Each file trains one step of mpt_tiny ([2, 16]: rows read windows 0 and 1 of 17 tokens; the model
shifts labels itself, so labels = input_ids = window[0:16]); its loss must be bitwise the loss of a
--feed run of those windows cut by numpy. The int32 file read without --data-dtype is refused.

Run from anywhere: /usr/bin/python3 tests/tools/token_files_test.py (FOUNDRY_BIN_DIR names the
build folder, default build/). Exits 77 (skip) without numpy or onnx, except under FOUNDRY_CI=1.
"""

import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

try:
    import numpy as np
    import onnx
    from onnx import numpy_helper
except ImportError as e:
    if os.environ.get("FOUNDRY_CI") == "1":
        print(f"FAIL: {e}; CI (FOUNDRY_CI=1) needs numpy and onnx: run scripts/setup.sh")
        sys.exit(1)
    print(f"SKIP: {e} (install python3-numpy and python3-onnx with scripts/setup.sh)")
    sys.exit(77)

BIN = os.environ.get("FOUNDRY_BIN_DIR", os.path.join(REPO, "build"))
MODEL = os.path.join(REPO, "models/fixtures/mpt_tiny/model.onnx")


def run(args, expect=0):
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != expect:
        raise AssertionError(f"{args}: exit {r.returncode}, expected {expect}\n{r.stdout}{r.stderr}")
    return r


def loss_bytes(folder):
    with open(os.path.join(folder, "loss.pb"), "rb") as f:
        return numpy_helper.to_array(onnx.load_tensor_from_string(f.read())).tobytes()


def main():
    ids = [(i * 7919 + 3) % 256 for i in range(1000)]  # mpt_tiny's vocabulary is 256
    with tempfile.TemporaryDirectory() as d:
        p = lambda name: os.path.join(d, name)  # noqa: E731
        run([os.path.join(BIN, "foundry-compile"), MODEL, "--dim", "batch=2", "--dim", "seq=16",
             "-o", p("mpt")])
        np.array(ids, dtype=np.uint16).tofile(p("nanogpt.bin"))
        header = np.zeros(256, dtype=np.int32)
        header[0] = 20240520
        header[1] = 1
        header[2] = len(ids)
        with open(p("llmc.bin"), "wb") as f:
            f.write(header.tobytes())
            f.write(np.array(ids, dtype=np.uint16).tobytes())
        np.array(ids, dtype=np.int32).tofile(p("int32.bin"))

        # The first step's windows, cut by numpy: rows 0 and 1, tokens 0..15 of each 17.
        windows = np.array(ids[:34], dtype=np.int64).reshape(2, 17)[:, :16].copy()
        for name in ("input_ids", "labels"):
            t = numpy_helper.from_array(windows, name)
            with open(p(name + ".pb"), "wb") as f:
                f.write(t.SerializeToString())
        run_bin = os.path.join(BIN, "foundry-run")
        run([run_bin, p("mpt"), "--feed", "input_ids=" + p("input_ids.pb"), "--feed",
             "labels=" + p("labels.pb"), "--dump-outputs", p("fed")])
        want = loss_bytes(p("fed"))

        cases = [("nanogpt.bin", [], "(no header, uint16, 1000 tokens)"),
                 ("llmc.bin", [], "(llm.c v1 header, uint16, 1000 tokens)"),
                 ("int32.bin", ["--data-dtype", "int32"], "(no header, int32, 1000 tokens)")]
        for name, extra, described in cases:
            out = p("out_" + name)
            r = run([run_bin, p("mpt"), "--data", p(name), "--dump-outputs", out] + extra)
            line = f"  data       --data {p(name)} {described}"
            assert line in r.stdout, f"{name}: no line {line!r} in\n{r.stdout}"
            got = loss_bytes(out)
            assert got == want, f"{name}: loss {got.hex()} != the fed windows' {want.hex()}"
            print(f"ok: {name} reads numpy's ids (loss {np.frombuffer(got, np.float32)[0]:.6f})")

        r = run([run_bin, p("mpt"), "--data", p("int32.bin")], expect=1)
        assert "looks like int32 tokens, not uint16" in r.stderr, r.stderr
        print("ok: the int32 file read as the default uint16 is refused")


if __name__ == "__main__":
    main()
