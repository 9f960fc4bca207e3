#!/usr/bin/python3
"""--memory-budget answers that upstream llm-foundry accepts.

foundry-compile --memory-budget (default --ckpt-syntax llm-foundry) on the MPT-1B, MPT-7B and
MPT-30B structures (models/exports, no weights) at budgets spread between the every-block plan and
the plain plan. Each answer written by --emit-ckpt-config is read as llm-foundry reads it (PyYAML,
which OmegaConf loads YAML with) and checked against upstream's own rules, reimplemented here from
llm-foundry's source (mosaicml/llm-foundry, llmfoundry/models/utils/act_ckpt.py at 8c8dd48f; no
code copied, llm-foundry is not installed):
- the keys: fsdp_config.activation_checkpointing is true, model.activation_checkpointing_target is
  a dict (modeling_mpt.py MPTForCausalLM.activation_checkpointing_fn: a dict maps each name to its
  own blocks; a string or list form maps every name to every block);
- every name resolves as get_act_ckpt_module resolves it to a class that isinstance accepts:
  'mptblock' (compared lowercased), the attention_classes registry
  (grouped_query_attention, multihead_attention, multiquery_attention; attention.py),
  'norm_attn_norm' (lowercased), the norms registry (layernorm, rmsnorm, low_precision_layernorm,
  low_precision_rmsnorm, triton_rmsnorm; norm.py). The ffns, ffns_with_norm and
  ffns_with_megablocks registries hold builder functions (ffn.py: ffns.register('mptmlp',
  func=build_mptmlp)), so isinstance(module, k) raises TypeError for them: rejected;
- each value through get_target_block_list (an int n: range(n); a list of ints and strings; a
  comma-separated string, spaces removed, each element through parse_ele_str: first-n, last-k,
  middle-m, range-i-j, clamped to the blocks), then check_mapping_blocks_overlap (a block named
  by two keys raises ValueError);
- every note the search reports (--report-json budget.notes) is a '# note:' comment of the file;
- read back with --ckpt-config, the file plans the same total and the same instances.
Control: the same rules reject the answers the issue quotes ({grouped_query_attention: first-24,
mptmlp: last-2} on MPT-1B; [grouped_query_attention, mptmlp]) and accept a valid dict, so the check
is not vacuous; what they say of the --ckpt-syntax foundry answer at one MPT-1B budget is printed.

Run: /usr/bin/python3 tests/passes/ckpt_upstream_overlap_test.py (FOUNDRY_BIN_DIR names the build
folder, default build/; FOUNDRY_BUDGET_ARGS replaces the arguments every compile gets besides the
model's, default "--world-size 8 --sharding FULL_SHARD": the per-GPU answers of llm-foundry's 8-GPU
FULL_SHARD runs, as the issue asks). Exits 77 (skip) without PyYAML, except under FOUNDRY_CI=1.
"""

import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("FOUNDRY_BIN_DIR", os.path.join(REPO, "build"))
EXTRA = shlex.split(os.environ.get("FOUNDRY_BUDGET_ARGS", "--world-size 8 --sharding FULL_SHARD"))

try:
    import yaml
except ImportError as e:
    if os.environ.get("FOUNDRY_CI") == "1":
        print(f"FAIL: {e}; CI (FOUNDRY_CI=1) needs PyYAML: run scripts/setup.sh")
        sys.exit(1)
    print(f"SKIP: {e} (install python3-yaml)")
    sys.exit(77)

# llm-foundry's configs (scripts/train/yamls/pretrain/mpt-*.yaml): max_seq_len 2048; the
# device_train_microbatch_size 4 for 1B, 8 for 7B and 30B.
MODELS = [
    ("mpt_1b", 4, 24),
    ("mpt_7b", 8, 32),
]
if os.environ.get("FOUNDRY_BUDGET_30B", "1") == "1":
    MODELS.append(("mpt_30b", 8, 48))
FRACTIONS = [3, 11, 16]  # budgets every-block + (plain - every-block) * k / 20

# --- upstream's rules (llmfoundry/models/utils/act_ckpt.py, modeling_mpt.py) ---------------------

ATTENTION_CLASSES = {"grouped_query_attention", "multihead_attention", "multiquery_attention"}
NORMS = {"layernorm", "rmsnorm", "low_precision_layernorm", "low_precision_rmsnorm",
         "triton_rmsnorm"}
FUNCTION_REGISTRIES = {"mptmlp", "mptglu", "torch_dmoe", "te_ln_mlp", "mb_moe", "mb_dmoe"}


class Rejected(Exception):
    pass


def resolve(name):
    """get_act_ckpt_module, then the isinstance test activation_checkpointing_fn makes."""
    if name.lower() == "mptblock":
        return "MPTBlock"
    if name in ATTENTION_CLASSES:
        return name
    if name.lower() == "norm_attn_norm":
        return "FusedNormAttentionNorm"
    if name in FUNCTION_REGISTRIES:
        raise Rejected(f"{name}: a builder function; isinstance(module, {name}) raises TypeError")
    if name in NORMS:
        return name
    raise Rejected(f"{name} is not a recognized option (get_act_ckpt_module raises ValueError)")


