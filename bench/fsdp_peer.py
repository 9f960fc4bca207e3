#!/usr/bin/env python3
"""PyTorch's own per-rank peak live bytes for FSDP1 training of MPT-125M (the PyTorch side of
bench/fsdp_vs_pytorch.sh), run inside the PyTorch 2.6 chroot (scripts/torch26-env.sh), CPU only.

    scripts/torch26-env.sh run env USE_LIBUV=0 python3 bench/fsdp_peer.py --batch 1 --seq 256 \
        --sharding FULL_SHARD --ckpt none --mixed-precision DEFAULT
    scripts/torch26-env.sh run python3 bench/fsdp_peer.py --check

One measurement spawns --world-size ranks (torch.multiprocessing, gloo over 127.0.0.1; this torch
has no libuv, so the TCP store runs with USE_LIBUV=0, which the script sets itself) and prints one
JSON line per rank, in rank order:
  peak_bytes: the most bytes live during the LAST step (forward, loss, backward, optimizer.step,
    zero_grad(set_to_none=True)); with the default --steps 2 that is the second step, when the
    AdamW state exists; peak_bytes_by_step: each step's peak; counter: what counted them;
  peak_breakdown: with --counter memtracker, MemTracker's classes at that peak (Parameter,
    Buffer, Gradient, Activation, Temp, Optstate, Other; FSDP's gathered parameters are ops'
    outputs, so they count as Activation in the forward and Temp in the backward); null otherwise;
  peak_bytes_with_collective_buffers: the same peak with gloo's own collective buffers
    counted (see Counting); live_bytes_before / live_bytes_after: live bytes when the last step
    starts and ends (parameter shards, AdamW state, inputs, and the previous step's gradient
    shards: zero_grad drops the parameters' views of them, and FSDP1 with use_orig_params frees
    its flat gradient only in the next forward); seconds_by_step, loss.
bench/fsdp_vs_pytorch.sh takes the largest peak over the ranks.

Counting. --counter allocator (the default): the CPU allocator's own allocations and frees, from
torch.profiler's allocation events (profile_memory=True), profiled from before the model exists,
so every CPU storage and an op's scratch (freed inside the op) are seen, with exact sizes (no
allocator rounding on CPU). --counter memtracker: torch.distributed._tools.mem_tracker.MemTracker
(torch 2.6), a TorchDispatchMode that holds a weak reference to every tensor storage an op
returns, counts its exact bytes until the storage is freed, follows UntypedStorage.resize_ (how
FSDP1 allocates and frees the gathered flat parameter) and takes the peak after every op; it does
not see an op's scratch. MemTracker changes what it measures: with FSDP mixed precision FULL and
sharding (SHARD_GRAD_OP, FULL_SHARD), autograd sums the tied embedding's two f32 gradient
contributions into a new tensor while it runs, in place without it (measured at 1 x 256: the
allocator's peak above the step's start is 383.9 MiB without MemTracker, 525.5 MiB with it, on
FULL_SHARD; 230.4 MiB with and without it on DEFAULT: --check prints both). Left out of peak_bytes, by
both counters: the buffers gloo's collectives allocate for themselves (all_gather_into_tensor
gathers into a flat buffer of the output's size and copies it out; reduce_scatter_tensor clones
its whole input, a full unit's gradient in reduce_dtype), which NCCL's collectives, writing into
the caller's tensors, do not need: at 1 x 256 FULL_SHARD the root unit's clone (the tied
embedding's 161 MB of f32 gradient) would otherwise set the peak. The allocator counter leaves out
allocations under a c10d op or a gloo: range. --check compares the two counters on small cases:
exact bytes of a Linear step worked by hand, a resize_, and FSDP1 steps of MPT-125M at 1 x 64 on
two ranks, both counting in one run (they agree within a few bytes: scratch inside ops); then it
prints the allocator's peak of MPT-125M at 1 x 256 FULL_SHARD, FULL and DEFAULT, measured alone and
with MemTracker in the run (the numbers above).

The model: models/mpt.py's mpt_125m config (the export models/exports/mpt_125m.onnx comes from)
with families.seeded_model's init (weights do not change memory) and attn_impl "sdpa": foundry
fuses attention by default, saving its output and logsumexp as PyTorch 2.6's CPU flash SDPA does
(without ALiBi, is_causal=True); the export itself took attn_impl "torch". Checked at 1 x 256
without FSDP (bench/pytorch_side.py --steps 0 on this config with attn_impl "sdpa"): the bytes
autograd saves for the backward agree with foundry-compile's saved_for_backward_bytes within
2 KiB in fp32 (204.3 MB) and in amp_bf16 (137.9 MB, once the bf16 copies autocast makes of
the f32 weights are set aside: foundry's report leaves them out; under FSDP DEFAULT and PURE the
weights are bf16 already and no copies are made).
Inputs: the config's seeded token ids (families.make_inputs), the same on every rank.

FSDP1 as Composer sets it up for llm-foundry (Composer's FSDPConfig defaults): one unit per
MPTBlock plus the root (ModuleWrapPolicy, as MPT's fsdp_wrap_fn), use_orig_params=True,
limit_all_gathers=True, backward_prefetch=BACKWARD_POST, no forward prefetch, no CPU offload,
keep_low_precision_grads=False, device_id=cpu. --mixed-precision maps fsdp_config.mixed_precision
as Composer does under `precision: amp_bf16`, MixedPrecision(param_dtype, reduce_dtype,
buffer_dtype): FULL = (f32, f32, f32), DEFAULT = (bf16, f32, bf16), PURE = (bf16, bf16, bf16).
--ckpt mptblock: every block in torch's checkpoint_wrapper with CheckpointImpl.NO_REENTRANT,
applied after FSDP wrapping as Composer does (so the checkpoint sits inside each block's FSDP
unit; models.mpt.apply_activation_checkpointing does what torch's apply_activation_checkpointing
does). Optimizer: torch.optim.AdamW, f32 state (foundry-run's defaults: lr 1e-3, betas 0.9/0.999,
eps 1e-8, no weight decay), stepping one parameter at a time (foreach=False, its default for CPU
tensors), as Composer's DecoupledAdamW (llm-foundry's decoupled_adamw) always does: each
parameter's step makes two temporaries of its size (sqrt, then the division). On CUDA tensors
torch.optim.AdamW defaults to foreach, whose sqrt spans every parameter of the rank at once: one
temporary of the rank's parameter bytes instead of two of the largest parameter's (the tied
embedding, 148 MiB in f32 whole, half of that in a FULL_SHARD or SHARD_GRAD_OP shard).

Autocast: forward and loss run under torch.autocast("cpu", dtype=torch.bfloat16), as Composer runs
them under torch.autocast("cuda", ...). CPU autocast's op lists differ from CUDA's: on both,
matmuls (mm, addmm, linear, bmm) and scaled_dot_product_attention run in bf16 and the loss
(cross entropy: log_softmax and nll_loss) in f32, so the loss stays f32 on both; but CUDA's f32
list also holds layer_norm, which CPU autocast leaves alone. With FULL the residual stream is f32
and the two agree. With DEFAULT and PURE (bf16 parameters, so a bf16 residual stream) CUDA casts
each LayerNorm's bf16 input to f32 and saves that f32 copy for the backward, where CPU keeps the
bf16 input: CUDA would save 2 more bytes per element of every LayerNorm input (25 in MPT-125M:
2 per block and the final one, batch x seq x 768 each), 1.5 MiB per 1024 tokens per LayerNorm:
9.4 MiB at 1 x 256 and 150 MiB at 4 x 1024 more than this CPU measurement at the forward's end.
"""

