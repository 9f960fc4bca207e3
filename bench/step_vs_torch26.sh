#!/usr/bin/env bash
# The CPU training step, foundry against PyTorch 2.6 eager (the goal: foundry / PyTorch <= 1.0
# on every row, at 1 and 2 threads), both sides measured in one run, interleaved.
#
# Rows (BENCH_STEP_ROWS, NAME:SEQ[:STEPS]): foundry compiles models/exports/NAME.onnx (no weights:
# foundry initialises them) at batch 1 x seq SEQ; PyTorch runs models/configs/NAME.json's seeded
# model (bench/step_torch26.py in the PyTorch 2.6 chroot of scripts/torch26-env.sh: MPT with
# attn_impl "sdpa", is_causal; GPT-2 as models/gpt2.py writes it), batch 1, fp32, AdamW
# (foundry-run's defaults on both sides), the same tokens on both sides (families.make_inputs, fed
# to foundry-run with --feed).
#   mpt_125m:256, mpt_125m:1024:1 MPT-125M (learned positions, biases); at seq 1024 one timed step
#                                 per process (a step there costs ~4.5x one at 256)
#   gpt2_124m:256                 GPT-2 124M at seq 256 (1024 costs ~4x; BENCH_STEP_ROWS adds it)
#   gpt2_tiny_50k:64:20           a new user's tiny GPT-2: d 128, 4 layers, GPT-2's vocab 50257
# Each row, at each thread count T (BENCH_STEP_THREADS), runs BENCH_STEP_ROUNDS rounds; a round is
# one fresh process per side (foundry first in odd rounds, PyTorch first in even ones, so drift of
# the machine's load lands on both), each running BENCH_STEP_WARMUP untimed steps and then STEPS
# timed ones (default BENCH_STEP_STEPS); the table gives the median of every timed step of the
# rounds, per side.
#   foundry: `env -u OPENBLAS_CORETYPE foundry-run PREFIX --threads T` (foundry keeps OpenBLAS at
#     one thread and splits products over its own pool). The environment here may force
#     OPENBLAS_CORETYPE=Haswell (AVX2 kernels, half speed on an AVX-512 CPU); unsetting it lets
#     OpenBLAS pick from the CPU, as PyTorch's OpenBLAS does in the chroot (`env -i`). The
#     kernels each side used are printed with the table.
#   PyTorch: torch's intra-op threads and OpenBLAS's multiply, so at T = 1 it runs torch 1 x
#     BLAS 1, and at T > 1 each of BENCH_STEP_TORCH_SETTINGS (default "T,1 1,T T,T": torch
#     threads, BLAS threads) in round 1; rounds 2.. run only the fastest of round 1, and the
#     table names it (round 1's medians of the others beside it).
# Then activation checkpointing (BENCH_STEP_CKPT=0 skips it): MPT-125M at BENCH_STEP_CKPT_SEQ
# (default 256), BENCH_STEP_CKPT_THREADS (default 1) threads (PyTorch: torch 1 x BLAS 1 at 1),
# for each target of BENCH_STEP_CKPT_TARGETS (default none grouped_query_attention mptmlp both
# mptblock; both = grouped_query_attention + mptmlp), the same rounds, each round running every
# target on both sides. Per target: each side's overhead over its own plain step (median target /
# median none - 1), the recompute-FLOP share (flops.recompute of the target's
# `foundry-compile --report-json` over flops.forward + flops.backward of the plain compile's),
# and overhead / share (the goal: within 0.8-1.2 for every target).
# Without the PyTorch 2.6 chroot (scripts/torch26-env.sh setup) the PyTorch cells read n/a.
# Prints a markdown section on stdout (bench/run.sh puts it in bench/RESULTS.md).
# Usage: bench/step_vs_torch26.sh [BUILD_DIR]
#   BENCH_STEP_ROWS (default "mpt_125m:256 mpt_125m:1024:1 gpt2_124m:256 gpt2_tiny_50k:64:20"),
#   BENCH_STEP_THREADS (default "1 2"), BENCH_STEP_ROUNDS (default 3), BENCH_STEP_STEPS (default
#   2), BENCH_STEP_WARMUP (default 1), BENCH_STEP_TORCH_SETTINGS (see above), BENCH_STEP_CKPT,
#   BENCH_STEP_CKPT_SEQ, BENCH_STEP_CKPT_THREADS, BENCH_STEP_CKPT_TARGETS.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
compile=$build/foundry-compile
run=$build/foundry-run
read -ra rows <<< "${BENCH_STEP_ROWS:-mpt_125m:256 mpt_125m:1024:1 gpt2_124m:256 gpt2_tiny_50k:64:20}"
read -ra threads_list <<< "${BENCH_STEP_THREADS:-1 2}"
rounds=${BENCH_STEP_ROUNDS:-3}
steps=${BENCH_STEP_STEPS:-2}
warmup=${BENCH_STEP_WARMUP:-1}
do_ckpt=${BENCH_STEP_CKPT:-1}
ckpt_seq=${BENCH_STEP_CKPT_SEQ:-256}
ckpt_threads=${BENCH_STEP_CKPT_THREADS:-1}
read -ra ckpt_targets <<< "${BENCH_STEP_CKPT_TARGETS:-none grouped_query_attention mptmlp both mptblock}"
torch26=scripts/torch26-env.sh
py=/usr/bin/python3
[[ -x $compile && -x $run ]] || { echo "step_vs_torch26: error: $compile or $run not found; build first" >&2; exit 1; }
[[ ${ckpt_targets[0]} == none ]] || { echo "step_vs_torch26: error: BENCH_STEP_CKPT_TARGETS must start with none (overheads are relative to it)" >&2; exit 1; }
(( rounds >= 1 && steps >= 1 && warmup >= 0 )) || { echo "step_vs_torch26: error: BENCH_STEP_ROUNDS, BENCH_STEP_STEPS >= 1, BENCH_STEP_WARMUP >= 0" >&2; exit 1; }
have_torch=0
bash "$torch26" status > /dev/null 2>&1 && have_torch=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
results=$tmp/results.jsonl  # one line per process: {"side", "key", "setting", "step_ms", ...}
: > "$results"
start_s=$(date +%s)
max_threads=1
for t in "${threads_list[@]}" "$ckpt_threads"; do (( t > max_threads )) && max_threads=$t; done

