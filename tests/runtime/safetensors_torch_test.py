#!/usr/bin/python3
"""foundry's model.safetensors read by PyTorch, and PyTorch's weights read by foundry-run --init-from.

The README's "Weights in and out" snippets are executed as the README writes them (read from
README.md, not copied here):
1. mpt_tiny is compiled and trained 3 steps on a token file with `foundry-run --save DIR`;
   DIR/model.safetensors is loaded into a PyTorch MPT built from the fixture's config.json with the
   README's json+torch `load_file` and its three-line load (and with `safetensors.torch.load_file`
   where that package is importable; it is not on Debian, so that half says SKIP); the loaded
   tensors are bitwise the trained parameters of DIR/model.onnx; PyTorch's loss on the fixture's
   batch equals foundry's loss at those weights (`foundry-run --init-from DIR/model.safetensors
   --steps 1 --dump-outputs`: step 1's loss, before its update) within 1e-5 relative.
2. PyTorch -> foundry: a seeded model with perturbed weights is written by a json+torch writer
   (the format's own definition: u64 length, JSON header padded with spaces to 8, raw bytes) in
   F32 and in BF16; foundry-run --init-from reads it and its step-1 loss equals PyTorch's on the
   same weights (BF16: PyTorch's model holds the bf16 values widened) within 1e-5 relative.
3. An --init-from file written from state_dict() (with the buffer) is refused, naming the buffer.

Run from anywhere: /usr/bin/python3 tests/runtime/safetensors_torch_test.py (FOUNDRY_BIN_DIR names
the build folder, default build/). Exits 77 (skip) without torch or onnx, except under FOUNDRY_CI=1.
"""

import json
import os
import struct
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

try:
    import numpy as np
    import onnx
    import torch
    from onnx import numpy_helper
except ImportError as e:
    if os.environ.get("FOUNDRY_CI") == "1":
        print(f"FAIL: {e}; CI (FOUNDRY_CI=1) needs torch, onnx and numpy: run scripts/setup.sh")
        sys.exit(1)
    print(f"SKIP: {e} (install python3-torch and python3-onnx with scripts/setup.sh)")
    sys.exit(77)

from models import families  # noqa: E402

BIN = os.environ.get("FOUNDRY_BIN_DIR", os.path.join(REPO, "build"))
FIXTURE = os.path.join(REPO, "models", "fixtures", "mpt_tiny")
REL_TOL = 1e-5
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def run(args, expect_ok=True):
    p = subprocess.run(args, capture_output=True, text=True)
    if expect_ok and p.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def readme_snippets():
    """The python blocks of README.md's "### Weights in and out" section, in order."""
    with open(os.path.join(REPO, "README.md")) as f:
        text = f.read()
    section = text.split("### Weights in and out\n", 1)[1].split("\n### ", 1)[0]
    blocks = [b.split("```", 1)[0] for b in section.split("```python\n")[1:]]
    if len(blocks) != 2:
        raise RuntimeError(f"README's Weights in and out section has {len(blocks)} python blocks, "
                           "expected 2 (the load, the json+torch load_file)")
    return blocks


def load_onnx_tensor(path):
    return numpy_helper.to_array(onnx.load_tensor(path)).copy()


def save_file(tensors, path):
    """safetensors by its definition, json + torch only."""
    names = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}
    header, chunks, at = {}, [], 0
    for k, t in tensors.items():
        b = t.detach().contiguous().flatten().view(torch.uint8).numpy().tobytes()
        header[k] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [at, at + len(b)]}
        chunks.append(b)
        at += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(chunks))


def torch_loss(model):
    ids = torch.from_numpy(load_onnx_tensor(os.path.join(FIXTURE, "inputs", "input_ids.pb")))
    labels = torch.from_numpy(load_onnx_tensor(os.path.join(FIXTURE, "inputs", "labels.pb")))
    with torch.no_grad():
        return float(model(ids, labels))


