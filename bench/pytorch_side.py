#!/usr/bin/python3
"""PyTorch eager's side of the memory and step-time comparisons (bench/vs_pytorch.sh,
bench/ckpt_vs_pytorch.sh), on models/ configs.

    /usr/bin/python3 bench/pytorch_side.py --config mpt_125m --seq 1024 --steps 0
    /usr/bin/python3 bench/pytorch_side.py --config mpt_125m --seq 256 --threads 1 2 --steps 5
    /usr/bin/python3 bench/pytorch_side.py --config mpt_125m --seq 1024 --steps 0 \
        --ckpt none --ckpt grouped_query_attention --ckpt both --ckpt mptblock

For each (ckpt, seq, threads) triple, in a fresh process of its own (so that one measurement's
memory does not count in the next one's peak), prints one JSON line:

- saved_for_backward_bytes: what autograd keeps from one forward for the backward, as unique
  storages, each counted once at its full size (a view counts as its base storage), parameters
  excluded (a storage whose data pointer is a parameter's: weights saved as themselves or as
  views, e.g. W.t()). It is the union of
  - the storages torch.autograd.graph.saved_tensors_hooks sees during the forward (outside
    checkpointed regions: torch's non-reentrant checkpoint installs its own hooks inside a region,
    which replace the tensors saved there by empty placeholders and so hide them from ours), and
  - with --ckpt, each checkpointed region's tensor inputs (positional and keyword arguments of the
    wrapped module: a block's `x`, an attention's normalised input, the ALiBi bias when there is
    one): the checkpoint's recompute closure holds them until the backward, so they stay alive
    after the forward whether or not anything outside saved them.
  The tensors a region's recompute saves exist only during the backward and are not counted
  (the same as foundry's saved-for-backward, which is what stays alive from the forward into the
  backward). Feeds (input_ids, labels) are included as PyTorch holds them; saved_input_bytes says
  how much of the total they are (foundry's report excludes feeds). region_input_bytes says how
  much of the total is held only as a region input (not also seen by the hooks);
  saved_storage_sizes counts the storages by size ({bytes: how many}), to tell which tensors
  make a difference against foundry's saved values.
- ckpt, checkpointed_modules: the target (none; a registry key of models/mpt.py's
  MODULE_REGISTRY such as grouped_query_attention, mptmlp or mptblock; several joined by commas;
  `both` = grouped_query_attention,mptmlp) and how many modules it wrapped
  (models.mpt.apply_activation_checkpointing: torch's checkpoint_wrapper with
  CheckpointImpl.NO_REENTRANT, as llm-foundry/Composer apply it).
- with --ckpt other than none and --steps 0: loss_abs_diff_vs_plain and grad_max_abs_diff_vs_plain,
  the same forward and backward on the same weights and inputs without the wrapping (also printed
  on stderr): the wrapping does not change the numbers.
- with --steps K > 0: step_seconds, the median of K training steps (forward, backward and an
  AdamW step) after one warm-up step, and the memory: rss_baseline_bytes (resident set size
  before the model is built, torch imported), peak_rss_bytes (getrusage maxrss at the end) and
  peak_minus_baseline_bytes.

The model is the config's random init (families.seeded_model), batch 1 unless --batch, in training
mode; torch.set_num_threads(threads). --autocast bf16 runs every forward under
torch.autocast("cpu", dtype=torch.bfloat16) (the recorded "autocast" field says which): autocast's
cached bf16 weight copies that the backward reads are counted (they are not parameter storage).
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def current_rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def storage_key(t):
    """(data pointer, bytes) of the whole storage under a tensor (a view counts as its base)."""
    s = t.storage()
    return s.data_ptr(), s.size() * t.element_size()


CKPT_ALIASES = {"both": "grouped_query_attention,mptmlp"}


def ckpt_keys(target: str):
    """Registry keys of a --ckpt value ([] for none)."""
    target = CKPT_ALIASES.get(target, target)
    return [] if target == "none" else target.split(",")


def record_region_inputs(model, record):
    """Makes every checkpoint wrapper in `model` call record(tensor) for each tensor argument of
    its region before checkpointing it as before."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper
    import torch

    for mod in model.modules():
        if isinstance(mod, CheckpointWrapper):
            def recording(fn, *args, _inner=mod.checkpoint_fn, **kwargs):
                for a in list(args) + list(kwargs.values()):
                    if isinstance(a, torch.Tensor):
                        record(a)
                return _inner(fn, *args, **kwargs)
            mod.checkpoint_fn = recording


def autocast_context(autocast: str):
    """torch.autocast("cpu", dtype=torch.bfloat16) for --autocast bf16, else a no-op context."""
    import contextlib
    import torch
    if autocast == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def saved_bytes(model, input_ids, labels, autocast="none"):
    """Saved-for-backward storages of one forward (see the module docstring): (bytes excluding
    parameters, of which feeds, of which held only as checkpointed regions' inputs, loss,
    {storage bytes: count})."""
    import torch
    params = {storage_key(p)[0] for p in model.parameters()}
    feeds = {storage_key(t)[0] for t in (input_ids, labels)}
    seen, region = {}, {}

    def add(into, t):
        ptr, nbytes = storage_key(t)
        if ptr not in params:
            into[ptr] = max(into.get(ptr, 0), nbytes)

    def pack(t):
        add(seen, t)
        return t

    record_region_inputs(model, lambda t: add(region, t))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), autocast_context(autocast):
        loss = model(input_ids, labels)
    loss.backward()
    only_region = {p: n for p, n in region.items() if p not in seen}
    seen.update({p: max(n, seen.get(p, 0)) for p, n in region.items()})
    sizes = {}
    for n in seen.values():
        sizes[n] = sizes.get(n, 0) + 1
    return (sum(seen.values()), sum(n for p, n in seen.items() if p in feeds),
            sum(only_region.values()), loss, dict(sorted(sizes.items(), reverse=True)))


