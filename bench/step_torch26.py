#!/usr/bin/python3
"""PyTorch 2.6's side of bench/step_vs_torch26.sh: training steps of a models/ config, run inside
the PyTorch 2.6 chroot (scripts/torch26-env.sh), one measurement per process.

    scripts/torch26-env.sh run python3 bench/step_torch26.py --config mpt_125m --seq 256 \
        --torch-threads 1 --blas-threads 2 --steps 3 --warmup 1 [--ckpt mptmlp]

Prints one JSON line: step_ms (each timed step: forward, backward, AdamW step, zero_grad, wall
clock), median_ms, the thread setting actually in force (torch.get_num_threads(), OpenBLAS's
openblas_get_num_threads()), the OpenBLAS kernels in use (openblas_get_corename(), read through
ctypes from the library torch loaded; OPENBLAS_VERBOSE=2 prints the same "Core:" at load), the
attention implementation, the loss of the last step.

torch's intra-op threads and OpenBLAS's threads multiply (torch calls OpenBLAS from inside its
own parallel regions), so both are set here: OPENBLAS_NUM_THREADS = --blas-threads and
OMP_NUM_THREADS = --torch-threads before torch is imported (the chroot runs with `env -i`), then
torch.set_num_threads(--torch-threads). OPENBLAS_CORETYPE is left as it is (unset in the chroot:
OpenBLAS picks its kernels from the CPU).

The model is the config's seeded random init (models/families.seeded_model), batch 1, training
mode, AdamW with foundry-run's defaults (lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0),
inputs from families.make_inputs (bench/step_vs_torch26.sh feeds foundry the same tokens). MPT configs run with attn_impl "sdpa"
(F.scaled_dot_product_attention; without ALiBi with is_causal=True), what a torch 2.x user runs;
--attn-impl torch keeps the config's manual attention. GPT-2 configs run models/gpt2.py as is
(Hugging Face's manual attention, as exported). --ckpt: llm-foundry-style non-reentrant
checkpoint_wrapper on the target's modules (bench/pytorch_side.py's targets: none, both =
grouped_query_attention,mptmlp, or models/mpt.py MODULE_REGISTRY keys joined by commas).
"""

import argparse
import json
import os
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def blas_info():
    """(core name, OpenBLAS threads, config string) of the OpenBLAS torch loaded, or n/a."""
    import ctypes
    with open("/proc/self/maps") as f:
        libs = sorted({line.split()[-1] for line in f if "openblas" in line and ".so" in line})
    for path in libs:
        try:
            lib = ctypes.CDLL(path)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            lib.openblas_get_config.restype = ctypes.c_char_p
            return (lib.openblas_get_corename().decode(), int(lib.openblas_get_num_threads()),
                    lib.openblas_get_config().decode())
        except (OSError, AttributeError):
            continue
    return "n/a", -1, "n/a"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True, help="config JSON file or name in models/configs")
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--torch-threads", type=int, default=1)
    ap.add_argument("--blas-threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3, help="timed steps")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    ap.add_argument("--ckpt", default="none")
    ap.add_argument("--attn-impl", choices=["sdpa", "torch"], default="sdpa",
                    help="MPT configs only (default sdpa)")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.warmup < 0 or args.torch_threads < 1 or args.blas_threads < 1:
        ap.error("--steps, --torch-threads and --blas-threads must be >= 1, --warmup >= 0")

    os.environ["OPENBLAS_NUM_THREADS"] = str(args.blas_threads)
    os.environ["OMP_NUM_THREADS"] = str(args.torch_threads)
    os.environ["MKL_NUM_THREADS"] = str(args.torch_threads)
    sys.path.insert(0, REPO)
    sys.path.insert(0, os.path.join(REPO, "bench"))
    import torch
    from models import families, mpt
    from pytorch_side import ckpt_keys

    torch.set_num_threads(args.torch_threads)
    config = families.load_config(args.config)
    attn_impl = "n/a"
    if families.family(config) == "mpt":
        attn_impl = args.attn_impl
        config["attn_config"] = dict(config.get("attn_config", {}), attn_impl=attn_impl)
    model = families.seeded_model(config)
    keys = ckpt_keys(args.ckpt)
    wrapped = mpt.apply_activation_checkpointing(model, keys) if keys else 0
    if keys and not wrapped:
        ap.error(f"--ckpt {args.ckpt}: no module of {config['name']} matches")
    model.train()
    input_ids, labels = families.make_inputs(config, args.batch, args.seq)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.0)
    times = []
    for i in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        loss = model(input_ids, labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i >= args.warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    core, blas_threads, blas_config = blas_info()
    print(json.dumps({
        "config": config["name"], "seq": args.seq, "batch": args.batch, "ckpt": args.ckpt,
        "checkpointed_modules": wrapped, "attn_impl": attn_impl, "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(), "blas_threads": blas_threads,
        "blas_core": core, "blas_config": blas_config, "warmup": args.warmup,
        "step_ms": [round(t, 3) for t in times], "median_ms": round(statistics.median(times), 3),
        "loss_last": round(float(loss), 6),
    }), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