ckpt_args() {
  case $1 in
    none) ;;
    both) echo --ckpt grouped_query_attention --ckpt mptmlp ;;
    *) echo --ckpt "$1" ;;
  esac
}
# foundry-compile NAME at SEQ with TARGET -> $tmp/NAME_SEQ_TARGET.{plan,train.onnx,json}.
compile_one() {
  local name=$1 seq=$2 target=$3 prefix=$tmp/$1_$2_$3
  # shellcheck disable=SC2046  # ckpt_args is word lists by design
  if ! "$compile" "models/exports/$name.onnx" --dim batch=1 --dim "seq=$seq" $(ckpt_args "$target") \
      --threads "$max_threads" --report-json "$prefix.json" -o "$prefix" > "$prefix.compile.log" 2>&1; then
    echo "step_vs_torch26: warning: foundry-compile $name at seq $seq --ckpt $target failed; its cells read n/a:" >&2
    tail -5 "$prefix.compile.log" >&2
    return 1
  fi
  write_feeds "$name" "$seq"
}
# The tokens PyTorch's side uses (families.make_inputs: seeded ids, labels = ids with the last
# three -100) as $tmp/NAME_SEQ.{input_ids,labels}.pb, foundry-run's --feed files: GPT-2 reshapes
# input_ids before its embedding Gather, where foundry-run cannot find the vocabulary for
# synthetic tokens, and this way both sides train on the same batch.
write_feeds() {
  local name=$1 seq=$2
  [[ -f $tmp/${name}_$seq.labels.pb ]] && return 0
  $py - "$name" "$seq" "$tmp/${name}_$seq" << 'PY'
import sys
sys.path.insert(0, ".")
from onnx import numpy_helper
from models import families
config = families.load_config(sys.argv[1])
for n, t in zip(("input_ids", "labels"), families.make_inputs(config, 1, int(sys.argv[2]))):
    with open(f"{sys.argv[3]}.{n}.pb", "wb") as f:
        f.write(numpy_helper.from_array(t.numpy(), n).SerializeToString())
PY
}
# One foundry process: KEY THREADS NAME SEQ TARGET STEPS -> a line in $results.
foundry_once() {
  local key=$1 t=$2 prefix=$tmp/$3_$4_$5 feeds=$tmp/$3_$4 n=$6 profile=()
  [[ -f $prefix.plan ]] || return 0
  # The checkpointing rows also time each node (--profile: two clock reads per node), which
  # gives the time the recompute nodes take in the step directly.
  [[ $key == ckpt:* ]] && profile=(--profile)
  if ! env -u OPENBLAS_CORETYPE "$run" "$prefix" --steps $((warmup + n)) --threads "$t" "${profile[@]}" \
      --feed "input_ids=$feeds.input_ids.pb" --feed "labels=$feeds.labels.pb" \
      --report-json "$tmp/f.json" > "$tmp/f.log" 2>&1; then
    echo "step_vs_torch26: warning: foundry-run $prefix --threads $t failed:" >&2
    tail -5 "$tmp/f.log" >&2
    return 0
  fi
  local core
  core=$(sed -nE 's/.*\(OpenBLAS (.*) kernels, one thread.*/\1/p' "$tmp/f.log" | head -1)
  $py - "$tmp/f.json" "$key" "$t" "$warmup" "${core:-n/a}" >> "$results" << 'PY'
import json, sys
d = json.load(open(sys.argv[1]))
w = int(sys.argv[4])
rec = {"side": "foundry", "key": sys.argv[2], "setting": f"{d['threads']} threads",
       "threads": int(sys.argv[3]), "blas_core": sys.argv[5], "step_ms": d["step_ms"][w:]}
if "profile" in d:
    rec["recompute_ms"] = d["profile"]["recompute_ms"]
    rec["graph_ms"] = d["profile"]["graph_ms"]
print(json.dumps(rec))
PY
}
# One PyTorch process: KEY NAME SEQ TORCH_THREADS BLAS_THREADS TARGET STEPS -> a line in $results.
torch_once() {
  local key=$1 name=$2 seq=$3 tt=$4 bt=$5 target=$6 n=$7
  (( have_torch )) || return 0
  if ! bash "$torch26" run python3 bench/step_torch26.py --config "$name" --seq "$seq" --torch-threads "$tt" \
      --blas-threads "$bt" --ckpt "$target" --steps "$n" --warmup "$warmup" \
      > "$tmp/t.json" 2> "$tmp/t.err"; then
    echo "step_vs_torch26: warning: bench/step_torch26.py $name seq $seq torch $tt x BLAS $bt --ckpt $target failed:" >&2
    tail -5 "$tmp/t.err" >&2
    return 0
  fi
  $py - "$tmp/t.json" "$key" "$tt,$bt" >> "$results" << 'PY'
import json, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
d.update({"side": "torch", "key": sys.argv[2], "setting": sys.argv[3]})
print(json.dumps(d))
PY
}
# The fastest PyTorch setting of KEY so far (median of its timed steps), or "" when none ran.
best_setting() {
  $py - "$results" "$1" << 'PY'
import json, statistics, sys
by = {}
for line in open(sys.argv[1]):
    d = json.loads(line)
    if d["side"] == "torch" and d["key"] == sys.argv[2]:
        by.setdefault(d["setting"], []).extend(d["step_ms"])
print(min(by, key=lambda s: statistics.median(by[s])) if by else "")
PY
}
settings_for() {  # PyTorch's candidate settings at T threads: "torch,blas" words
  local t=$1
  if (( t == 1 )); then echo "1,1"; return; fi
  echo "${BENCH_STEP_TORCH_SETTINGS:-$t,1 1,$t $t,$t}"
}