import argparse
import json
import os
import socket
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STRATEGIES = ("NO_SHARD", "SHARD_GRAD_OP", "FULL_SHARD")
PRECISIONS = ("FULL", "DEFAULT", "PURE")


def mixed_precision(name: str):
    """Composer's fsdp_config.mixed_precision under precision amp_bf16. (Composer passes no
    dtypes at all for FULL; with f32 parameters that is the same as f32 everywhere.)"""
    import torch
    from torch.distributed.fsdp import MixedPrecision
    bf16, f32 = torch.bfloat16, torch.float32
    dtypes = {"FULL": (f32, f32, f32), "DEFAULT": (bf16, f32, bf16), "PURE": (bf16, bf16, bf16)}
    param, reduce, buffer = dtypes[name]
    return MixedPrecision(param_dtype=param, reduce_dtype=reduce, buffer_dtype=buffer)


def step_tracker():
    """MemTracker with a peak that restarts at each step, and without the buffers a collective
    allocates inside itself (see __torch_dispatch__), which it keeps apart. MemTracker keeps one
    peak for its whole context and offers no reset; restart_peak sets the two fields it keeps
    it in (torch 2.6)."""
    import weakref

    import torch
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.utils._pytree import tree_leaves

    class StepMemTracker(MemTracker):
        def __init__(self) -> None:
            super().__init__()
            self._collective_depth = 0
            self._collective_refs = {}  # id(storage) -> weak reference; bytes in the callback
            self._collective_live = 0
            self.peak_with_collective_buffers = 0

        # gloo's collectives allocate buffers of their own: all_gather_into_tensor gathers into
        # a flat buffer of the output's size and copies it out, reduce_scatter_tensor clones its
        # whole input. NCCL's write into the caller's tensors and need neither, so the peak leaves
        # these out (and peak_with_collective_buffers keeps them in). They come through this mode
        # only as the views and copies gloo makes of them (while the work completes, in its
        # wait), so any storage first seen inside one of FSDP1's collectives, other than what
        # the c10d op itself returns, is such a buffer.
        _COLLECTIVES = ("all_gather_into_tensor", "reduce_scatter_tensor", "all_reduce")

        def __enter__(self):
            import torch.distributed as dist
            self._unpatched = {name: getattr(dist, name) for name in self._COLLECTIVES}
            for name, fn in self._unpatched.items():
                def collective(*args, _fn=fn, **kwargs):
                    self._collective_depth += 1
                    try:
                        return _fn(*args, **kwargs)
                    finally:
                        self._collective_depth -= 1
                setattr(dist, name, collective)
            return super().__enter__()

        def __exit__(self, *args):
            import torch.distributed as dist
            for name, fn in self._unpatched.items():
                setattr(dist, name, fn)
            return super().__exit__(*args)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if self._collective_depth and func.namespace != "c10d":
                res = func(*args, **(kwargs or {}))
                for t in tree_leaves(res):
                    if isinstance(t, torch.Tensor):
                        self._track_collective_buffer(t.untyped_storage())
            else:
                res = super().__torch_dispatch__(func, types, args, kwargs)
            self.peak_with_collective_buffers = max(
                self.peak_with_collective_buffers, self._live() + self._collective_live)
            return res

        def _track_collective_buffer(self, st) -> None:
            key = id(st)
            if key in self._collective_refs or st in self._WINFO or st.nbytes() == 0:
                return
            size = st.nbytes()

            def freed(_ref, key=key, size=size):
                self._collective_refs.pop(key, None)
                self._collective_live -= size

            self._collective_refs[key] = weakref.ref(st, freed)
            self._collective_live += size

        def _track_module_params_and_buffers(self, module, install_grad_hooks=True):
            # MemTracker hooks each parameter to file its gradient under Gradient, but torch
            # refuses that hook on a non-leaf tensor, which FSDP1 (use_orig_params) makes of a
            # module's parameters during the forward: views of the gathered flat parameter. The
            # hooks only file bytes under a class; without them FSDP's gradients count as Temp.
            leaf = all(p.is_leaf for p in module.parameters())
            return super()._track_module_params_and_buffers(module, install_grad_hooks and leaf)

        def _live(self) -> int:
            return sum(snap["Total"] for snap in self._curr_mem_snap.values())

        def restart_peak(self) -> None:
            self._peak_mem_snap = self.get_tracker_snapshot()
            self._peak_mem = {dev: snap["Total"] for dev, snap in self._peak_mem_snap.items()}
            self.peak_with_collective_buffers = self._live() + self._collective_live

        def live_bytes(self) -> int:
            return self._live()

        def peak(self):
            """(peak bytes, the classes at the peak) on the CPU."""
            snap = self.get_tracker_snapshot("peak")
            classes = {}
            for dev_snap in snap.values():
                for key, value in dev_snap.items():
                    name = getattr(key, "value", key)
                    classes[name] = classes.get(name, 0) + value
            return classes.pop("Total", 0), classes

    return StepMemTracker()


