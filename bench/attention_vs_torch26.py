#!/usr/bin/python3
"""PyTorch 2.6's side of the fused-attention comparison (bench/attention_vs_torch26.sh), run
inside the PyTorch 2.6 chroot (scripts/torch26-env.sh).

    scripts/torch26-env.sh run python3 bench/attention_vs_torch26.py --saved
    scripts/torch26-env.sh run python3 bench/attention_vs_torch26.py --kernel
    scripts/torch26-env.sh run python3 bench/attention_vs_torch26.py --saved --kernel \
        --seq 1024 --threads 1 2 --reps 5

Prints one JSON object on stdout with a "saved" and/or a "kernel" member.

--saved: models/configs/mpt_125m_alibi.json (MPT-125M shape, ALiBi, no_bias, tied embeddings)
with attn_impl switched to "sdpa" (models/mpt.py: F.scaled_dot_product_attention with the ALiBi
bias + causal mask as one additive attn_mask, as a torch 2.x user writes it), fp32, batch 1, for
each target (none, grouped_query_attention, mptmlp, both = grouped_query_attention + mptmlp,
mptblock) and seq: the bytes autograd keeps for the backward, measured by bench/pytorch_side.py
(--steps 0, one fresh process per measurement): unique storages seen by saved_tensors_hooks,
parameters excluded, plus each checkpointed region's inputs (llm-foundry-style non-reentrant
checkpoint_wrapper). `saved_bytes` is that total without the feeds (input_ids, which the embedding
keeps), the number foundry's report compares with (bench/ckpt_vs_pytorch.sh does the same);
`saved_for_backward_bytes` keeps them. `reference` is REFERENCE.md's measurement of the same
thing and `matches_reference` whether it is exactly reproduced (with or without the feeds).
Measured here (torch 2.6.0+debian): the CPU flash kernel saves attn_mask for its backward, and
models/mpt.py's sdpa path materialises the [1, H, S, S] ALiBi + causal mask in every layer, so
`none` and `mptmlp` keep 12 such masks (48 MiB each at seq 1024) on top of what foundry keeps;
REFERENCE.md's numbers for those two targets do not include them.
--saved --precision amp_bf16: the same under torch.autocast("cpu", dtype=torch.bfloat16) (PyTorch's
CPU autocast: SDPA and the linears in bf16, the mask cast to bf16 with them; autocast's cached bf16
weight copies count, they are not parameter storage). `reference` is none then.

--kernel: F.scaled_dot_product_attention alone on the CPU, fp32, q/k/v [1, 12, S, 64] (MPT-125M's
attention) with requires_grad, scale 1/8, in two forms: `alibi_mask` (an additive float attn_mask
[1, 12, S, S]: ALiBi bias + causal mask filled with finfo(float32).min, as models/mpt.py builds it)
and `is_causal` (is_causal=True, no mask). For each S and T (torch.set_num_threads(T);
OPENBLAS_NUM_THREADS is set to --blas-threads, default 1, before torch is imported, because torch's
intra-op threads and OpenBLAS's multiply): median ms of --reps runs after --warmup runs of the
forward (grad mode on, as in training: the flash kernel also writes the logsumexp) and of the
forward + backward (a fixed random output gradient). `grad_fn` names the kernel autograd recorded
(ScaledDotProductFlashAttentionForCpuBackward0 is the flash kernel; a math fallback would show
other nodes). Timings depend on the machine's load, which is recorded before and after.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

CONFIG = "mpt_125m_alibi"
TARGETS = ["none", "grouped_query_attention", "mptmlp", "both", "mptblock"]
# REFERENCE.md "Attention memory": SDPA with an ALiBi+causal attn_mask, no biases, fp32, batch 1.
REFERENCE = {
    (1024, "none"): 892_887_044,
    (1024, "grouped_query_attention"): 665_804_804,
    (1024, "mptmlp"): 590_897_156,
    (1024, "both"): 363_814_916,
    (1024, "mptblock"): 250_372_100,
    (2048, "none"): 1_785_774_084,
    (2048, "mptblock"): 500_744_196,
}


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def measure_saved(seqs, targets, threads, precision="fp32"):
    """Runs bench/pytorch_side.py on the sdpa variant of CONFIG; returns the "saved" member.
    precision amp_bf16: every forward under torch.autocast("cpu", dtype=torch.bfloat16)."""
    from models import families
    config = families.load_config(CONFIG)
    config["attn_config"] = dict(config["attn_config"], attn_impl="sdpa")
    rows = []
    with tempfile.TemporaryDirectory(prefix="attn-torch26-") as tmp:
        path = os.path.join(tmp, CONFIG + "_sdpa.json")
        with open(path, "w") as f:
            json.dump(config, f)
        cmd = [sys.executable, os.path.join(REPO, "bench", "pytorch_side.py"), "--config", path,
               "--steps", "0", "--threads", str(threads), "--seq", *map(str, seqs),
               "--autocast", "bf16" if precision == "amp_bf16" else "none"]
        for t in targets:
            cmd += ["--ckpt", t]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
        lines = [json.loads(l) for l in proc.stdout.splitlines() if l.strip()]
        if proc.returncode != 0:
            print(f"attention_vs_torch26: pytorch_side.py exited with {proc.returncode} "
                  f"({len(lines)} of {len(seqs) * len(targets)} measurements)", file=sys.stderr)
    for d in lines:
        saved = d["saved_for_backward_bytes"] - d["saved_input_bytes"]
        ref = REFERENCE.get((d["seq"], d["ckpt"])) if precision == "fp32" else None
        rows.append({
            "target": d["ckpt"], "seq": d["seq"], "batch": d["batch"],
            "saved_bytes": saved,
            "saved_for_backward_bytes": d["saved_for_backward_bytes"],
            "saved_input_bytes": d["saved_input_bytes"],
            "region_input_bytes": d["region_input_bytes"],
            "checkpointed_modules": d["checkpointed_modules"],
            "grad_max_abs_diff_vs_plain": d.get("grad_max_abs_diff_vs_plain"),
            "saved_storage_sizes": d["saved_storage_sizes"],
            "reference": ref,
            "matches_reference": None if ref is None else ref in (saved,
                                                                  d["saved_for_backward_bytes"]),
        })
    return {"config": CONFIG, "attn_impl": "sdpa", "precision": precision,
            "dtype": "float32" if precision == "fp32" else "autocast bfloat16",
            "torch": lines[0]["torch"] if lines else None, "method": "bench/pytorch_side.py",
            "complete": proc.returncode == 0, "results": rows}


def alibi_causal_mask(torch, heads, seq):
    """[1, H, S, S] float: ALiBi bias (models/mpt.py) + causal mask filled with finfo.min."""
    from models import mpt
    bias = mpt.build_alibi_bias(mpt.gen_slopes(heads), seq)                    # 1, H, 1, S
    pos = torch.arange(seq)
    causal = torch.zeros(seq, seq).masked_fill(pos.unsqueeze(0) > pos.unsqueeze(1),
                                               torch.finfo(torch.float32).min)
    return (bias + causal).contiguous()                                      # 1, H, S, S


def measure_kernel(seqs, threads_list, reps, warmup, heads=12, head_dim=64):
    import torch
    import torch.nn.functional as F
    torch.manual_seed(0)
    rows = []
    for seq in seqs:
        gen = torch.Generator().manual_seed(seq)
        q, k, v, dout = (torch.randn(1, heads, seq, head_dim, generator=gen) for _ in range(4))
        for x in (q, k, v):
            x.requires_grad_(True)
        mask = alibi_causal_mask(torch, heads, seq)
        forms = {
            "alibi_mask": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
            "is_causal": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        }
        for threads in threads_list:
            torch.set_num_threads(threads)
            for form, fn in forms.items():
                def fwd():
                    return fn()

                def fwd_bwd():
                    out = fn()
                    out.backward(dout)
                    q.grad = k.grad = v.grad = None
                    return out

                times = {}
                for name, step in (("fwd", fwd), ("fwd_bwd", fwd_bwd)):
                    for _ in range(warmup):
                        step()
                    ts = []
                    for _ in range(reps):
                        t0 = time.perf_counter()
                        out = step()
                        ts.append((time.perf_counter() - t0) * 1000)
                        del out
                    times[name] = ts
                grad_fn = fn().grad_fn
                rows.append({
                    "seq": seq, "threads": threads, "form": form,
                    "fwd_ms": round(statistics.median(times["fwd"]), 3),
                    "fwd_bwd_ms": round(statistics.median(times["fwd_bwd"]), 3),
                    "fwd_ms_all": [round(t, 3) for t in times["fwd"]],
                    "fwd_bwd_ms_all": [round(t, 3) for t in times["fwd_bwd"]],
                    "grad_fn": type(grad_fn).__name__ if grad_fn is not None else None,
                    "get_num_threads": torch.get_num_threads(),
                })
                print(f"attention_vs_torch26: kernel seq {seq} threads {threads} {form}: "
                      f"fwd {rows[-1]['fwd_ms']} ms, fwd+bwd {rows[-1]['fwd_bwd_ms']} ms "
                      f"({rows[-1]['grad_fn']})", file=sys.stderr)
    return {"torch": torch.__version__, "dtype": "float32",
            "shape": [1, heads, None, head_dim], "scale": 1 / head_dim ** 0.5,
            "reps": reps, "warmup": warmup,
            "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS"),
            "parallel_info": torch.__config__.parallel_info().splitlines()[:6],
            "results": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--saved", action="store_true", help="saved-for-backward bytes (MPT-125M ALiBi)")
    ap.add_argument("--kernel", action="store_true", help="SDPA kernel timing")
    ap.add_argument("--seq", type=int, nargs="+", default=[1024, 2048])
    ap.add_argument("--targets", nargs="+", default=TARGETS, help="--saved targets")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2],
                    help="--kernel: torch.set_num_threads values (--saved uses the largest)")
    ap.add_argument("--precision", choices=["fp32", "amp_bf16"], default="fp32",
                    help="--saved: amp_bf16 runs the forward under torch.autocast(\"cpu\", "
                         "dtype=torch.bfloat16)")
    ap.add_argument("--blas-threads", type=int, default=1,
                    help="OPENBLAS_NUM_THREADS / OMP_NUM_THREADS before torch is imported")
    ap.add_argument("--reps", type=int, default=5, help="--kernel: timed runs (median)")
    ap.add_argument("--warmup", type=int, default=1, help="--kernel: untimed runs first")
    args = ap.parse_args(argv)
    if not (args.saved or args.kernel):
        ap.error("give --saved and/or --kernel")
    # run.sh starts the chroot with an empty environment; thread counts are set here, before
    # torch (and OpenBLAS) load. pytorch_side.py's children inherit them.
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.blas_threads)
    out = {"machine": {"nproc": os.cpu_count(), "loadavg_start": loadavg()}}
    if args.saved:
        out["saved"] = measure_saved(args.seq, args.targets, max(args.threads), args.precision)
    if args.kernel:
        out["kernel"] = measure_kernel(args.seq, args.threads, args.reps, args.warmup)
    out["machine"]["loadavg_end"] = loadavg()
    print(json.dumps(out, indent=1))
    ok = not args.saved or out["saved"]["complete"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