# --- the main table ---
for row in "${rows[@]}"; do
  IFS=: read -r name seq nsteps <<< "$row"
  nsteps=${nsteps:-$steps}
  [[ -f models/exports/$name.onnx ]] || { echo "step_vs_torch26: error: models/exports/$name.onnx not found" >&2; exit 1; }
  compile_one "$name" "$seq" none || true
  for t in "${threads_list[@]}"; do
    key="$name:$seq:$t"
    read -ra cands <<< "$(settings_for "$t")"
    for ((r = 1; r <= rounds; r++)); do
      if (( r > 1 )) && (( ${#cands[@]} > 1 )); then
        b=$(best_setting "$key")
        [[ -n $b ]] && cands=("$b")
      fi
      torch_all() { for c in "${cands[@]}"; do torch_once "$key" "$name" "$seq" "${c%,*}" "${c#*,}" none "$nsteps"; done; }
      if (( r % 2 )); then
        foundry_once "$key" "$t" "$name" "$seq" none "$nsteps"; torch_all
      else
        torch_all; foundry_once "$key" "$t" "$name" "$seq" none "$nsteps"
      fi
    done
  done
done
main_s=$(date +%s)

# --- activation checkpointing ---
if [[ $do_ckpt != 0 ]]; then
  for target in "${ckpt_targets[@]}"; do compile_one mpt_125m "$ckpt_seq" "$target" || true; done
  for ((r = 1; r <= rounds; r++)); do
    for target in "${ckpt_targets[@]}"; do
      key="ckpt:$target"
      # At 1 thread PyTorch runs torch 1 x BLAS 1; above, torch 1 x BLAS T (REFERENCE.md: the
      # fastest on 2 cores).
      tt=1 bt=$ckpt_threads
      if (( r % 2 )); then
        foundry_once "$key" "$ckpt_threads" mpt_125m "$ckpt_seq" "$target" "$steps"
        torch_once "$key" mpt_125m "$ckpt_seq" "$tt" "$bt" "$target" "$steps"
      else
        torch_once "$key" mpt_125m "$ckpt_seq" "$tt" "$bt" "$target" "$steps"
        foundry_once "$key" "$ckpt_threads" mpt_125m "$ckpt_seq" "$target" "$steps"
      fi
    done
  done
fi
end_s=$(date +%s)

# --- the section ---
rows_text="${rows[*]}" threads_text="${threads_list[*]}" targets_text="${ckpt_targets[*]}" \
  $py - "$results" "$tmp" "$rounds" "$steps" "$warmup" "$have_torch" "$do_ckpt" "$ckpt_seq" \
  "$ckpt_threads" "$((main_s - start_s))" "$((end_s - main_s))" "$(cut -d' ' -f1-3 /proc/loadavg)" \
  "$(git rev-parse --short HEAD 2>/dev/null || echo '?')" "$compile" << 'PY'
import json, os, statistics, sys
(results, tmp, rounds, steps, warmup, have_torch, do_ckpt, ckpt_seq, ckpt_threads, main_s, ckpt_s,
 load, head, compile_bin) = sys.argv[1:]
recs = [json.loads(l) for l in open(results)]
def steps_of(side, key, setting=None):
    out = []
    for d in recs:
        if d["side"] == side and d["key"] == key and (setting is None or d["setting"] == setting):
            out.extend(d["step_ms"])
    return out
def med(v):
    return statistics.median(v) if v else None
def fmt(x, nd=1):
    return "n/a" if x is None else f"{x:.{nd}f}"
def ratio(a, b, nd=3):
    return "n/a" if a is None or b is None else f"{a / b:.{nd}f}"
cores = {side: sorted({d.get("blas_core", "n/a") for d in recs if d["side"] == side})
         for side in ("foundry", "torch")}
blas_cfg = sorted({d.get("blas_config", "") for d in recs if d["side"] == "torch"})
torch_ver = sorted({d.get("torch", "") for d in recs if d["side"] == "torch"})
attn = sorted({f"{d['config']}: {d['attn_impl']}" for d in recs if d["side"] == "torch" and d.get("attn_impl") != "n/a"})
print("## The training step against PyTorch 2.6 eager (CPU, batch 1, fp32, AdamW; foundry / PyTorch <= 1.0)")
print()
print(f"Measured by `bench/step_vs_torch26.sh` (worktree at {head}), {os.cpu_count()} cores, "
      f"load average {load} at the end; main table {int(main_s) // 60} min {int(main_s) % 60} s, "
      f"checkpointing table {int(ckpt_s) // 60} min {int(ckpt_s) % 60} s. "
      f"foundry: `foundry-compile models/exports/NAME.onnx --dim batch=1 --dim seq=S --threads N` "
      f"(no weights: foundry initialises them), then `env -u OPENBLAS_CORETYPE foundry-run PREFIX "
      f"--threads T --feed ...` on the tokens PyTorch trains on (`families.make_inputs`), AdamW with foundry-run's defaults on both sides (lr 1e-3, weight decay 0); OpenBLAS kernels: {', '.join(cores['foundry']) or 'n/a'} "
      f"(foundry-run's header). PyTorch {', '.join(torch_ver) or 'n/a'} in the Debian 13 chroot of `scripts/torch26-env.sh` "
      f"(`bench/step_torch26.py`, `models/configs/NAME.json`'s seeded model"
      f"{'; ' + ', '.join(attn) if attn else ''}; GPT-2 as `models/gpt2.py` writes it, manual "
      f"attention): OpenBLAS kernels {', '.join(cores['torch']) or 'n/a'} "
      f"({'; '.join(blas_cfg) or 'n/a'}). "
      f"{rounds} rounds per row, a fresh process per side each round (foundry first in odd rounds, "
      f"PyTorch first in even ones), {warmup} untimed step(s) then the row's timed steps each; "
      f"ms/step = median of all timed steps of the rounds." +
      ("" if have_torch == "1" else " PyTorch 2.6 not available here (`scripts/torch26-env.sh setup` "
       "builds its chroot): its cells read n/a."))
print()
print("PyTorch setting: torch threads x OpenBLAS threads (they multiply). At 1 thread 1 x 1; at T "
      "threads round 1 tries each setting and rounds 2.. run the fastest; the last column gives "
      "round 1's median ms of each setting tried.")
print()
print("| model | seq | threads | timed steps (foundry / PyTorch) | foundry ms/step | PyTorch ms/step | PyTorch setting | foundry / PyTorch | PyTorch settings tried (round 1 ms) |")
print("|---|---:|---:|---:|---:|---:|---|---:|---|")
for row in os.environ["rows_text"].split():
    name, seq = row.split(":")[:2]
    for t in os.environ["threads_text"].split():
        key = f"{name}:{seq}:{t}"
        f = steps_of("foundry", key)
        by = {}
        for d in recs:
            if d["side"] == "torch" and d["key"] == key:
                by.setdefault(d["setting"], []).append(d["step_ms"])
        best = min(by, key=lambda s: statistics.median(sum(by[s], []))) if by else None
        tv = sum(by[best], []) if best else []
        tried = "; ".join(f"{s.replace(',', ' x ')}: {statistics.median(v[0]):.1f}" for s, v in by.items()) if len(by) > 1 else "-"
        print(f"| {name} | {seq} | {t} | {len(f)} / {len(tv)} | {fmt(med(f))} | {fmt(med(tv))} | "
              f"{best.replace(',', ' x ') if best else 'n/a'} | {ratio(med(f), med(tv))} | {tried} |")
if do_ckpt == "0":
    sys.exit(0)
targets = os.environ["targets_text"].split()
def report(target):
    p = os.path.join(tmp, f"mpt_125m_{ckpt_seq}_{target}.json")
    return json.load(open(p)) if os.path.exists(p) else None
plain = report("none")
plain_flops = plain["flops"]["forward"] + plain["flops"]["backward"] if plain else None
def profiled(key, field):
    return med([d[field] for d in recs
                if d["side"] == "foundry" and d["key"] == key and field in d])
f0, t0 = med(steps_of("foundry", "ckpt:none")), med(steps_of("torch", "ckpt:none"))
graph_plain = profiled("ckpt:none", "graph_ms")
print()
print(f"Activation checkpointing, MPT-125M at seq {ckpt_seq}, {ckpt_threads} thread(s) "
      f"(PyTorch torch 1 x BLAS {ckpt_threads}): every round runs every target on both sides "
      f"(alternating which side goes first). Overhead: median ms of the target over the median of "
      f"the same side's plain step (none) - 1. Recompute share: `flops.recompute` of the target's "
      f"compile report over `flops.forward + flops.backward` of the plain compile's"
      f"{f' ({plain_flops / 1e9:.1f} GFLOP)' if plain_flops else ''}. The goal: foundry's overhead / "
      f"share within 0.8-1.2 for every target. PyTorch's overhead / share uses foundry's share "
      f"(the same modules recomputed). `both` = grouped_query_attention + mptmlp. "
      f"Profiled recompute: foundry's checkpointing runs also pass `--profile`, which times every "
      f"node; `recompute ms` is the mean per step of the nodes the remat pass added (phase "
      f"`recompute`), the median over rounds, and `profiled overhead` is it over foundry's plain "
      f"median step: the recompute's own cost, free of the step-to-step noise in the overhead "
      f"column. The step also runs work no recompute repeats (AdamW, the finite check), so the "
      f"last foundry column compares per FLOP with the graph alone: (recompute ms / recompute "
      f"GFLOP) / (plain graph ms / plain GFLOP), the plain graph's profiled time "
      f"{fmt(graph_plain)} ms of the {fmt(f0)} ms step; 1.0 = the recompute costs per FLOP what "
      f"the forward and backward do.")
print()
print("| target | foundry ms/step | foundry overhead | recompute GFLOP | recompute share | foundry overhead / share | recompute ms (profiled) | profiled overhead | profiled overhead / share | PyTorch ms/step | PyTorch overhead | PyTorch overhead / share | foundry recompute ms/GFLOP / plain graph ms/GFLOP |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for target in targets:
    f, t = med(steps_of("foundry", f"ckpt:{target}")), med(steps_of("torch", f"ckpt:{target}"))
    rep = report(target)
    rc = rep["flops"]["recompute"] if rep else None
    share = rc / plain_flops if rc is not None and plain_flops else None
    fo = f / f0 - 1 if f is not None and f0 else None
    to = t / t0 - 1 if t is not None and t0 else None
    pct = lambda x: "n/a" if x is None else f"{100 * x:+.1f} %"
    by_share = lambda o: "-" if target == "none" else ("n/a" if o is None or not share else f"{o / share:.2f}")
    pr = profiled(f"ckpt:{target}", "recompute_ms")
    po = pr / f0 if pr is not None and f0 else None
    per_flop = ("-" if target == "none" else
                "n/a" if None in (pr, rc, graph_plain, plain_flops) or not rc or not graph_plain
                else f"{(pr / rc) / (graph_plain / plain_flops):.2f}")
    print(f"| {target} | {fmt(f)} | {pct(fo)} | {fmt(rc / 1e9 if rc is not None else None, 2)} | "
          f"{'n/a' if share is None else f'{100 * share:.1f} %'} | {by_share(fo)} | {fmt(pr)} | "
          f"{pct(po)} | {by_share(po)} | {fmt(t)} | {pct(to)} | {by_share(to)} | {per_flop} |")
PY