def build_fsdp_model(args):
    import torch
    from torch.distributed.fsdp import BackwardPrefetch, ShardingStrategy
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    from models import families, mpt

    config = families.load_config(args.config)
    config["attn_config"] = dict(config.get("attn_config", {}), attn_impl="sdpa")
    model = families.seeded_model(config)
    model = FSDP(model, auto_wrap_policy=ModuleWrapPolicy({mpt.MPTBlock}),
                 sharding_strategy=ShardingStrategy[args.sharding],
                 mixed_precision=mixed_precision(args.mixed_precision),
                 device_id=torch.device("cpu"), use_orig_params=True, limit_all_gathers=True,
                 backward_prefetch=BackwardPrefetch.BACKWARD_POST, forward_prefetch=False)
    wrapped = 0
    if args.ckpt == "mptblock":
        wrapped = mpt.apply_activation_checkpointing(model, ["mptblock"])
    input_ids, labels = families.make_inputs(config, args.batch, args.seq)
    return model, wrapped, input_ids, labels


def train_step(model, optimizer, input_ids, labels):
    import torch
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(input_ids, labels)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(loss)


def measure_memtracker(args):
    """Per-step peaks counted by MemTracker (the classes at the peak too). Perturbs what it
    counts in some runs: see the header."""
    import torch
    model, wrapped, input_ids, labels = build_fsdp_model(args)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                                  weight_decay=0.0)
    tracker = step_tracker()
    tracker.track_external(model, optimizer, input_ids, labels)
    peaks, with_buffers, seconds, breakdown = [], [], [], {}
    with tracker:
        for _ in range(args.steps):
            # MemTracker refuses a second forward of the root without this (its per-module
            # statistics are per iteration); the live-storage count is kept.
            tracker.reset_mod_stats()
            before = tracker.live_bytes()
            tracker.restart_peak()
            t0 = time.perf_counter()
            loss = train_step(model, optimizer, input_ids, labels)
            seconds.append(round(time.perf_counter() - t0, 2))
            peak, breakdown = tracker.peak()
            peaks.append(peak)
            with_buffers.append(tracker.peak_with_collective_buffers)
        after = tracker.live_bytes()
    return wrapped, peaks, with_buffers, seconds, breakdown, before, after, loss


