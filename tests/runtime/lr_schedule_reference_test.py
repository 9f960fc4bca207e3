#!/usr/bin/python3
"""The lr schedules of foundry-run (runtime/lr_schedule.h) against Composer and PyTorch, 1,000 steps.

`foundry-run --print-schedule` prints the lr of steps 1..N (%.17g) for each configuration; this
test compares them with
  (i)  Composer's schedulers transcribed from composer/optim/scheduler.py (LinearScheduler,
       CosineAnnealingWithWarmupScheduler, LinearWithWarmupScheduler, ConstantWithWarmupScheduler,
       _cosine_anneal; Time division is Python's true division of the batch counts), with the lr of
       step k taken at the timestamp Composer's trainer gives it: BITWISE;
  (ii) torch.optim.lr_scheduler.LambdaLR over (i)'s multiplier, stepped in the order of Composer's
       _train_loop (the LambdaLR is built at timestamp 0; after each batch scheduler.step() runs
       BEFORE the timestamp advances), reading param_groups[0]['lr'] as each batch trains: BITWISE;
  (iii) for cosine without warmup, torch.optim.lr_scheduler.CosineAnnealingLR(T_max, eta_min =
       alpha_f * lr) stepped the same way: its own (recursive) arithmetic, so within a bound:
       |lr - torch| <= 1e-12 * lr0 (measured: printed).
Exits 77 (skip) without torch, or when build/foundry-run is missing (outside CI).
"""

import math
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("FOUNDRY_BIN_DIR", os.path.join(REPO, "build"))
FOUNDRY_RUN = os.path.join(BIN, "foundry-run")
CI = os.environ.get("FOUNDRY_CI") == "1"

try:
    import torch
except ImportError as e:
    if CI:
        print(f"FAIL: {e}; CI needs torch")
        sys.exit(1)
    print(f"SKIP: {e}")
    sys.exit(77)
if not os.path.exists(FOUNDRY_RUN):
    if CI:
        print(f"FAIL: {FOUNDRY_RUN} is missing")
        sys.exit(1)
    print(f"SKIP: {FOUNDRY_RUN} is missing (build foundry-run)")
    sys.exit(77)

failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)


# ---- (i) Composer's schedulers, transcribed (t is state.timestamp in batches) ----

def linear_scheduler(t, alpha_i, alpha_f, t_max):
    # LinearScheduler.__call__: frac_of_total = min(1.0, (current_time / t_max).value)
    frac_of_total = min(1.0, t / t_max)
    return alpha_i + frac_of_total * (alpha_f - alpha_i)


def cosine_anneal(x, min_y=0.0, max_y=1.0):
    x = min(max(x, 0.0), 1.0)
    return min_y + (max_y - min_y) * (1 + math.cos(x * math.pi)) / 2


def cosine_with_warmup(t, t_warmup, t_max, alpha_f):
    if t < t_warmup:
        return linear_scheduler(t, 0.0, 1.0, t_warmup)
    frac_of_total = ((t - t_warmup) / (t_max - t_warmup)) if (t_max > t_warmup) else 0.0
    frac_of_total = min(1.0, frac_of_total)
    return cosine_anneal(x=frac_of_total, min_y=alpha_f)


def linear_with_warmup(t, t_warmup, t_max, alpha_i, alpha_f):
    if t < t_warmup:
        return linear_scheduler(t, 0.0, alpha_i, t_warmup)
    frac_of_total = ((t - t_warmup) / (t_max - t_warmup)) if (t_max > t_warmup) else 0.0
    frac_of_total = min(1.0, frac_of_total)
    return alpha_i + frac_of_total * (alpha_f - alpha_i)


def constant_with_warmup(t, t_warmup, t_max, alpha):
    return linear_with_warmup(t, t_warmup, t_max, alpha, alpha)


def composer_alpha(cfg, t, total):
    t_max = cfg.get("t_max", 0) or total  # '1dur' = max_duration
    w = cfg.get("t_warmup", 0)
    name = cfg["name"]
    if name == "constant":
        return 1.0
    if name == "cosine_with_warmup":
        return cosine_with_warmup(t, w, t_max, cfg.get("alpha_f", 0.0))
    if name == "linear_decay_with_warmup":
        return linear_with_warmup(t, w, t_max, cfg.get("alpha_i", 1.0), cfg.get("alpha_f", 0.0))
    if name == "constant_with_warmup":
        return constant_with_warmup(t, w, t_max, cfg.get("alpha_i", 1.0))
    raise ValueError(name)


def composer_trainer_lrs(cfg, lr, steps, total):
    """(i): the lr each batch trains with in Composer's loop, without torch: batch 0 uses the
    LambdaLR's initial lr (timestamp 0); after batch b, scheduler.step() sees timestamp b."""
    lrs = []
    current = lr * composer_alpha(cfg, 0, total)
    for b in range(steps):
        lrs.append(current)
        current = lr * composer_alpha(cfg, b, total)  # scheduler.step() before to_next_batch
    return lrs


def lambda_lr_lrs(cfg, lr, steps, total):
    """(ii): torch's LambdaLR driven as Composer's trainer drives it."""
    state = {"batch": 0}
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda _epoch: composer_alpha(cfg, state["batch"], total))
    lrs = []
    for _ in range(steps):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
        state["batch"] += 1  # state.timestamp.to_next_batch(), after the scheduler step
    return lrs


