#!/usr/bin/python3
"""Composer's DecoupledAdamW step, run with torch, against the numbers tests/kernels/cpu/
optimizer_test.cc holds for foundry's kernel (DecoupledAdamWMatchesComposerBitwise).

Composer is not installed here: `composer_step` below is DecoupledAdamW.step + adamw from
composer/optim/decoupled_weight_decay.py, op for op (same torch calls, same Python-float scalars,
state['step'] an f32 tensor read with .item(), group['initial_lr'] the lr before the schedule).

Run as a test (ctest py_kernels_cpu_decoupled_adamw_reference_test): recomputes the reference with
this machine's torch and checks it equals, bit for bit, the block between the BEGIN/END markers in
optimizer_test.cc. `--print` prints that block (how it was made, with torch 1.13; torch 2.6 in the
chroot prints the same bits).
"""

import math
import os
import re
import struct
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
CC = os.path.join(REPO, "tests", "kernels", "cpu", "optimizer_test.cc")

try:
    import torch
except ImportError as e:
    if os.environ.get("FOUNDRY_CI") == "1":
        print(f"FAIL: {e}; CI needs torch")
        sys.exit(1)
    print(f"SKIP: {e}")
    sys.exit(77)


def composer_step(params, group, state):
    """DecoupledAdamW.step (amsgrad=False) for one group; `state` maps index -> slot dict."""
    beta1, beta2 = group["betas"]
    eps, lr = group["eps"], group["lr"]
    if "initial_lr" not in group:
        group["initial_lr"] = lr
    initial_lr, weight_decay = group["initial_lr"], group["weight_decay"]
    for i, param in enumerate(params):
        grad = param.grad
        st = state.setdefault(i, {})
        if "step" not in st:
            st["step"] = torch.zeros((), dtype=torch.float)
            st["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
            st["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
        st["step"] += 1
        exp_avg, exp_avg_sq = st["exp_avg"], st["exp_avg_sq"]
        step = st["step"].item()
        # DecoupledAdamW.adamw
        if weight_decay != 0:
            decay_factor = (lr / initial_lr) if initial_lr else 1.0
            param.mul_(1 - decay_factor * weight_decay)
        bias_correction1 = 1 - beta1**step
        bias_correction2 = 1 - beta2**step
        exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        denom = (exp_avg_sq.sqrt() / math.sqrt(bias_correction2)).add_(eps)
        step_size = lr / bias_correction1
        param.addcdiv_(exp_avg, denom, value=-step_size)


N = 37  # a vector body (32 on AVX2) and a scalar tail in torch's CPU loops
LRS = [0.0, 0.0, 0.005, 0.0075]  # a warmup's first steps: Composer's lr 0, 0, then rising
INITIAL_LR = 0.01
CONFIGS = [  # (weight_decay, beta1, beta2, eps)
    (0.1, 0.9, 0.95, 1e-8),
    (1e-5, 0.9, 0.999, 1e-6),
]


def f32_hex(x):
    s = float(x).hex()  # '-0x1.2ca2e80000000p-4'
    m = re.match(r"(-?0x[01])(\.[0-9a-f]*?)0*p([+-]\d+)", s)
    if not m:
        return s + "f"  # 0x0p+0
    frac = m.group(2) if m.group(2) != "." else ""
    return f"{m.group(1)}{frac}p{m.group(3)}f"


def reference():
    torch.manual_seed(23)
    p0 = (torch.randn(N) * 0.5).float()
    grads = [(torch.randn(N) * s).float() for s in (1.0, 0.01, 5.0, 0.1)]
    out = {"init": p0.tolist(), "grads": [g.tolist() for g in grads]}
    for c, (wd, b1, b2, eps) in enumerate(CONFIGS):
        p = p0.clone()
        group = {"lr": INITIAL_LR, "betas": (b1, b2), "eps": eps, "weight_decay": wd}
        group["initial_lr"] = group["lr"]  # DecoupledAdamW.__init__
        state = {}
        for lr, g in zip(LRS, grads):
            group["lr"] = lr  # what LambdaLR writes into param_groups
            p.grad = g.clone()
            composer_step([p], group, state)
        out[f"p{c}"] = p.tolist()
        out[f"m{c}"] = state[0]["exp_avg"].tolist()
        out[f"v{c}"] = state[0]["exp_avg_sq"].tolist()
    return out


def block(ref):
    lines = ["// BEGIN decoupled_adamw reference (tests/kernels/cpu/decoupled_adamw_reference_test.py"
             " --print)"]
    for key, values in ref.items():
        rows = values if key == "grads" else [values]
        for r, row in enumerate(rows):
            name = f"kDa_{key}" + (f"_{r}" if key == "grads" else "")
            lines.append(f"const std::vector<float> {name} = {{{', '.join(f32_hex(x) for x in row)}}};")
    lines.append("// END decoupled_adamw reference")
    return "\n".join(lines)


def parse_cc():
    text = open(CC).read()
    m = re.search(r"// BEGIN decoupled_adamw reference.*?\n(.*?)// END decoupled_adamw reference",
                  text, re.S)
    if not m:
        return None
    vals = {}
    for name, body in re.findall(r"const std::vector<float> (kDa_\w+) = \{(.*?)\};", m.group(1), re.S):
        vals[name] = [float.fromhex(x.strip().rstrip("f")) for x in body.split(",") if x.strip()]
    return vals


def main():
    ref = reference()
    if "--print" in sys.argv:
        print(block(ref))
        return 0
    committed = parse_cc()
    if committed is None:
        print(f"FAIL: no reference block in {CC}")
        return 1
    bad = 0
    expected = {}
    for key, values in ref.items():
        if key == "grads":
            for r, row in enumerate(values):
                expected[f"kDa_grads_{r}"] = row
        else:
            expected[f"kDa_{key}"] = values
    for name, want in expected.items():
        got = committed.get(name)
        bits = lambda xs: [struct.pack("<f", x) for x in xs]
        if got is None or bits(got) != bits(want):
            print(f"FAIL: {name} in optimizer_test.cc differs from Composer's step on torch "
                  f"{torch.__version__}")
            bad += 1
    if bad:
        return 1
    print(f"OK: {len(expected)} arrays, bitwise Composer's DecoupledAdamW on torch {torch.__version__}")
    return 0


sys.exit(main())
