#!/usr/bin/python3
"""Gradient clipping (foundry-run --clip-norm) against torch.nn.utils.clip_grad_norm_ on real
gradients: the fixtures mpt_tiny and llama_tiny compiled, one step run without clipping
(--dump-grads: the raw gradients; --report-json: foundry's global norm), then the same step with
--clip-norm at half the norm (clipping happens) and at twice the norm (it does not).

clip_grad_norm_(max_norm) on the raw gradients (torch, f32, CPU) gives the reference clipped
gradients and total norm. Bounds, measured and printed:
  - foundry's norm vs torch's: |a - b| / b <= 4e-7 (a few f32 ulps: torch sums in f32, foundry in
    exact-square double, kernels/cpu/grad_norm.h), and vs the float64 norm of the same gradients;
  - clipped gradients: |a - b| <= 1e-6 * |b| + 1e-12 elementwise (the coefficient's ulps);
  - no clipping: foundry's gradients are bitwise the raw ones (times exactly 1, as torch's are).
Exits 77 (skip) without torch/onnx, or when build/foundry-run is missing (outside CI).
"""

import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("FOUNDRY_BIN_DIR", os.path.join(REPO, "build"))
CI = os.environ.get("FOUNDRY_CI") == "1"

try:
    import numpy as np
    import onnx
    import torch
    from onnx import numpy_helper
except ImportError as e:
    if CI:
        print(f"FAIL: {e}; CI needs torch, onnx and numpy")
        sys.exit(1)
    print(f"SKIP: {e}")
    sys.exit(77)
for tool in ("foundry-compile", "foundry-run"):
    if not os.path.exists(os.path.join(BIN, tool)):
        if CI:
            print(f"FAIL: {BIN}/{tool} is missing")
            sys.exit(1)
        print(f"SKIP: {BIN}/{tool} is missing")
        sys.exit(77)

failures = []


def run(*args):
    out = subprocess.run(list(args), capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {out.returncode}: {out.stderr.strip()}")
    return out.stdout


def read_grads(folder):
    grads = {}
    for f in sorted(os.listdir(folder)):
        t = onnx.TensorProto()
        with open(os.path.join(folder, f), "rb") as fh:
            t.ParseFromString(fh.read())
        grads[t.name] = numpy_helper.to_array(t).astype(np.float32)
    return grads


def foundry_step(plan, tmp, tag, clip):
    dump = os.path.join(tmp, tag)
    report = os.path.join(tmp, tag + ".json")
    args = [os.path.join(BIN, "foundry-run"), plan, "--steps", "1", "--threads", "2",
            "--dump-grads", dump, "--report-json", report, "--grad-norm"]
    if clip is not None:
        args += ["--clip-norm", repr(clip)]
    run(*args)
    with open(report) as fh:
        norm = json.load(fh)["step_grad_norm"][0]
    return read_grads(dump), norm


def torch_clip(raw, order, max_norm):
    params = []
    for name in order:
        p = torch.zeros(raw[name].shape, dtype=torch.float32, requires_grad=True)
        p.grad = torch.from_numpy(raw[name].copy())
        params.append(p)
    total = torch.nn.utils.clip_grad_norm_(params, max_norm)
    return {n: p.grad.numpy() for n, p in zip(order, params)}, float(total)


worst_norm = worst_norm64 = worst_grad = 0.0
for fixture in ("mpt_tiny", "llama_tiny"):
    with tempfile.TemporaryDirectory() as tmp:
        plan = os.path.join(tmp, "p")
        run(os.path.join(BIN, "foundry-compile"),
            os.path.join(REPO, "models", "fixtures", fixture, "model.onnx"),
            "--dim", "batch=2", "--dim", "seq=16", "-o", plan)
        raw, norm = foundry_step(plan, tmp, "raw", None)
        order = list(raw)  # any order: the f32 stack of norms is not order sensitive beyond ulps
        exact = float(np.sqrt(sum(np.sum(g.astype(np.float64) ** 2) for g in raw.values())))
        _, torch_norm = torch_clip(raw, order, 1e30)
        e = abs(norm - torch_norm) / torch_norm
        worst_norm = max(worst_norm, e)
        worst_norm64 = max(worst_norm64, abs(norm - exact) / exact)
        if e > 4e-7:
            failures.append(f"{fixture}: norm {norm!r} vs torch {torch_norm!r} ({e:.3g})")
        for factor, clips in ((0.5, True), (2.0, False)):
            max_norm = norm * factor
            ref, ref_norm = torch_clip(raw, order, max_norm)
            got, got_norm = foundry_step(plan, tmp, f"clip{factor}", max_norm)
            if got_norm != norm:
                failures.append(f"{fixture}: the reported norm is before clipping: {got_norm} "
                                f"vs {norm}")
            for name in order:
                a, b = got[name], ref[name]
                if not clips:
                    if a.tobytes() != raw[name].tobytes():
                        failures.append(f"{fixture}: {name} changed without clipping")
                    if b.tobytes() != raw[name].tobytes():
                        failures.append(f"{fixture}: torch changed {name} without clipping")
                    continue
                err = np.abs(a.astype(np.float64) - b) - 1e-6 * np.abs(b.astype(np.float64))
                rel = float(np.max(np.abs(a.astype(np.float64) - b) /
                                   np.maximum(np.abs(b.astype(np.float64)), 1e-30)))
                worst_grad = max(worst_grad, rel if np.any(b != 0) else 0.0)
                if np.any(err > 1e-12):
                    failures.append(f"{fixture}: clipped {name} differs from torch by {rel:.3g}")
            if clips:
                clipped = float(np.sqrt(sum(np.sum(g.astype(np.float64) ** 2)
                                            for g in got.values())))
                if abs(clipped - max_norm) > 1e-5 * max_norm:
                    failures.append(f"{fixture}: clipped norm {clipped} vs max_norm {max_norm}")

print(f"torch {torch.__version__}: norm vs torch within {worst_norm:.3g} (relative), vs float64 "
      f"{worst_norm64:.3g}; clipped gradients within {worst_grad:.3g} (relative)")
if failures:
    for f in failures[:20]:
        print("FAIL:", f)
    sys.exit(1)
print("OK")