def cosine_annealing_lr_lrs(lr, steps, t_max, alpha_f):
    """(iii): CosineAnnealingLR, stepped once per batch with Composer's one-batch lag."""
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=t_max, eta_min=alpha_f * lr)
    lrs = [opt.param_groups[0]["lr"]]  # batch 0: timestamp 0
    for _ in range(steps - 1):
        lrs.append(opt.param_groups[0]["lr"])  # batch b >= 1: the lr of timestamp b - 1
        opt.step()
        sched.step()
    return lrs


def foundry_lrs(cfg, lr, steps, total):
    cmd = [FOUNDRY_RUN, "--print-schedule", "--steps", str(steps), "--max-steps", str(total),
           "--lr", repr(lr), "--scheduler", cfg["name"]]
    for key, opt in (("t_warmup", "--warmup-steps"), ("t_max", "--decay-steps"),
                     ("alpha_i", "--alpha-i"), ("alpha_f", "--alpha-f")):
        if key in cfg:
            cmd += [opt, repr(cfg[key])]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        failures.append(f"{' '.join(cmd)}: exit {out.returncode}: {out.stderr.strip()}")
        return None
    lrs = []
    for line in out.stdout.splitlines():
        if line.startswith("#"):
            continue
        k, v = line.split()
        check(int(k) == len(lrs) + 1, f"{cfg}: step {k} out of order")
        lrs.append(float(v))
    return lrs


STEPS = 1000
LR = 6.0e-4
CONFIGS = [
    {"name": "constant"},
    {"name": "cosine_with_warmup", "t_warmup": 100, "alpha_f": 0.1},        # llm-foundry's
    {"name": "cosine_with_warmup", "t_warmup": 0, "alpha_f": 0.1},          # no warmup
    {"name": "cosine_with_warmup", "t_warmup": 0},                          # alpha_f 0
    {"name": "cosine_with_warmup", "t_warmup": 1, "alpha_f": 0.0},
    {"name": "cosine_with_warmup", "t_warmup": 37, "t_max": 1500, "alpha_f": 0.05},
    {"name": "cosine_with_warmup", "t_warmup": 1000, "alpha_f": 0.1},       # t_warmup = t_max
    {"name": "cosine_with_warmup", "t_warmup": 1200, "t_max": 1000},        # warmup past t_max
    {"name": "linear_decay_with_warmup", "t_warmup": 100, "alpha_f": 0.1},
    {"name": "linear_decay_with_warmup", "t_warmup": 0, "alpha_i": 0.5, "alpha_f": 0.02},
    {"name": "linear_decay_with_warmup", "t_warmup": 250, "t_max": 3000, "alpha_i": 2.0},
    {"name": "linear_decay_with_warmup", "t_warmup": 1000},                 # t_warmup = t_max
    {"name": "constant_with_warmup", "t_warmup": 100},
    {"name": "constant_with_warmup", "t_warmup": 0, "alpha_i": 0.3},
    {"name": "constant_with_warmup", "t_warmup": 999, "alpha_i": 0.7},
]

worst_cos = 0.0
for cfg in CONFIGS:
    ours = foundry_lrs(cfg, LR, STEPS, STEPS)
    if ours is None:
        continue
    check(len(ours) == STEPS, f"{cfg}: {len(ours)} steps printed")
    composer = composer_trainer_lrs(cfg, LR, STEPS, STEPS)
    torch_lambda = lambda_lr_lrs(cfg, LR, STEPS, STEPS)
    for k, (a, b, c) in enumerate(zip(ours, composer, torch_lambda), start=1):
        if a != b:
            failures.append(f"{cfg}: step {k}: foundry {a!r} != Composer {b!r}")
            break
        if a != c:
            failures.append(f"{cfg}: step {k}: foundry {a!r} != torch LambdaLR {c!r}")
            break
    # The first two steps of a warmup run with lr 0 (Composer's timestamp lag).
    if cfg.get("t_warmup", 0) > 0 and cfg["name"] != "constant":
        check(ours[0] == 0.0 and ours[1] == 0.0, f"{cfg}: steps 1, 2 have lr {ours[:2]}, not 0")
        check(ours[2] > 0.0, f"{cfg}: step 3 has lr {ours[2]}")
    if cfg["name"] == "cosine_with_warmup" and cfg.get("t_warmup", 0) == 0:
        t_max = cfg.get("t_max", STEPS)
        ref = cosine_annealing_lr_lrs(LR, STEPS, t_max, cfg.get("alpha_f", 0.0))
        err = max(abs(a - b) for a, b in zip(ours, ref)) / LR
        worst_cos = max(worst_cos, err)
        check(err <= 1e-12, f"{cfg}: CosineAnnealingLR differs by {err:.3g} * lr")

# A schedule of llm-foundry's shape end to end: 4800 steps, t_warmup 100ba, alpha_f 0.1.
cfg = {"name": "cosine_with_warmup", "t_warmup": 100, "alpha_f": 0.1}
ours = foundry_lrs(cfg, LR, 4800, 4800)
if ours is not None:
    check(ours == composer_trainer_lrs(cfg, LR, 4800, 4800), "4800-step cosine differs")
    check(ours[-1] == LR * composer_alpha(cfg, 4798, 4800), "4800-step cosine: last lr")

print(f"{len(CONFIGS)} schedules x {STEPS} steps: bitwise equal to Composer's formulas and to "
      f"torch {torch.__version__} LambdaLR; CosineAnnealingLR within {worst_cos:.3g} * lr")
if failures:
    for f in failures[:20]:
        print("FAIL:", f)
    sys.exit(1)
print("OK")
