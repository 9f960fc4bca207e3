#!/usr/bin/env bash
# Fused attention, foundry side by side with PyTorch 2.6 + F.scaled_dot_product_attention
# (CPU, fp32, batch 1), on the MPT-125M shape with ALiBi and no biases (models/configs/
# mpt_125m_alibi.json; foundry compiles models/exports/mpt_125m_alibi.onnx, the same config
# exported without weights through the manual attention, which foundry fuses into
# foundry::Attention; PyTorch runs the same config with attn_impl "sdpa", the ALiBi + causal bias
# as SDPA's attn_mask).
#  - Saved-for-backward bytes for each target (none, grouped_query_attention, mptmlp, both =
#    grouped_query_attention + mptmlp, mptblock) and seq: foundry's compile-time report
#    (`foundry-compile --ckpt ... --report-json`, memory.saved_for_backward_bytes; also with
#    --no-attention-fusion, attention as exported, where the build has that flag) against
#    bench/attention_vs_torch26.py --saved (bench/pytorch_side.py's count: unique storages seen by
#    saved_tensors_hooks, parameters excluded, plus the checkpointed regions' inputs, llm-foundry-
#    style non-reentrant checkpointing; feeds excluded on both sides).
#  - The attention kernel alone, q/k/v [1, 12, S, 64]: PyTorch's SDPA with the [1, 12, S, S]
#    ALiBi + causal float mask and with is_causal=True (bench/attention_vs_torch26.py --kernel,
#    torch.set_num_threads(T), OpenBLAS 1 thread) against foundry's kernel
#    ($BUILD/attention_kernel_bench --seq S --threads T, printing {"fwd_ms":..,"fwd_bwd_ms":..};
#    n/a where that binary is missing or fails): median ms of the forward and of forward + backward.
# The PyTorch side runs in the PyTorch 2.6 chroot (scripts/torch26-env.sh run; its setup builds it
# once per machine, as root). Without it the PyTorch cells read n/a, unless BENCH_ATTN_TORCH_JSON
# names a JSON file an earlier run of bench/attention_vs_torch26.py printed (with "saved" and/or
# "kernel"), which is then used instead.
# Prints a markdown section on stdout (bench/run.sh puts it in bench/RESULTS.md).
# Usage: bench/attention_vs_torch26.sh [BUILD_DIR]
#   BENCH_ATTN_SEQS (default "1024 2048"), BENCH_ATTN_TARGETS (default "none
#   grouped_query_attention mptmlp both mptblock"), BENCH_ATTN_THREADS (default "1 2"),
#   BENCH_ATTN_REPS (default 5: timed runs per kernel measurement, after one warm-up),
#   BENCH_ATTN_KERNEL=0: saved bytes only.
#   BENCH_ATTN_PRECISION=amp_bf16: the saved-bytes table in mixed precision: foundry
#   compiles with --precision amp_bf16, PyTorch runs each forward under
#   torch.autocast("cpu", dtype=torch.bfloat16); the kernel timings (fp32) are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
compile=$build/foundry-compile
kernel_bench=$build/attention_kernel_bench
# Built on request (not part of the default build).
if [[ ${BENCH_ATTN_KERNEL:-1} == 1 && ${BENCH_ATTN_PRECISION:-fp32} == fp32 ]]; then
  cmake --build "$build" --target attention_kernel_bench >/dev/null ||
    { echo "attention_vs_torch26: error: building $kernel_bench failed (configure $build first: scripts/test.sh)" >&2; exit 1; }
fi
read -ra seqs <<< "${BENCH_ATTN_SEQS:-1024 2048}"
read -ra targets <<< "${BENCH_ATTN_TARGETS:-none grouped_query_attention mptmlp both mptblock}"
read -ra threads <<< "${BENCH_ATTN_THREADS:-1 2}"
reps=${BENCH_ATTN_REPS:-5}
do_kernel=${BENCH_ATTN_KERNEL:-1}
precision=${BENCH_ATTN_PRECISION:-fp32}
case $precision in
  fp32) ;;
  amp_bf16) do_kernel=0 ;;
  *) echo "attention_vs_torch26: error: BENCH_ATTN_PRECISION is fp32 or amp_bf16, not '$precision'" >&2; exit 2 ;;