def foundry_loss(prefix, weights, tmp, tag):
    """Step 1's loss (before its update) of foundry-run --init-from `weights` on the fixture's batch."""
    out = os.path.join(tmp, "dump_" + tag)
    inputs = os.path.join(FIXTURE, "inputs")
    run([os.path.join(BIN, "foundry-run"), prefix, "--init-from", weights, "--steps", "1",
         "--feed", "input_ids=" + os.path.join(inputs, "input_ids.pb"),
         "--feed", "labels=" + os.path.join(inputs, "labels.pb"), "--dump-outputs", out])
    return float(load_onnx_tensor(os.path.join(out, "loss.pb")))


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def fresh_model():
    model = families.build(families.load_config(os.path.join(FIXTURE, "config.json")))
    model.eval()
    return model


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    load_block, reader_block = readme_snippets()
    load_lines = load_block.strip().splitlines()
    check(load_lines[0] == "from safetensors.torch import load_file" and len(load_lines) == 3,
          "README's load snippet is the safetensors import and two lines")
    with tempfile.TemporaryDirectory() as tmp:
        prefix = os.path.join(tmp, "p")
        run([os.path.join(BIN, "foundry-compile"), os.path.join(FIXTURE, "model.onnx"),
             "--dim", "batch=2", "--dim", "seq=16", "-o", prefix])
        tokens = os.path.join(tmp, "tokens.bin")
        np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint16).tofile(tokens)
        save = os.path.join(tmp, "run1")
        run([os.path.join(BIN, "foundry-run"), prefix, "--data", tokens, "--steps", "3",
             "--lr", "0.01", "--save", save])
        path = os.path.join(save, "model.safetensors")

        # 1. foundry -> PyTorch, with the README's json+torch load_file.
        trained = {i.name: numpy_helper.to_array(i)
                   for i in onnx.load(os.path.join(save, "model.onnx")).graph.initializer}
        model = fresh_model()
        before = torch_loss(model)
        ns = {"model": model}
        exec(reader_block, ns)
        loaded = ns["load_file"](path)
        check(sorted(loaded) == sorted(k for k, _ in model.named_parameters()),
              f"model.safetensors holds exactly the model's {len(loaded)} parameter names")
        check(all(np.array_equal(loaded[k].numpy(), trained[k]) for k in loaded),
              "its tensors are bitwise the trained parameters of DIR/model.onnx")
        exec("\n".join(load_lines[1:]).replace("DIR/model.safetensors", path), ns)
        ours = foundry_loss(prefix, path, tmp, "trained")
        theirs = torch_loss(model)
        check(rel(theirs, ours) <= REL_TOL and theirs != before,
              f"trained weights: PyTorch loss {theirs:.9g} vs foundry {ours:.9g} "
              f"(rel {rel(theirs, ours):.2e} <= {REL_TOL}; fresh model's {before:.9g})")
        try:
            import safetensors.torch  # noqa: F401
        except ImportError as e:
            print(f"SKIP the `safetensors` package half of the README snippet: {e}")
        else:
            model = fresh_model()
            ns = {"model": model}
            exec(load_block.replace("DIR/model.safetensors", path), ns)
            theirs = torch_loss(model)
            check(rel(theirs, ours) <= REL_TOL,
                  f"safetensors.torch.load_file: PyTorch loss {theirs:.9g} vs foundry {ours:.9g}")

        # 2. PyTorch -> foundry, F32 and BF16.
        model = families.seeded_model(families.load_config(os.path.join(FIXTURE, "config.json")))
        model.eval()
        gen = torch.Generator().manual_seed(7)
        with torch.no_grad():
            for _, p in model.named_parameters():
                p.add_(torch.randn(p.shape, generator=gen) * 0.05)
        params = {k: v for k, v in model.named_parameters()}
        f32 = os.path.join(tmp, "init_f32.safetensors")
        save_file(params, f32)
        theirs = torch_loss(model)
        ours = foundry_loss(prefix, f32, tmp, "f32")
        check(rel(theirs, ours) <= REL_TOL,
              f"PyTorch-written F32 file: PyTorch loss {theirs:.9g} vs foundry --init-from "
              f"{ours:.9g} (rel {rel(theirs, ours):.2e})")
        bf16 = os.path.join(tmp, "init_bf16.safetensors")
        save_file({k: v.to(torch.bfloat16) for k, v in params.items()}, bf16)
        with torch.no_grad():
            for _, p in model.named_parameters():
                p.copy_(p.to(torch.bfloat16).float())
        theirs = torch_loss(model)
        ours = foundry_loss(prefix, bf16, tmp, "bf16")
        check(rel(theirs, ours) <= REL_TOL,
              f"PyTorch-written BF16 file: PyTorch loss {theirs:.9g} (bf16 values widened) vs "
              f"foundry --init-from {ours:.9g} (rel {rel(theirs, ours):.2e})")

        # 3. state_dict() carries the ALiBi buffer, which the plan holds: refused, named.
        sd = os.path.join(tmp, "state_dict.safetensors")
        save_file(model.state_dict(), sd)
        p = run([os.path.join(BIN, "foundry-run"), prefix, "--init-from", sd], expect_ok=False)
        check(p.returncode == 1 and "'transformer.alibi_slopes'" in p.stderr
              and p.stderr.count("\n") == 1,
              f"a state_dict() file is refused in one line naming the buffer: {p.stderr.strip()}")
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
