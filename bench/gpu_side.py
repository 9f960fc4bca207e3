#!/usr/bin/env python3
"""PyTorch eager's side of the GPU benchmark (bench/gpu_vs_pytorch.sh): models/mpt.py on CUDA, fp32, TF32 off.

    python3 bench/gpu_side.py --config mpt_125m --batch 8 --seq 1024 --steps 3 \
        --ckpt none --ckpt grouped_query_attention --ckpt mptblock

For each --ckpt (none, or models/mpt.py MODULE_REGISTRY keys joined by commas, wrapped by
models.mpt.apply_activation_checkpointing: torch's non-reentrant checkpoint_wrapper, as
llm-foundry applies it), one JSON line on stdout:

- step_seconds: the median of --steps training steps (forward, backward, AdamW step,
  zero_grad; the loss read back to the host, as foundry-run does) after one warm-up step,
  each timed between two torch.cuda.synchronize(); tokens_per_s = batch * seq / step_seconds;
- peak_allocated_bytes: torch.cuda.max_memory_allocated() over the row, counted from before the
  model is built (parameters, gradients, AdamW state, activations, cuBLAS workspace; no CUDA
  context), and peak_reserved_bytes (the caching allocator's high-water mark);
- the torch and CUDA versions, the device, the TF32 setting as read back.

Rows run one after another in one process (the import and the CUDA context once): each row
frees its model and optimizer and resets the peak before the next. The weights are made on the
device: matrices N(0, 0.02) as foundry's own initialisation, norms and biases PyTorch's default
(the values differ from foundry's: the numbers compared are speed and memory; the losses only
show that both sides train). AdamW is torch.optim.AdamW's default (foreach on CUDA).
--device cpu runs the same code on the CPU (a smoke test where there is no GPU: no peaks).
"""

import argparse
import gc
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CONFIGS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "models", "configs")


def load_config(name_or_path: str) -> dict:
    path = name_or_path if os.path.exists(name_or_path) else os.path.join(
        CONFIGS_DIR, name_or_path + ".json")
    with open(path) as f:
        config = json.load(f)
    config.setdefault("name", os.path.splitext(os.path.basename(path))[0])
    return config


def tf32_off(torch) -> str:
    """Exact fp32 matrix products; returns the setting as torch reports it. torch >= 2.9 has
    fp32_precision and raises when the legacy allow_tf32 flags are mixed with it, so only one
    API is touched."""
    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):
        matmul.fp32_precision = "ieee"
        torch.backends.cudnn.fp32_precision = "ieee"
        return f"cuda.matmul.fp32_precision={matmul.fp32_precision}"
    matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    return f"cuda.matmul.allow_tf32={matmul.allow_tf32}"


def measure(torch, config: dict, batch: int, seq: int, steps: int, ckpt: str,
            device: str) -> dict:
    from models import mpt

    cuda = device == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    model = mpt.build_model(config, device=device)
    model.train()
    gen = torch.Generator(device=device).manual_seed(1)
    with torch.no_grad():  # foundry's scale (runtime/param_init.h), so both losses start near ln V
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.02, generator=gen)
    keys = [] if ckpt == "none" else ckpt.split(",")
    wrapped = mpt.apply_activation_checkpointing(model, keys) if keys else 0
    input_ids = torch.randint(0, config.get("vocab_size", 50368), (batch, seq), device=device,
                              generator=gen)
    labels = input_ids.clone()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    times, loss_value = [], None
    for i in range(steps + 1):  # step 0 warms up (cuBLAS heuristics, AdamW state)
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = model(input_ids, labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss_value = float(loss)
        if cuda:
            torch.cuda.synchronize()
        if i:
            times.append(time.perf_counter() - t0)
    step = statistics.median(times) if times else 0.0
    row = {
        "config": config["name"], "batch": batch, "seq": seq, "ckpt": ckpt,
        "checkpointed_modules": wrapped, "steps": steps,
        "step_seconds": round(step, 5),
        "step_seconds_all": [round(t, 5) for t in times],
        "tokens_per_s": round(batch * seq / step, 1) if step > 0 else 0.0,
        "loss_last": round(loss_value, 6),
    }
    if cuda:
        row["peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
        row["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
    del model, opt, loss, input_ids, labels
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="mpt_125m", help="config JSON file or name in models/configs")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up")
    ap.add_argument("--ckpt", action="append", help="checkpointing target, repeatable (one row "
                    "each): none or models/mpt.py MODULE_REGISTRY keys joined by commas")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    args = ap.parse_args(argv)

    import torch
    from models import mpt

    targets = args.ckpt or ["none"]
    for target in targets:
        bad = [k for k in ([] if target == "none" else target.split(","))
               if k.lower() not in mpt.MODULE_REGISTRY]
        if bad:
            ap.error(f"--ckpt {target}: unknown target {bad[0]!r} "
                     f"(known: none, {', '.join(sorted(mpt.MODULE_REGISTRY))})")
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_side: error: torch.cuda.is_available() is False (torch "
              f"{torch.__version__}, built for CUDA {torch.version.cuda})", file=sys.stderr)
        return 1
    config = load_config(args.config)
    info = {"torch": torch.__version__, "torch_cuda": torch.version.cuda}
    if args.device == "cuda":
        info["tf32"] = tf32_off(torch)
        info["gpu"] = torch.cuda.get_device_name(0)
    status = 0
    for target in targets:
        try:
            row = measure(torch, config, args.batch, args.seq, args.steps, target, args.device)
        except torch.cuda.OutOfMemoryError as e:  # a row that does not fit is a result too
            row = {"config": config["name"], "batch": args.batch, "seq": args.seq,
                   "ckpt": target, "error": "out of memory: " + str(e).split("\n")[0]}
            status = 1
            gc.collect()
            torch.cuda.empty_cache()
        row.update(info)
        print(json.dumps(row), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