esac
model=models/exports/mpt_125m_alibi.onnx
torch26=scripts/torch26-env.sh
py=/usr/bin/python3
[[ -x $compile ]] || { echo "attention_vs_torch26: error: $compile not found; build first" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
json() { $py -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, {'d': d}))" "$@"; }
ratio() { [[ $1 == n/a || $2 == n/a ]] && { echo n/a; return; }; echo "$1 / $2" | bc -l | xargs printf "%.3f"; }
mib() { [[ $1 == n/a ]] && { echo n/a; return; }; echo "$1 / 1048576" | bc -l | xargs printf "%.1f"; }
ckpt_args() {
  case $1 in
    none) ;;
    both) echo --ckpt grouped_query_attention --ckpt mptmlp ;;
    *) echo --ckpt "$1" ;;
  esac
}

# --- PyTorch 2.6 side: a given JSON, or the PyTorch 2.6 chroot, or nothing (n/a) ---
torch_json=$tmp/torch.json
torch_note=""
if [[ -n ${BENCH_ATTN_TORCH_JSON:-} ]]; then
  cp "$BENCH_ATTN_TORCH_JSON" "$torch_json"
  torch_note="PyTorch numbers from \`$BENCH_ATTN_TORCH_JSON\` (an earlier run of \`bench/attention_vs_torch26.py\`), not measured by this run."
elif bash "$torch26" status > /dev/null 2>&1; then
  modes=(--saved)
  [[ $do_kernel == 0 ]] || modes+=(--kernel)
  # Saved bytes do not depend on the thread count; the kernel timing runs last, alone.
  if ! bash "$torch26" run python3 bench/attention_vs_torch26.py "${modes[@]}" --precision "$precision" --seq "${seqs[@]}" \
      --targets "${targets[@]}" --threads "${threads[@]}" --reps "$reps" \
      > "$torch_json" 2> "$tmp/torch.err"; then
    echo "attention_vs_torch26: warning: the PyTorch 2.6 side failed; its cells read n/a:" >&2
    tail -5 "$tmp/torch.err" >&2
    echo '{}' > "$torch_json"
    torch_note="The PyTorch 2.6 side failed on this run (n/a)."
  fi
else
  echo '{}' > "$torch_json"
  torch_note="PyTorch 2.6 not available here (\`scripts/torch26-env.sh setup\` builds its chroot): its cells read n/a."
fi
# PyTorch's saved bytes (feeds excluded) of target $1 at seq $2, or n/a.
torch_saved() {
  $py - "$torch_json" "$1" "$2" << 'PY'
import json, sys
d = json.load(open(sys.argv[1]))
rows = [r for r in d.get("saved", {}).get("results", [])
        if r["target"] == sys.argv[2] and r["seq"] == int(sys.argv[3])]
print(rows[0]["saved_bytes"] if rows else "n/a")
PY
}
# PyTorch's kernel row (seq $1, threads $2, form $3): "fwd_ms fwd_bwd_ms", or "n/a n/a".
torch_kernel() {
  $py - "$torch_json" "$1" "$2" "$3" << 'PY'
import json, sys
d = json.load(open(sys.argv[1]))
rows = [r for r in d.get("kernel", {}).get("results", [])
        if r["seq"] == int(sys.argv[2]) and r["threads"] == int(sys.argv[3])
        and r["form"] == sys.argv[4]]
print(f"{rows[0]['fwd_ms']} {rows[0]['fwd_bwd_ms']}" if rows else "n/a n/a")
PY
}