def parse_ele_str(ele, max_block_idx):
    if ele.startswith("first-"):
        if not ele[6:].isdigit():
            raise Rejected(f"Invalid target_blocks element {ele}")
        return list(range(min(int(ele[6:]), max_block_idx + 1)))
    if ele.startswith("last-"):
        if not ele[5:].isdigit():
            raise Rejected(f"Invalid target_blocks element {ele}")
        return list(range(max(max_block_idx - int(ele[5:]) + 1, 0), max_block_idx + 1))
    if ele.startswith("middle-"):
        if not ele[7:].isdigit():
            raise Rejected(f"Invalid target_blocks element {ele}")
        num = int(ele[7:])
        start = max(max_block_idx // 2 - num // 2, 0)
        return list(range(start, min(start + num, max_block_idx + 1)))
    if ele.startswith("range-"):
        r = ele[6:].split("-")
        if len(r) != 2:
            raise Rejected(f"Invalid target_blocks element {ele}")
        return list(range(max(int(r[0]), 0), min(int(r[1]), max_block_idx + 1)))
    raise Rejected(f"Invalid target_blocks element {ele}")


def get_target_block_list(target_blocks, max_block_idx):
    ids = []
    if isinstance(target_blocks, bool):
        raise Rejected(f"target_blocks {target_blocks!r}")
    if isinstance(target_blocks, int):
        ids = list(range(target_blocks))
    elif isinstance(target_blocks, list):
        for ele in target_blocks:
            if isinstance(ele, int) and not isinstance(ele, bool):
                ids.append(ele)
            elif isinstance(ele, str):
                ids.extend(parse_ele_str(ele, max_block_idx))
            else:
                raise Rejected(f"target_blocks element {ele!r}")
    elif isinstance(target_blocks, str):
        for ele in target_blocks.replace(" ", "").split(","):
            ids.extend(parse_ele_str(ele, max_block_idx))
    else:
        raise Rejected(f"target_blocks of type {type(target_blocks).__name__}")
    return sorted(set(ids))


def build_mapping(target, max_block_idx):
    """build_act_ckpt_mod_to_blocks: module type -> block ids, or -1 for every block."""
    mapping = {}
    if target is None or target == []:
        mapping["MPTBlock"] = -1
    elif isinstance(target, str):
        mapping[resolve(target)] = -1
    elif isinstance(target, list):
        for t in target:
            mapping[resolve(t)] = -1
    elif isinstance(target, dict):
        for k, v in target.items():
            mapping[resolve(k)] = get_target_block_list(v, max_block_idx)
    else:
        raise Rejected(f"activation_checkpointing_target of type {type(target).__name__}")
    return mapping


def check_mapping_blocks_overlap(mapping, max_block_idx):
    owner = [None] * (max_block_idx + 1)
    for k, v in mapping.items():
        if v == -1:
            v = list(range(max_block_idx + 1))
        for b in v:
            if b < 0 or b > max_block_idx:
                continue
            if owner[b] is not None:
                raise Rejected(f"Block {b} is assigned to both {k} and {owner[b]}")
            owner[b] = k


def upstream_accepts(doc, layers):
    """The blocks each module type is checkpointed on, as upstream would run the config."""
    if not isinstance(doc, dict):
        raise Rejected("the file is not a mapping")
    fsdp = doc.get("fsdp_config") or {}
    if fsdp.get("activation_checkpointing") is not True:
        raise Rejected("fsdp_config.activation_checkpointing is not true")
    target = (doc.get("model") or {}).get("activation_checkpointing_target")
    if not isinstance(target, dict):
        raise Rejected(f"the target is not the dict form: {target!r}")
    mapping = build_mapping(target, layers - 1)
    check_mapping_blocks_overlap(mapping, layers - 1)
    return mapping


# --- foundry-compile ----------------------------------------------------------------------------


def compile_model(model, batch, args):
    cmd = [os.path.join(BIN, "foundry-compile"), os.path.join(REPO, "models/exports", model + ".onnx"),
           "--dim", f"batch={batch}", "--dim", "seq=2048", "--precision", "amp_bf16", "--dry-run"]
    cmd += EXTRA + args
    if "--memory-budget" in args:  # budgets between two plans' totals: no device reserve
        cmd += ["--device-reserve", "0"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()}")
    return p


def report(path):
    with open(path) as f:
        return json.load(f)


def instances(rep):
    return [i["module"] for i in rep["checkpoint"]["instances"]] if rep.get("checkpoint") else []


failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


def controls(tmp):
    # The answers: two names on blocks 22-23; an FFN key; the list form with two names.
    for target in ({"grouped_query_attention": "first-24", "mptmlp": "last-2"},
                   {"grouped_query_attention": "first-22", "mptmlp": "last-2"},
                   ["grouped_query_attention", "mptmlp"],
                   ["grouped_query_attention", "low_precision_layernorm"]):
        doc = {"model": {"activation_checkpointing_target": target},
               "fsdp_config": {"activation_checkpointing": True}}
        try:
            upstream_accepts(doc, 24)
            check(False, f"control {target} was accepted")
        except Rejected:
            pass
    try:
        upstream_accepts({"model": {"activation_checkpointing_target":
                                    {"mptblock": 3, "grouped_query_attention": "range-3-24"}},
                          "fsdp_config": {"activation_checkpointing": True}}, 24)
    except Rejected as e:
        check(False, f"control: a valid config rejected: {e}")


def foundry_syntax_verdict(model, batch, budget, layers, tmp):
    """Informational: what upstream says of the --ckpt-syntax foundry answer at the same budget."""
    out = os.path.join(tmp, model + ".foundry_syntax.yaml")
    compile_model(model, batch, ["--memory-budget", str(budget), "--ckpt-syntax", "foundry",
                                 "--emit-ckpt-config", out])
    with open(out) as f:
        doc = yaml.safe_load(f)
    target = ((doc or {}).get("model") or {}).get("activation_checkpointing_target")
    try:
        upstream_accepts(doc, layers)
        print(f"{model} budget {budget} B, --ckpt-syntax foundry: {target} (upstream accepts it)")
    except Rejected as e:
        print(f"{model} budget {budget} B, --ckpt-syntax foundry: {target} (upstream: {e})")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        controls(tmp)
        for model, batch, layers in MODELS:
            start = time.time()
            plain_json = os.path.join(tmp, model + ".plain.json")
            block_json = os.path.join(tmp, model + ".block.json")
            compile_model(model, batch, ["--report-json", plain_json])
            compile_model(model, batch, ["--ckpt", "mptblock", "--report-json", block_json])
            plain = report(plain_json)["memory"]["total_bytes"]
            every = report(block_json)["memory"]["total_bytes"]
            check(len(instances(report(block_json))) == layers,
                  f"{model}: {len(instances(report(block_json)))} blocks, expected {layers}")
            for k in FRACTIONS:
                budget = every + (plain - every) * k // 20
                name = f"{model}.{k}"
                yml, rj = os.path.join(tmp, name + ".yaml"), os.path.join(tmp, name + ".json")
                compile_model(model, batch, ["--memory-budget", str(budget), "--emit-ckpt-config",
                                             yml, "--report-json", rj])
                rep = report(rj)
                with open(yml) as f:
                    text = f.read()
                doc = yaml.safe_load(text)
                target = ((doc or {}).get("model") or {}).get("activation_checkpointing_target")
                try:
                    mapping = upstream_accepts(doc, layers)
                except Rejected as e:
                    check(False, f"{name} (budget {budget}): upstream rejects {target}: {e}")
                    continue
                check(rep["budget"]["ckpt_syntax"] == "llm-foundry", f"{name}: syntax")
                check(rep["memory"]["total_bytes"] <= budget, f"{name}: over the budget")
                # Every block upstream checkpoints is one the plan checkpoints, and no other.
                chosen = rep["budget"]["chosen"]["instances"]
                chosen_layers = sorted({int(i.split(".")[2]) for i in chosen})
                upstream_layers = sorted(b for v in mapping.values() for b in v)
                check(chosen_layers == upstream_layers,
                      f"{name}: upstream checkpoints blocks {upstream_layers}, the plan "
                      f"{chosen_layers}")
                for note in rep["budget"]["notes"] + rep["budget"]["warnings"]:
                    check(("# note: " + note + "\n") in text or ("# warning: " + note + "\n") in text,
                          f"{name}: note not in the file: {note}")
                check(len(rep["budget"]["notes"]) > 0, f"{name}: no note")
                back = os.path.join(tmp, name + ".back.json")
                compile_model(model, batch, ["--ckpt-config", yml, "--report-json", back])
                rb = report(back)
                check(rb["memory"]["total_bytes"] == rep["memory"]["total_bytes"],
                      f"{name}: read back plans {rb['memory']['total_bytes']} B, the answer "
                      f"{rep['memory']['total_bytes']} B")
                check(instances(rb) == instances(rep), f"{name}: read back instances differ")
                if model == "mpt_1b" and k == 11:
                    foundry_syntax_verdict(model, batch, budget, layers, tmp)
                print(f"{model} budget {budget} B: {target} planned {rep['memory']['total_bytes']} B"
                      f", recompute {rep['budget']['chosen']['recompute_percent']:.2f} %")
            print(f"{model}: {time.time() - start:.1f} s")
    if failures:
        print(f"{len(failures)} failures")
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
