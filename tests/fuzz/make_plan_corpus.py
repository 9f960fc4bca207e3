#!/usr/bin/python3
"""Writes the seed corpus of the plan loader fuzzer (tests/fuzz/plan_corpus/, each file < 100 KB).

    python3 tests/fuzz/make_plan_corpus.py [BUILD_DIR]    # default build/

Each seed is one real compile by BUILD_DIR/foundry-compile, packed as plan_load_fuzz.cc reads it:
[4 bytes: n, little-endian][n bytes: PREFIX.plan][PREFIX.train.onnx]. The models are the small
graphs of the import fuzzer's corpus and tests/data/onnx (mpt_tiny's weights alone are 466 KB, too
large for a seed). The output depends only on foundry-compile; rerun it when the plan format changes.
"""

import os
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(HERE, "plan_corpus")
MAX = 100 * 1024

MODELS = [  # (model, dims)
    ("tests/fuzz/corpus/lm.onnx", ["batch=1", "seq=4"]),
    ("tests/fuzz/corpus/causal_mask.onnx", ["batch=1", "seq=4"]),
    ("tests/fuzz/corpus/shape_arith.onnx", ["batch=1", "seq=4"]),
    ("tests/fuzz/corpus/mlp.onnx", ["batch=1"]),
    ("tests/fuzz/corpus/functions.onnx", ["batch=1"]),
    ("tests/fuzz/corpus/gelu_rmsnorm_dropout.onnx", ["batch=1"]),
    ("tests/fuzz/corpus/generators.onnx", []),
    ("tests/fuzz/corpus/misc_ops.onnx", []),
    ("tests/data/onnx/toy.metadata.onnx", ["batch=1", "seq=4"]),
    ("tests/data/onnx/toy.noweights.onnx", ["batch=1", "seq=4"]),
]


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
    compile_bin = os.path.join(build, "foundry-compile")
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    with tempfile.TemporaryDirectory() as tmp:
        for model, dims in MODELS:
            name = os.path.basename(model)[: -len(".onnx")]
            prefix = os.path.join(tmp, name)
            args = [compile_bin, model, "-o", prefix]  # relative: the plan records it
            for d in dims:
                args += ["--dim", d]
            subprocess.run(args, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
            with open(prefix + ".plan", "rb") as f:
                plan = f.read()
            with open(prefix + ".train.onnx", "rb") as f:
                graph = f.read()
            seed = struct.pack("<I", len(plan)) + plan + graph
            if len(seed) >= MAX:
                sys.exit(f"{name}: {len(seed)} bytes, over {MAX}")
            with open(os.path.join(OUT, name + ".seed"), "wb") as f:
                f.write(seed)
            print(f"{name}.seed {len(seed)} bytes")


if __name__ == "__main__":
    main()