# --- foundry side: saved for backward from the compile report ---
fusion_flag=0
compile_help=$("$compile" --help 2>&1 || true)
[[ $compile_help == *--no-attention-fusion* ]] && fusion_flag=1
# foundry's saved-for-backward bytes of target $1 at seq $2 (extra flags after), or n/a.
foundry_saved() {
  local target=$1 seq=$2
  shift 2
  local r=$tmp/${target}_$seq.json
  # shellcheck disable=SC2046  # ckpt_args is word lists by design
  if ! "$compile" "$model" --dim batch=1 --dim "seq=$seq" --precision "$precision" $(ckpt_args "$target") "$@" \
      --report-json "$r" -o "$tmp/out" > "$tmp/compile.log" 2>&1; then
    echo "attention_vs_torch26: warning: foundry-compile --ckpt $target at seq $seq $* failed:" >&2
    tail -5 "$tmp/compile.log" >&2
    echo n/a
    return
  fi
  json "$r" "d['memory']['saved_for_backward_bytes']"
}
saved_rows=()
for seq in "${seqs[@]}"; do
  for t in "${targets[@]}"; do
    tb=$(torch_saved "$t" "$seq")
    fb=$(foundry_saved "$t" "$seq")
    ub=n/a
    [[ $fusion_flag == 1 ]] && ub=$(foundry_saved "$t" "$seq" --no-attention-fusion)
    saved_rows+=("| $t | $seq | $tb | $fb | $(ratio "$fb" "$tb") | $ub | $(mib "$tb") | $(mib "$fb") |")
  done
done

# --- foundry side: the attention kernel alone ---
# ==== PLACEHOLDER HOOK: foundry's attention-kernel timing ====
# $BUILD/attention_kernel_bench comes with the fused-attention work (bench/attention_kernel_bench.cc):
#   attention_kernel_bench --seq S --threads T   ->  one JSON line {"fwd_ms": .., "fwd_bwd_ms": ..}
# (q/k/v [1, 12, S, 64] fp32, ALiBi bias, causal, scale 1/8). Prints "fwd_ms fwd_bwd_ms", or
# "n/a n/a" when the binary is missing or fails, so this script never fails for want of it.
foundry_kernel() {
  local seq=$1 t=$2
  [[ -x $kernel_bench ]] || { echo "n/a n/a"; return; }
  local more=()
  [[ $reps == 5 ]] || more=(--reps "$reps")  # the binary's default is 5
  if OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=$t "$kernel_bench" --seq "$seq" --threads "$t" "${more[@]}" \
      > "$tmp/kernel.json" 2> "$tmp/kernel.err" &&
      $py -c "import json,sys; d=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); print(d['fwd_ms'], d['fwd_bwd_ms'])" \
        "$tmp/kernel.json" 2> /dev/null; then
    return
  fi
  echo "attention_vs_torch26: warning: $kernel_bench --seq $seq --threads $t failed" >&2
  echo "n/a n/a"
}
# ==== end of placeholder hook ====
kernel_rows=()
if [[ $do_kernel != 0 ]]; then
  for seq in "${seqs[@]}"; do
    for t in "${threads[@]}"; do
      read -r tm_f tm_fb < <(torch_kernel "$seq" "$t" alibi_mask)
      read -r tc_f tc_fb < <(torch_kernel "$seq" "$t" is_causal)
      read -r f_f f_fb < <(foundry_kernel "$seq" "$t")
      kernel_rows+=("| $seq | $t | $tm_f | $tm_fb | $tc_f | $tc_fb | $f_f | $f_fb | $(ratio "$f_fb" "$tm_fb") | $(ratio "$f_fb" "$tc_fb") |")
    done
  done
fi

