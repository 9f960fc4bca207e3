#!/usr/bin/python3
"""PyTorch eager's side of the memory and step-time comparison (issue 9), on models/ configs.

    /usr/bin/python3 bench/pytorch_side.py --config mpt_125m --seq 1024 --steps 0
    /usr/bin/python3 bench/pytorch_side.py --config mpt_125m --seq 256 --threads 1 2 --steps 5

For each (seq, threads) pair, in a fresh process of its own (so that one measurement's memory does
not count in the next one's peak), prints one JSON line:

- saved_for_backward_bytes: the unique storages torch.autograd.graph.saved_tensors_hooks sees
  during one forward, each counted once at its full size, parameters excluded (a storage whose
  data pointer is a parameter's: weights saved as themselves or as views, e.g. W.t()). Feeds
  (input_ids, labels) are included there as PyTorch holds them; saved_input_bytes says how much
  of it they are (foundry's report excludes feeds).
- with --steps K > 0: step_seconds, the median of K training steps (forward, backward and an
  AdamW step) after one warm-up step, and the memory: rss_baseline_bytes (resident set size
  before the model is built, torch imported), peak_rss_bytes (getrusage maxrss at the end) and
  peak_minus_baseline_bytes.

The model is the config's random init (families.seeded_model), batch 1 unless --batch, in training
mode; torch.set_num_threads(threads).
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


def saved_bytes(model, input_ids, labels):
    """Saved-for-backward storages of one forward: (bytes excluding parameters, of which feeds)."""
    import torch
    params = {storage_key(p)[0] for p in model.parameters()}
    feeds = {storage_key(t)[0] for t in (input_ids, labels)}
    seen = {}

    def pack(t):
        ptr, nbytes = storage_key(t)
        if ptr not in params:
            seen[ptr] = max(seen.get(ptr, 0), nbytes)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(input_ids, labels)
    loss.backward()
    model.zero_grad(set_to_none=True)
    return sum(seen.values()), sum(n for p, n in seen.items() if p in feeds)


def measure_one(config_name: str, batch: int, seq: int, threads: int, steps: int) -> dict:
    import torch
    from models import families

    torch.set_num_threads(threads)
    baseline = current_rss_bytes()
    config = families.load_config(config_name)
    model = families.seeded_model(config)
    input_ids, labels = families.make_inputs(config, batch, seq)
    result = {"config": config["name"], "batch": batch, "seq": seq, "threads": threads,
              "torch": torch.__version__}
    result["saved_for_backward_bytes"], result["saved_input_bytes"] = saved_bytes(
        model, input_ids, labels)
    if steps > 0:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        times = []
        for i in range(steps + 1):  # step 0 warms up (and allocates AdamW's state)
            t0 = time.perf_counter()
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
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # child process
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(measure_one(args.config, args.batch, args.seq[0], args.threads[0],
                                     args.steps)), flush=True)
        return 0
    status = 0
    for seq in args.seq:
        for threads in args.threads:
            cmd = [sys.executable, os.path.abspath(__file__), "--one", "--config", args.config,
                   "--batch", str(args.batch), "--seq", str(seq), "--threads", str(threads),
                   "--steps", str(args.steps)]
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
            if proc.returncode != 0:
                print(f"pytorch_side: error: seq {seq}, {threads} threads: the measuring process "
                      f"exited with status {proc.returncode}", file=sys.stderr)
                status = 1
                continue
            sys.stdout.write(proc.stdout)
            sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