def measure_allocator(args):
    """Per-step peaks of the CPU allocator's live bytes (torch.profiler's allocation events,
    profiled from before the model exists), gloo's collective buffers apart."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function
    seconds = []
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        model, wrapped, input_ids, labels = build_fsdp_model(args)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                                      weight_decay=0.0)
        for step in range(args.steps):
            t0 = time.perf_counter()
            with record_function(f"fsdp_peer step {step}"):
                loss = train_step(model, optimizer, input_ids, labels)
            seconds.append(round(time.perf_counter() - t0, 2))
    spans = [allocator_span(prof, f"fsdp_peer step {step}") for step in range(args.steps)]
    return (wrapped, [s["peak"] for s in spans], [s["peak_with_collective_buffers"] for s in spans],
            seconds, None, spans[-1]["start"], spans[-1]["end"], loss)


def rank_main(rank: int, args, port: int, results) -> None:
    import torch
    import torch.distributed as dist
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=args.world_size)
    try:
        measure = measure_allocator if args.counter == "allocator" else measure_memtracker
        wrapped, peaks, with_buffers, seconds, breakdown, before, after, loss = measure(args)
        results.put((rank, {
            "rank": rank, "world_size": args.world_size, "batch": args.batch, "seq": args.seq,
            "sharding": args.sharding, "ckpt": args.ckpt, "checkpointed_modules": wrapped,
            "mixed_precision": args.mixed_precision, "config": args.config, "attn_impl": "sdpa",
            "torch": torch.__version__, "threads": torch.get_num_threads(),
            "counter": args.counter,
            "peak_bytes": peaks[-1], "peak_bytes_by_step": peaks, "peak_breakdown": breakdown,
            "peak_bytes_with_collective_buffers": with_buffers[-1],
            "live_bytes_before": before, "live_bytes_after": after,
            "seconds_by_step": seconds, "loss": round(loss, 5),
        }))
    except Exception as e:  # noqa: BLE001 (reported to the parent, which fails the run)
        results.put((rank, {"rank": rank, "error": f"{type(e).__name__}: {e}"}))
        raise
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(fn, args, nprocs: int):
    """Runs fn(rank, args, port, queue) on nprocs ranks; returns what each put, by rank."""
    import torch.multiprocessing as mp
    queue = mp.get_context("spawn").SimpleQueue()
    mp.spawn(fn, args=(args, free_port(), queue), nprocs=nprocs, join=True)
    got = {}
    while not queue.empty():
        rank, value = queue.get()
        got[rank] = value
    return [got.get(r, {"rank": r, "error": "no result"}) for r in range(nprocs)]


# ------------------------------------------------------------------------------------------
# --check: does MemTracker count what we expect?


def check_linear() -> list:
    """One AdamW step of a Linear(d, d) on x (n, d), loss = sum(y), worked by hand (f32):
    P = (d*d + d)*4 parameter bytes, X = n*d*4.
      after forward:  P + X + 4 (the loss scalar; y is freed: addmm saves x and W, sum saves
                      nothing, and y is not held);
      after backward: + P (dW, db);
      after step:     + 2P (exp_avg, exp_avg_sq) + 2*4 (a f32 `step` scalar per parameter);
      after zero_grad(set_to_none=True): - P."""
    import torch
    d, n = 256, 64
    p_bytes, x_bytes = (d * d + d) * 4, n * d * 4
    lin = torch.nn.Linear(d, d)
    x = torch.randn(n, d)
    opt = torch.optim.AdamW(lin.parameters())
    tracker = step_tracker()
    tracker.track_external(lin, opt, x)
    got = {}
    with tracker:
        loss = lin(x).sum()
        got["after forward"] = (tracker.live_bytes(), p_bytes + x_bytes + 4)
        loss.backward()
        got["after backward"] = (tracker.live_bytes(), 2 * p_bytes + x_bytes + 4)
        opt.step()
        got["after step"] = (tracker.live_bytes(), 4 * p_bytes + x_bytes + 4 + 8)
        opt.zero_grad(set_to_none=True)
        got["after zero_grad"] = (tracker.live_bytes(), 3 * p_bytes + x_bytes + 4 + 8)
        # FSDP1's free and re-allocation of a gathered flat parameter: storage resize_.
        flat = torch.empty(1000)
        with_flat = tracker.live_bytes()
        flat.untyped_storage().resize_(0)
        got["resize_ to 0"] = (tracker.live_bytes(), with_flat - 4000)
        flat.untyped_storage().resize_(4000)
        got["resize_ back"] = (tracker.live_bytes(), with_flat)
    return [{"case": f"Linear: {k}", "memtracker_bytes": a, "expected_bytes": b, "ok": a == b}
            for k, (a, b) in got.items()]


def allocator_span(prof, range_name: str) -> dict:
    """The CPU allocator's live bytes during the record_function range `range_name`, from
    torch.profiler's allocation events (profile_memory=True: every allocation and free of the
    CPU allocator, with its size and the op it happened in; events of every thread, placed by
    time), counted from the profile's start: `start` and `end` (at the range's edges) and `peak`
    without the buffers gloo's collectives allocate for themselves (those under a c10d op or a
    gloo: range); `peak_with_collective_buffers` with them."""
    from torch._C._profiler import _EventType
    events, span = [], None
    stack = [(node, False) for node in prof.profiler.kineto_results.experimental_event_tree()]
    while stack:
        node, in_collective = stack.pop()
        in_collective = in_collective or node.name.startswith(("c10d::", "gloo:"))
        stack.extend((child, in_collective) for child in node.children)
        if node.tag == _EventType.Allocation and node.extra_fields.device.type == "cpu":
            f = node.extra_fields
            events.append((node.start_time_ns, f.ptr, f.alloc_size, in_collective))
        elif node.name == range_name:
            span = (node.start_time_ns, node.end_time_ns)
    live = buffers = 0
    collective_blocks = {}  # address -> size of a live collective buffer
    start = peak = peak_all = None
    for t, ptr, size, in_collective in sorted(events, key=lambda e: e[0]):
        if start is None and t >= span[0]:
            start = peak = live
            peak_all = live + buffers
        if t > span[1]:
            break
        if size > 0:
            # A free on gloo's threads can go unrecorded; an address handed out again was freed.
            buffers -= collective_blocks.pop(ptr, 0)
            if in_collective:
                collective_blocks[ptr] = size
                buffers += size
            else:
                live += size
        elif ptr in collective_blocks:
            buffers -= collective_blocks.pop(ptr)
        else:
            live += size
        if start is not None:
            peak = max(peak, live)
            peak_all = max(peak_all, live + buffers)
    return {"start": start, "end": live, "peak": peak, "peak_with_collective_buffers": peak_all}


def allocator_peak(prof, range_name: str) -> int:
    """allocator_span's peak above the range's start."""
    span = allocator_span(prof, range_name)
    return span["peak"] - span["start"]


def check_rank(rank: int, args, port: int, results) -> None:
    """MPT-125M at 1 x 64 under FSDP1 on two ranks, profiled from before the model exists, so
    the allocator's events cover every CPU storage. During the last step the allocator's peak
    above the step's start, gloo's collective buffers left out, should equal MemTracker's: both
    count the same storages, except scratch an op allocates and frees inside itself (the
    allocator sees it, MemTracker does not)."""
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, record_function
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=args.world_size)
    try:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            model, _, input_ids, labels = build_fsdp_model(args)
            optimizer = torch.optim.AdamW(model.parameters())
            tracker = step_tracker()
            tracker.track_external(model, optimizer, input_ids, labels)
            with tracker:
                for step in range(args.steps):
                    tracker.reset_mod_stats()
                    before = tracker.live_bytes()
                    tracker.restart_peak()
                    with record_function(f"fsdp_peer step {step}"):
                        train_step(model, optimizer, input_ids, labels)
                    peak, _ = tracker.peak()
        results.put((rank, {
            "rank": rank, "case": f"FSDP1 {args.config} {args.batch} x {args.seq} "
                                  f"{args.sharding} {args.mixed_precision} ckpt {args.ckpt}, "
                                  f"step {args.steps}",
            "memtracker_peak_above_start": peak - before,
            "allocator_peak_above_start": allocator_peak(prof, f"fsdp_peer step {step}"),
            "memtracker_peak_above_start_with_collective_buffers":
                tracker.peak_with_collective_buffers - before,
        }))
    finally:
        dist.destroy_process_group()


def run_check(args) -> int:
    ok = True
    for row in check_linear():
        ok &= row["ok"]
        print(json.dumps(row), flush=True)
    cases = [("FULL_SHARD", "none", "DEFAULT"), ("FULL_SHARD", "mptblock", "PURE"),
             ("SHARD_GRAD_OP", "none", "FULL"), ("NO_SHARD", "mptblock", "DEFAULT")]
    for sharding, ckpt, precision in cases:
        a = argparse.Namespace(**dict(vars(args), config="mpt_125m", batch=1, seq=64,
                                      sharding=sharding, ckpt=ckpt, mixed_precision=precision,
                                      steps=2))
        for row in spawn(check_rank, a, a.world_size):
            # An op's own scratch (freed inside it) is all the two may differ by.
            row["ok"] = "error" not in row and abs(
                row["memtracker_peak_above_start"] - row["allocator_peak_above_start"]) <= 4096
            ok &= row["ok"]
            print(json.dumps(row), flush=True)
    # Does MemTracker change the run it counts? The allocator's peak above the step's start, with
    # and without MemTracker in the run (reported; the header quotes these rows).
    for precision in ("FULL", "DEFAULT"):
        a = argparse.Namespace(**dict(vars(args), config="mpt_125m", batch=1, seq=256,
                                      sharding="FULL_SHARD", ckpt="none",
                                      mixed_precision=precision, steps=2, counter="allocator"))
        alone = spawn(rank_main, a, a.world_size)
        tracked = spawn(check_rank, a, a.world_size)
        for r0, r1 in zip(alone, tracked):
            print(json.dumps({
                "rank": r0.get("rank"),
                "case": f"FSDP1 mpt_125m 1 x 256 FULL_SHARD {precision}, step 2",
                "allocator_peak_above_start_alone": r0.get("peak_bytes", 0) - r0.get(
                    "live_bytes_before", 0),
                "allocator_peak_above_start_with_memtracker": r1.get("allocator_peak_above_start"),
            }), flush=True)
    return 0 if ok else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="mpt_125m", help="an MPT config in models/configs")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--sharding", choices=STRATEGIES, default="FULL_SHARD")
    ap.add_argument("--ckpt", choices=("none", "mptblock"), default="none")
    ap.add_argument("--mixed-precision", choices=PRECISIONS, default="DEFAULT")
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--steps", type=int, default=2,
                    help="full training steps; the last one is reported")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    ap.add_argument("--counter", choices=("allocator", "memtracker"), default="allocator",
                    help="what counts the live bytes (see the header)")
    ap.add_argument("--check", action="store_true",
                    help="verify the counting on small cases instead (see the header)")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.world_size < 1 or args.threads < 1:
        ap.error("--steps, --world-size and --threads must be at least 1")
    os.environ["USE_LIBUV"] = "0"
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    sys.path.insert(0, REPO)
    if args.check:
        return run_check(args)
    rows = spawn(rank_main, args, args.world_size)
    for row in rows:
        print(json.dumps(row), flush=True)
    return 1 if any("error" in row for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