torch_version=$(json "$torch_json" "d.get('saved', d.get('kernel', {})).get('torch') or 'n/a'")
if [[ $precision == amp_bf16 ]]; then
  echo "## Saved for backward under amp_bf16, side by side with PyTorch 2.6 autocast + SDPA (CPU, MPT-125M with ALiBi, batch 1)"
  echo
  echo "Measured by \`BENCH_ATTN_PRECISION=amp_bf16 bench/attention_vs_torch26.sh\` (PyTorch $torch_version in the Debian 13 chroot of \`scripts/torch26-env.sh\`), load average $(cut -d' ' -f1-3 /proc/loadavg) at the end. Same model and counting as the fp32 table (\`models/configs/mpt_125m_alibi.json\`, \`$model\`, batch 1, parameters and feeds excluded). foundry: \`foundry-compile --precision amp_bf16\` (PyTorch's CUDA autocast lists: products and attention in bf16, norms, softmax and the loss in f32; master weights f32; each weight's bf16 copy cast again for the backward instead of held). PyTorch: every forward under \`torch.autocast(\"cpu\", dtype=torch.bfloat16)\` (its CPU lists: linears and SDPA in bf16, the ALiBi + causal mask cast to bf16 for SDPA; autocast's cached bf16 weight copies are held for the backward and counted: they are not parameter storage). ${torch_note}"
  echo
  echo "| target | seq | PyTorch 2.6 autocast + SDPA bytes | foundry amp_bf16 bytes | foundry / PyTorch | foundry unfused bytes | PyTorch MiB | foundry MiB |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|"
  printf '%s\n' "${saved_rows[@]}"
  exit 0
fi
echo "## Fused attention side by side with PyTorch 2.6 + SDPA (CPU, MPT-125M with ALiBi, batch 1, fp32)"
echo
echo "Measured by \`bench/attention_vs_torch26.sh\` (PyTorch $torch_version in the Debian 13 chroot of \`scripts/torch26-env.sh\`, \`bench/attention_vs_torch26.py\`), load average $(cut -d' ' -f1-3 /proc/loadavg) at the end. Model: \`models/configs/mpt_125m_alibi.json\` (d 768, 12 layers, 12 heads, ALiBi, no biases, tied embeddings); foundry compiles its no-weights export \`$model\` (manual attention, fused into \`foundry::Attention\`), PyTorch runs the same config with \`attn_impl: sdpa\` (\`F.scaled_dot_product_attention\` with the ALiBi + causal bias as \`attn_mask\`). ${torch_note}"
echo
echo "Saved for backward in bytes, parameters and feeds excluded. PyTorch: unique storages seen by \`saved_tensors_hooks\` plus the checkpointed regions' inputs (\`bench/pytorch_side.py\`, llm-foundry-style non-reentrant \`checkpoint_wrapper\`). foundry: \`memory.saved_for_backward_bytes\` of \`foundry-compile --report-json\`; the unfused column compiles with \`--no-attention-fusion\` (attention as exported: the seq x seq probabilities are kept). \`both\` = grouped_query_attention + mptmlp."
echo
echo "| target | seq | PyTorch 2.6 + SDPA bytes | foundry bytes | foundry / PyTorch | foundry unfused bytes | PyTorch MiB | foundry MiB |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
printf '%s\n' "${saved_rows[@]}"
echo
[[ $do_kernel != 0 ]] || exit 0
torch_reps=$(json "$torch_json" "d.get('kernel', {}).get('reps', 'n/a')")
echo "The attention kernel alone, q/k/v [1, 12, S, 64] fp32, scale 1/8: median ms after a warm-up (PyTorch: $torch_reps runs, foundry: $reps), forward (grad mode on) and forward + backward. PyTorch: SDPA (the CPU flash kernel) with the [1, 12, S, S] ALiBi + causal float mask, and with \`is_causal=True\` and no mask; \`torch.set_num_threads(T)\`, OpenBLAS 1 thread. foundry: \`$kernel_bench --seq S --threads T\` (ALiBi bias [1, 12, 1, S] + causal inside the kernel; n/a: binary not built). Other jobs share this machine's cores: compare within a row."
echo
echo "| seq | threads | PyTorch mask fwd ms | PyTorch mask fwd+bwd ms | PyTorch is_causal fwd ms | PyTorch is_causal fwd+bwd ms | foundry fwd ms | foundry fwd+bwd ms | foundry / PyTorch mask (fwd+bwd) | foundry / PyTorch is_causal (fwd+bwd) |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
printf '%s\n' "${kernel_rows[@]}"