def grads_of(model):
    """Gradients by parameter name, the checkpoint wrappers' name component dropped."""
    return {name.replace("_checkpoint_wrapped_module.", ""): p.grad.detach().clone()
            for name, p in model.named_parameters() if p.grad is not None}


def measure_one(config_name: str, batch: int, seq: int, threads: int, steps: int,
                ckpt: str, autocast: str = "none") -> dict:
    import torch
    from models import families, mpt

    torch.set_num_threads(threads)
    baseline = current_rss_bytes()
    config = families.load_config(config_name)
    model = families.seeded_model(config)
    keys = ckpt_keys(ckpt)
    wrapped = mpt.apply_activation_checkpointing(model, keys) if keys else 0
    input_ids, labels = families.make_inputs(config, batch, seq)
    result = {"config": config["name"], "batch": batch, "seq": seq, "threads": threads,
              "torch": torch.__version__, "ckpt": ckpt, "checkpointed_modules": wrapped,
              "autocast": autocast}
    (result["saved_for_backward_bytes"], result["saved_input_bytes"],
     result["region_input_bytes"], loss,
     result["saved_storage_sizes"]) = saved_bytes(model, input_ids, labels, autocast)
    if keys and steps == 0:
        # The same step without the wrapping, on a second copy of the same seeded weights.
        plain = families.seeded_model(config)
        with autocast_context(autocast):
            plain_loss = plain(input_ids, labels)
        plain_loss.backward()
        got, want = grads_of(model), grads_of(plain)
        if set(got) != set(want):
            raise RuntimeError(f"checkpointed and plain models have different parameters: "
                               f"{sorted(set(got) ^ set(want))[:5]}")
        result["loss_abs_diff_vs_plain"] = abs(float(loss) - float(plain_loss))
        result["grad_max_abs_diff_vs_plain"] = max(
            float((got[n] - want[n]).abs().max()) for n in got)
        print(f"pytorch_side: ckpt {ckpt}: loss |diff| {result['loss_abs_diff_vs_plain']}, "
              f"gradients max |diff| {result['grad_max_abs_diff_vs_plain']} "
              f"over {len(got)} parameters", file=sys.stderr)
        del plain
    model.zero_grad(set_to_none=True)
    if steps > 0:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        times = []
        for i in range(steps + 1):  # step 0 warms up (and allocates AdamW's state)
            t0 = time.perf_counter()
            with autocast_context(autocast):
                loss = model(input_ids, labels)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if i:
                times.append(time.perf_counter() - t0)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
        result.update({
            "steps": steps,
            "step_seconds": round(statistics.median(times), 4),
            "step_seconds_all": [round(t, 4) for t in times],
            "loss_last": round(float(loss), 6),
            "rss_baseline_bytes": baseline,
            "peak_rss_bytes": peak,
            "peak_minus_baseline_bytes": peak - baseline,
        })
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="mpt_125m", help="config JSON file or name in models/configs")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, nargs="+", default=[256])
    ap.add_argument("--threads", type=int, nargs="+", default=[1])
    ap.add_argument("--steps", type=int, default=5,
                    help="timed training steps after one warm-up (0: saved bytes only)")
    ap.add_argument("--ckpt", action="append",
                    help="activation checkpointing target, repeatable (one measurement each): "
                         "none, both (= grouped_query_attention,mptmlp), or models/mpt.py "
                         "MODULE_REGISTRY keys joined by commas; default none")
    ap.add_argument("--autocast", choices=["none", "bf16"], default="none",
                    help="bf16: the forward under torch.autocast(\"cpu\", dtype=torch.bfloat16), "
                         "as llm-foundry's precision: amp_bf16 runs it (weights and AdamW state "
                         "stay fp32)")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # child process
    args = ap.parse_args(argv)
    targets = args.ckpt or ["none"]
    from models import mpt
    for target in targets:
        bad = [k for k in ckpt_keys(target) if k.lower() not in mpt.MODULE_REGISTRY]
        if bad:
            ap.error(f"--ckpt {target}: unknown target {bad[0]!r} (known: none, both, "
                     f"{', '.join(sorted(mpt.MODULE_REGISTRY))})")
    if args.one:
        print(json.dumps(measure_one(args.config, args.batch, args.seq[0], args.threads[0],
                                     args.steps, targets[0], args.autocast)), flush=True)
        return 0
    status = 0
    for target in targets:
        for seq in args.seq:
            for threads in args.threads:
                cmd = [sys.executable, os.path.abspath(__file__), "--one", "--config",
                       args.config, "--batch", str(args.batch), "--seq", str(seq), "--threads",
                       str(threads), "--steps", str(args.steps), "--ckpt", target,
                       "--autocast", args.autocast]
                proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
                if proc.returncode != 0:
                    print(f"pytorch_side: error: ckpt {target}, seq {seq}, {threads} threads: "
                          f"the measuring process exited with status {proc.returncode}",
                          file=sys.stderr)
                    status = 1
                    continue
                sys.stdout.write(proc.stdout)
                sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
