#!/usr/bin/python3
"""Regenerates the committed fixtures in models/fixtures/<config>/, or checks them.

    /usr/bin/python3 models/make_fixtures.py            # rewrite every fixture
    /usr/bin/python3 models/make_fixtures.py --check    # regenerate into a temp dir and compare
    /usr/bin/python3 models/make_fixtures.py --only mpt_tiny llama_tiny
    /usr/bin/python3 models/make_fixtures.py --big      # also models/exports/ (~3 min)
    /usr/bin/python3 models/make_fixtures.py --only gpt2_tiny --big gpt2_124m  # just these
    scripts/torch26-env.sh run python3 models/make_fixtures.py --dynamo  # torch 2.6's exports
    scripts/torch26-env.sh run python3 models/make_fixtures.py --dynamo --check  # compare them
    scripts/torch26-env.sh run python3 models/make_fixtures.py --dynamo --out /tmp/dyn  # elsewhere

Layout of one fixture (the C++ tests read it):
    model.onnx              scopes format (TorchScript scoped names + foundry.* metadata)
    model.functions.onnx    functions format (absent where torch's extraction fails)
    model.metadata.onnx     dynamo-style node metadata_props (IR 10)
    model.stock.onnx        plain torch.onnx.export in training mode, no foundry metadata at all
                            (what a user who never heard of foundry has)
    inputs/input_ids.pb     int64 [batch, seq] TensorProto named input_ids
    inputs/labels.pb        int64 [batch, seq] raw labels (the graph shifts them), named labels
    reference/loss.pb       float32 scalar, PyTorch's loss           (dropout-off configs only)
    reference/grads/<initializer>_grad.pb  PyTorch's fp32 gradient of every trainable parameter,
                            named <initializer>_grad                  (dropout-off configs only)
    config.json             the config the fixture was made from
    dynamo/                 torch 2.6's exporter (--dynamo; needs scripts/torch26-env.sh):
      model.onnx            torch.onnx.export(dynamo=True) at torch's defaults (opset 18, IR 10),
                            dimensions Dim.AUTO as a user would write them (torch names them
                            s0..s3, or writes the size it specialised as a decimal dim_param)
      reference/loss.pb, reference/grads/<parameter>_grad.pb   torch 2.6's loss and gradients on
                            the same inputs/ (and the export's own weights)
      reference/tied.json   {first name: [other names]} of each tied parameter (the export may
                            name it by any of them)
      export.json           torch's version and the variant
    amp_reference/          torch 2.6's CPU autocast and float64 gradients (models/amp_reference.py;
                            neither made nor checked here)
    dynamo_sdpa/            mpt_tiny only: the same with attn_impl "sdpa"
                            (F.scaled_dot_product_attention with an additive ALiBi+causal mask)

models/exports/<config>.onnx and <config>.functions.onnx are the big shapes (MPT-125M, MPT-125M
with ALiBi and no biases, 1B, 7B, 30B, GPT-2 124M, Pythia-160M, bert-base) exported without weights
(parameters are graph inputs); only --big touches them.

Each fixture is made in a fresh process (torch 1.13 keeps export state between exports) with one
thread and deterministic algorithms, from the config's seed, so regeneration reproduces the bits.
--check compares numbers with max|a-b|/max|b| <= 1e-6 per tensor (gradients: <= 1e-5, with max|b|
floored at 1e-3 of the fixture's largest gradient, because OpenBLAS picks different kernels on
different CPUs and a gradient that is zero in exact arithmetic is pure rounding), the scopes and metadata
graphs exactly, and the functions graph by function names and op sequences (torch names function
internals differently from run to run). The stock export is deterministic, so it is compared
exactly like the scopes graph. The dynamo/ folders are torch 2.6's and are neither made nor
checked nor removed by a torch 1.13 run; --dynamo (inside scripts/torch26-env.sh) rewrites them,
--dynamo --check compares fresh ones with them (tensors as above, tied.json and export.json exactly,
the graph exactly but for torch's stack-trace metadata), --dynamo --out DIR writes DIR/<config>/
instead. torch writes each node's Python stack into its metadata; the repository's own path is cut
from those file names, so that an export does not record where the checkout was.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

FIXTURES_DIR = os.path.join(REPO, "models", "fixtures")
FIXTURES = [
    "mpt_tiny",
    "mpt_tiny_mqa",
    "mpt_tiny_gqa_glu",
    "mpt_tiny_dropout",
    "mpt_tiny_4layer",
    "mpt_tiny_qkln",
    "llama_tiny",
    "llama_tiny_window",
    "gpt2_tiny",
    "pythia_tiny",
    "bert_tiny",
]
# torch 2.6 exports (--dynamo): every fixture with reference gradients, and MPT through SDPA.
DYNAMO_VARIANTS = {"dynamo": {}, "dynamo_sdpa": {"attn_impl": "sdpa"}}
DYNAMO_SDPA = ["mpt_tiny"]
BIG = ["mpt_125m", "mpt_125m_alibi", "mpt_1b", "mpt_7b", "mpt_30b", "gpt2_124m", "gpt2_tiny_50k",
       "pythia_160m", "bert_base"]
EXPORTS_DIR = os.path.join(REPO, "models", "exports")
REL_TOL = 1e-6
GRAD_REL_TOL = 1e-5
GRAD_FLOOR = 1e-3


def has_dropout(config) -> bool:
    attn = config.get("attn_config", {})
    ratios = [config.get("emb_pdrop"), config.get("resid_pdrop"), attn.get("attn_pdrop")]
    family = config.get("family", "mpt")
    if family == "gpt2":  # GPT2Config defaults every pdrop to 0.1
        ratios += [config.get(k, 0.1) for k in ("embd_pdrop", "attn_pdrop", "resid_pdrop")]
    elif family == "bert":  # BertConfig defaults both to 0.1
        ratios += [config.get("hidden_dropout_prob", 0.1),
                   config.get("attention_probs_dropout_prob", 0.1)]
    elif family == "gpt_neox":  # GPTNeoXConfig defaults both to 0.0
        ratios += [config.get("attention_dropout"), config.get("hidden_dropout")]
    return any(float(x or 0) > 0 for x in ratios)


# --------------------------------------------------------------------------------------------
# Generation (runs in a child process per fixture).


def _write_tensor(path: str, array, name: str) -> None:
    from onnx import numpy_helper
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(array, name).SerializeToString())


def export_stock(model, args, path: str) -> None:
    """What a user who never heard of foundry writes: torch.onnx.export in training mode, no
    annotations, no metadata."""
    import inspect

    import torch

    from models import families
    extra = {}
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        extra["dynamo"] = False  # torch >= 2.9 defaults to the dynamo exporter
    torch.onnx.export(model, args, path, **extra, opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      input_names=["input_ids", "labels"], output_names=["loss"],
                      dynamic_axes=families.DYNAMIC_AXES)


def write_reference(model, input_ids, labels, ref_dir: str, what: str) -> None:
    """One forward and backward: loss.pb and grads/<parameter>_grad.pb under `ref_dir`."""
    from models.foundry_export import parameter_names
    model.zero_grad(set_to_none=True)
    loss = model(input_ids, labels)
    loss.backward()
    _write_tensor(os.path.join(ref_dir, "loss.pb"), loss.detach().numpy().astype("float32"),
                  "loss")
    params = dict(model.named_parameters())
    for pname in parameter_names(model):
        grad = params[pname].grad
        if grad is None or not bool(grad.abs().max() > 0):
            raise RuntimeError(f"{what}: gradient of {pname} is zero or missing")
        _write_tensor(os.path.join(ref_dir, "grads", pname + "_grad.pb"),
                      grad.numpy().astype("float32"), pname + "_grad")


def generate_one(name: str, out_dir: str) -> None:
    import torch

    from models import families
    from models.foundry_export import export_with_annotations

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(0)
    config = families.load_config(name)
    os.makedirs(out_dir, exist_ok=True)
    shutil.copyfile(os.path.join(families.CONFIGS_DIR, name + ".json"),
                    os.path.join(out_dir, "config.json"))
    model = families.seeded_model(config)
    input_ids, labels = families.make_inputs(config)
    _write_tensor(os.path.join(out_dir, "inputs", "input_ids.pb"), input_ids.numpy(), "input_ids")
    _write_tensor(os.path.join(out_dir, "inputs", "labels.pb"), labels.numpy(), "labels")

    common = dict(input_names=["input_ids", "labels"], output_names=["loss"],
                  dynamic_axes=families.DYNAMIC_AXES,
                  function_classes=families.function_classes(config))
    export_with_annotations(model, (input_ids, labels), os.path.join(out_dir, "model.onnx"),
                            annotations="scopes", **common)
    export_stock(model, (input_ids, labels), os.path.join(out_dir, "model.stock.onnx"))
    export_with_annotations(model, (input_ids, labels),
                            os.path.join(out_dir, "model.metadata.onnx"),
                            annotations="metadata", **common)
    # Functions last: a failed or finished extraction may leave torch state behind.
    functions_path = os.path.join(out_dir, "model.functions.onnx")
    info = export_with_annotations(model, (input_ids, labels), None, annotations="functions",
                                   **common)
    if info["fallback"]:
        print(f"make_fixtures: {name}: {info['fallback']}; no model.functions.onnx",
              file=sys.stderr)
    else:
        with open(functions_path, "wb") as f:
            f.write(info["proto"].SerializeToString())

    if has_dropout(config):
        return
    write_reference(model, input_ids, labels, os.path.join(out_dir, "reference"), name)


def generate_dynamo_one(name: str, variant: str, fixture_dir: str, out_dir: str) -> None:
    """torch.onnx.export(dynamo=True) of the fixture's model, and torch's loss and gradients on
    the committed inputs (torch >= 2.6; scripts/torch26-env.sh)."""
    import json

    import torch
    from onnx import TensorProto, numpy_helper

    from models import families

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(0)
    config = families.load_config(name)
    if DYNAMO_VARIANTS[variant]:
        config["attn_config"] = {**config.get("attn_config", {}), **DYNAMO_VARIANTS[variant]}
    model = families.seeded_model(config)
    model.train()

    def read(input_name):
        t = TensorProto()
        with open(os.path.join(fixture_dir, "inputs", input_name + ".pb"), "rb") as f:
            t.ParseFromString(f.read())
        return torch.from_numpy(numpy_helper.to_array(t).copy())

    input_ids, labels = read("input_ids"), read("labels")
    os.makedirs(out_dir, exist_ok=True)
    auto = torch.export.Dim.AUTO
    torch.onnx.export(model, (input_ids, labels), os.path.join(out_dir, "model.onnx"),
                      dynamo=True, input_names=["input_ids", "labels"], output_names=["loss"],
                      dynamic_shapes={"input_ids": {0: auto, 1: auto},
                                      "labels": {0: auto, 1: auto}})
    repo_relative_stack_traces(os.path.join(out_dir, "model.onnx"))
    write_reference(model, input_ids, labels, os.path.join(out_dir, "reference"),
                    f"{name} ({variant})")
    # A tied weight is one parameter with several names; torch's export may call it by another
    # one than named_parameters' first (GPT-2's lm_head.weight for transformer.wte.weight).
    names = {}
    for pname, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(pname)
    tied = {n[0]: n[1:] for n in names.values() if len(n) > 1}
    with open(os.path.join(out_dir, "reference", "tied.json"), "w") as f:
        json.dump(tied, f, indent=2, sort_keys=True)
        f.write("\n")
    with open(os.path.join(out_dir, "export.json"), "w") as f:
        json.dump({"torch": torch.__version__, "variant": variant,
                   "attn_config": DYNAMO_VARIANTS[variant]}, f, indent=2, sort_keys=True)
        f.write("\n")


STACK_TRACE_KEY = "pkg.torch.onnx.stack_trace"


def _nodes(model):
    """Every node of the model: its graph's, its functions', and their subgraphs'."""
    from onnx import AttributeProto

    def walk(nodes):
        for node in nodes:
            yield node
            for attr in node.attribute:
                if attr.type == AttributeProto.GRAPH:
                    yield from walk(attr.g.node)
                elif attr.type == AttributeProto.GRAPHS:
                    for g in attr.graphs:
                        yield from walk(g.node)
    yield from walk(model.graph.node)
    for f in model.functions:
        yield from walk(f.node)


def repo_relative_stack_traces(path: str) -> None:
    """Rewrites the export at `path` with the repository's path cut from the file names in
    torch's stack-trace metadata ("/path/to/checkout/models/mpt.py" -> "models/mpt.py"). The
    weights stay where torch put them (model.onnx.data)."""
    import onnx
    model = onnx.load(path, load_external_data=False)
    prefix = REPO + os.sep
    changed = False
    for node in _nodes(model):
        for prop in node.metadata_props:
            if prop.key == STACK_TRACE_KEY and prefix in prop.value:
                prop.value = prop.value.replace(prefix, "")
                changed = True
    if changed:
        onnx.save(model, path)


def _without_stack_traces(model):
    for node in _nodes(model):
        keep = [(p.key, p.value) for p in node.metadata_props if p.key != STACK_TRACE_KEY]
        del node.metadata_props[:]
        for key, value in keep:
            node.metadata_props.add(key=key, value=value)
    return model


def _weight_files(path: str):
    """Where each initializer of the export at `path` keeps its data: "" inline, else the
    external data file's name."""
    import onnx
    model = onnx.load(path, load_external_data=False)
    return {i.name: "".join(e.value for e in i.external_data if e.key == "location")
            for i in model.graph.initializer}


def compare_dynamo_dirs(new_root: str, names):
    """--dynamo --check: each regenerated (config, variant) folder against the committed one."""
    problems = []
    for name, variant in dynamo_tasks(names):
        new_dir = os.path.join(new_root, name, variant)
        old_dir = os.path.join(FIXTURES_DIR, name, variant)
        what = f"{name}/{variant}"
        if not os.path.isdir(old_dir):
            problems.append(f"{what}: not committed")
            continue
        new_files, old_files = files_under(new_dir), files_under(old_dir)
        if new_files != old_files:
            problems.append(f"{what}: files differ: only regenerated "
                            f"{sorted(new_files - old_files)[:5]}, only committed "
                            f"{sorted(old_files - new_files)[:5]}")
        floor = grad_floor(old_dir, old_files)
        for rel in sorted(new_files & old_files):
            if rel.endswith(".onnx"):
                problems += compare_model(os.path.join(new_dir, rel), os.path.join(old_dir, rel),
                                          f"{what}/{rel} (stack traces aside)", True,
                                          _without_stack_traces)
                if _weight_files(os.path.join(new_dir, rel)) != \
                        _weight_files(os.path.join(old_dir, rel)):
                    problems.append(f"{what}/{rel}: initializers stored elsewhere than in the "
                                    "committed file (inline or external data)")
                continue
            problems += compare_fixture_file(new_dir, old_dir, rel, floor, f"{what}/{rel}")
    return problems


def dynamo_tasks(names):
    import json
    tasks = []
    for name in names:
        with open(os.path.join(FIXTURES_DIR, name, "config.json")) as f:
            if has_dropout(json.load(f)):
                continue  # no reference gradients
        tasks.append((name, "dynamo"))
        if name in DYNAMO_SDPA:
            tasks.append((name, "dynamo_sdpa"))
    return tasks


def generate_dynamo(names, jobs: int, out_root: str = FIXTURES_DIR, check: bool = False) -> int:
    """Each (fixture, variant) in a fresh process, written to a temp folder, then moved over the
    one in `out_root` (a failed run leaves it alone), or compared with the committed one
    (`check`). Returns the exit status."""
    import importlib.util

    import torch
    if tuple(int(x) for x in torch.__version__.split(".")[:2]) < (2, 6):
        raise SystemExit(f"make_fixtures --dynamo: torch {torch.__version__} has no dynamo "
                         "exporter to match; run it inside the torch 2.6 environment: "
                         "scripts/torch26-env.sh run python3 models/make_fixtures.py --dynamo")
    if importlib.util.find_spec("onnxscript") is None:
        raise SystemExit("make_fixtures --dynamo: onnxscript is not installed, and "
                         "torch.onnx.export(dynamo=True) needs it; Debian does not package it: "
                         "download an onnxscript release (0.2.5 goes with torch 2.6) and run "
                         "scripts/torch26-env.sh setup --onnxscript onnxscript-0.2.5.tar.gz")
    tmp = tempfile.mkdtemp(prefix="foundry-dynamo-")

    def run(task):
        name, variant = task
        out = os.path.join(tmp, name, variant)
        cmd = [sys.executable, os.path.abspath(__file__), "--one-dynamo", name, variant,
               "--out", out]
        return task, subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)

    failed = []
    try:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            for (name, variant), proc in pool.map(run, dynamo_tasks(names)):
                if proc.returncode != 0:
                    failed.append(f"{name} ({variant})")
                    print(f"make_fixtures: {name} ({variant}): failed:\n{proc.stderr[-3000:]}",
                          file=sys.stderr)
                    continue
                if check:
                    continue
                dest = os.path.join(out_root, name, variant)
                shutil.rmtree(dest, ignore_errors=True)
                shutil.copytree(os.path.join(tmp, name, variant), dest)
                print(f"make_fixtures: wrote "
                      f"{os.path.relpath(dest, REPO) if out_root == FIXTURES_DIR else dest}")
        if failed:
            raise SystemExit(f"make_fixtures --dynamo: failed for {', '.join(failed)}")
        if not check:
            return 0
        problems = compare_dynamo_dirs(tmp, names)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if problems:
        print("make_fixtures --dynamo --check: regenerated exports do not match the committed "
              "ones:", file=sys.stderr)
        for p in problems:
            print("  " + p, file=sys.stderr)
        return 1
    print(f"make_fixtures --dynamo --check: {len(dynamo_tasks(names))} exports match (rel tol "
          f"{REL_TOL:g}, gradients {GRAD_REL_TOL:g}; graphs exactly, stack traces aside)")
    return 0


# torch 1.13's function extraction sometimes dies with SIGSEGV (bert_tiny: 6 of 40 runs); the
# exports are deterministic, so a fixture whose process was killed by a signal is made again.
CRASH_ATTEMPTS = 3


def generate(names, out_root: str, jobs: int) -> None:
    def run(name):
        cmd = [sys.executable, os.path.abspath(__file__), "--one", name, "--out",
               os.path.join(out_root, name)]
        for attempt in range(1, CRASH_ATTEMPTS + 1):
            shutil.rmtree(os.path.join(out_root, name), ignore_errors=True)
            proc = subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
            if proc.returncode >= 0 or attempt == CRASH_ATTEMPTS:
                return name, proc
            print(f"make_fixtures: {name}: the exporter died (signal {-proc.returncode}), "
                  f"attempt {attempt} of {CRASH_ATTEMPTS}; making it again", file=sys.stderr)

    failed = []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for name, proc in pool.map(run, names):
            for line in proc.stderr.splitlines():
                if line.startswith("make_fixtures:"):
                    print(line, file=sys.stderr)
            if proc.returncode != 0:
                failed.append(name)
                print(f"make_fixtures: {name}: generation failed:\n{proc.stderr[-3000:]}",
                      file=sys.stderr)
    if failed:
        raise SystemExit(f"make_fixtures: generation failed for {', '.join(failed)}")


def generate_big(names, out_root: str, jobs: int) -> None:
    """No-weights exports of the big shapes, scopes and functions formats, one process each."""
    os.makedirs(out_root, exist_ok=True)
    exporter = os.path.join(REPO, "models", "export_mpt.py")
    tasks = [(n, fmt) for n in names for fmt in ("scopes", "functions")]

    def run(task):
        name, fmt = task
        suffix = ".onnx" if fmt == "scopes" else ".functions.onnx"
        cmd = [sys.executable, exporter, "--config", name, "--no-weights", "--annotations", fmt,
               "-o", os.path.join(out_root, name + suffix)]
        return task, subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)

    failed = []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for (name, fmt), proc in pool.map(run, tasks):
            for line in proc.stderr.splitlines():
                if line.startswith("export_mpt:"):
                    print(line, file=sys.stderr)
            if proc.returncode != 0:
                failed.append(f"{name} ({fmt})")
                print(proc.stderr[-3000:], file=sys.stderr)
    if failed:
        raise SystemExit(f"make_fixtures: export failed for {', '.join(failed)}")


# --------------------------------------------------------------------------------------------
# Comparison.


def rel_diff(a, b, floor: float = 0.0) -> float:
    import numpy as np
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    denom = max(float(np.max(np.abs(b))) if b.size else 0.0, floor)
    diff = float(np.max(np.abs(a - b))) if b.size else 0.0
    if denom == 0.0:
        return 0.0 if diff == 0.0 else float("inf")
    return diff / denom


def _compare_tensor(new, old, what: str, tol: float = REL_TOL, floor: float = 0.0):
    import numpy as np
    from onnx import numpy_helper
    if new.name != old.name:
        return f"{what}: tensor name {new.name!r} != committed {old.name!r}"
    a, b = numpy_helper.to_array(new), numpy_helper.to_array(old)
    if a.dtype != b.dtype or a.shape != b.shape:
        return f"{what}: {a.dtype}{list(a.shape)} != committed {b.dtype}{list(b.shape)}"
    if np.issubdtype(a.dtype, np.integer) or a.dtype == bool:
        return None if np.array_equal(a, b) else f"{what}: integer values differ"
    r = rel_diff(a, b, floor)
    if not r <= tol:
        return f"{what}: max|a-b|/max|b| = {r:.3g} > {tol:g}"
    return None


def _structure(model):
    """The model with initializer contents removed (names, types and shapes stay)."""
    import onnx
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for init in m.graph.initializer:
        dims, dtype, name = list(init.dims), init.data_type, init.name
        init.Clear()
        init.name, init.data_type = name, dtype
        init.dims.extend(dims)
    return m


def _op_outline(model):
    main = [(n.domain, n.op_type) for n in model.graph.node]
    funcs = [(f.domain, f.name, [(n.domain, n.op_type) for n in f.node]) for f in model.functions]
    meta = sorted((p.key, p.value) for p in model.metadata_props if p.key != "foundry.scopes")
    return main, funcs, meta


def compare_model(new_path: str, old_path: str, what: str, exact_structure: bool,
                  prepare=lambda model: model):
    import onnx
    new, old = prepare(onnx.load(new_path)), prepare(onnx.load(old_path))
    problems = []
    if exact_structure:
        if _structure(new).SerializeToString() != _structure(old).SerializeToString():
            problems.append(f"{what}: graph structure differs from the committed file")
    elif _op_outline(new) != _op_outline(old):
        problems.append(f"{what}: functions, op sequence or metadata differ from the committed "
                        "file")
    old_inits = {i.name: i for i in old.graph.initializer}
    new_inits = {i.name: i for i in new.graph.initializer}
    if set(old_inits) != set(new_inits):
        problems.append(f"{what}: initializer names differ: "
                        f"{sorted(set(old_inits) ^ set(new_inits))[:10]}")
    for name in sorted(set(old_inits) & set(new_inits)):
        p = _compare_tensor(new_inits[name], old_inits[name], f"{what}: initializer {name}")
        if p:
            problems.append(p)
    return problems


def compare_dirs(new_root: str, old_root: str, names):
    problems = []
    for name in names:
        new_dir, old_dir = os.path.join(new_root, name), os.path.join(old_root, name)
        if not os.path.isdir(old_dir):
            problems.append(f"{name}: no committed fixture at {old_dir}")
            continue
        new_files, old_files = files_under(new_dir), files_under(old_dir)
        if new_files != old_files:
            problems.append(f"{name}: files differ: only regenerated "
                            f"{sorted(new_files - old_files)[:5]}, only committed "
                            f"{sorted(old_files - new_files)[:5]}")
        floor = grad_floor(old_dir, old_files)
        for rel in sorted(new_files & old_files):
            problems += compare_fixture_file(new_dir, old_dir, rel, floor, f"{name}/{rel}")
    return problems


def files_under(d: str):
    """Files of a fixture, less its dynamo*/ folders (torch 2.6's, see --dynamo) and its
    amp_reference/ (torch 2.6's autocast, models/amp_reference.py)."""
    out = set()
    for r, dirs, fs in os.walk(d):
        if r == d:
            dirs[:] = [x for x in dirs if not x.startswith("dynamo") and x != "amp_reference"]
        out |= {os.path.relpath(os.path.join(r, f), d) for f in fs}
    return out


def grad_floor(old_dir: str, old_files) -> float:
    """GRAD_FLOOR times the fixture's largest committed gradient element."""
    grads = [rel for rel in old_files if is_grad_file(rel)]
    return GRAD_FLOOR * max((max_abs(os.path.join(old_dir, rel)) for rel in grads), default=0.0)


def compare_fixture_file(new_dir: str, old_dir: str, rel: str, floor: float, what: str):
    """One file of a fixture with --check's tolerance: gradients within GRAD_REL_TOL of
    max(max|b|, floor), everything else within REL_TOL."""
    grad = is_grad_file(rel)
    return compare_file(os.path.join(new_dir, rel), os.path.join(old_dir, rel), what,
                        tol=GRAD_REL_TOL if grad else REL_TOL, floor=floor if grad else 0.0)


def is_grad_file(rel: str) -> bool:
    return rel.startswith(os.path.join("reference", "grads") + os.sep) and rel.endswith(".pb")


def max_abs(path: str) -> float:
    import numpy as np
    import onnx
    from onnx import numpy_helper
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    a = numpy_helper.to_array(t)
    return float(np.max(np.abs(a.astype(np.float64)))) if a.size else 0.0


def compare_file(a: str, b: str, what: str, tol: float = REL_TOL, floor: float = 0.0):
    """Problems (empty when equal) between a regenerated file `a` and a committed file `b`."""
    import onnx
    if a.endswith(".pb"):
        ta, tb = onnx.TensorProto(), onnx.TensorProto()
        with open(a, "rb") as f:
            ta.ParseFromString(f.read())
        with open(b, "rb") as f:
            tb.ParseFromString(f.read())
        p = _compare_tensor(ta, tb, what, tol, floor)
        return [p] if p else []
    if a.endswith(".onnx"):
        return compare_model(a, b, what, exact_structure=not a.endswith("functions.onnx"))
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return [] if fa.read() == fb.read() else [f"{what}: contents differ"]


def compare_big(new_root: str, old_root: str, names):
    problems = []
    for name in names:
        for suffix in (".onnx", ".functions.onnx"):
            a, b = os.path.join(new_root, name + suffix), os.path.join(old_root, name + suffix)
            if not os.path.exists(b):
                problems.append(f"exports/{name}{suffix}: not committed")
                continue
            problems += compare_file(a, b, f"exports/{name}{suffix}")
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="regenerate into a temp dir and compare with the committed fixtures")
    ap.add_argument("--only", nargs="+", metavar="CONFIG", help="only these fixtures")
    ap.add_argument("--out", help="output root (default models/fixtures)")
    ap.add_argument("--jobs", type=int, default=2, help="fixtures generated in parallel")
    ap.add_argument("--big", nargs="*", metavar="CONFIG",
                    help="also (re)make or check the no-weights exports in models/exports "
                    "(all, or only the CONFIGs named)")
    ap.add_argument("--dynamo", action="store_true",
                    help="(re)make the dynamo/ folders with torch 2.6's exporter (inside "
                    "scripts/torch26-env.sh run); with --check compare fresh ones with them, "
                    "with --out write them under OUT instead")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--one-dynamo", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.one:
        generate_one(args.one, args.out)
        return 0
    if args.one_dynamo:
        name, variant = args.one_dynamo
        generate_dynamo_one(name, variant, os.path.join(FIXTURES_DIR, name), args.out)
        return 0
    names = args.only or FIXTURES
    unknown = [n for n in names if n not in FIXTURES]
    if unknown:
        ap.error(f"unknown fixture(s) {unknown}; known: {FIXTURES}")
    big = None if args.big is None else (args.big or BIG)
    unknown = [n for n in big or [] if n not in BIG]
    if unknown:
        ap.error(f"unknown big export(s) {unknown}; known: {BIG}")
    if args.dynamo:
        if big is not None or (args.check and args.out):
            ap.error("--dynamo takes only --only, --jobs and one of --check and --out")
        return generate_dynamo(names, args.jobs, args.out or FIXTURES_DIR, args.check)
    if args.check:
        committed = args.out or FIXTURES_DIR
        with tempfile.TemporaryDirectory(prefix="foundry-fixtures-") as tmp:
            generate(names, tmp, args.jobs)
            problems = compare_dirs(tmp, committed, names)
            if big:
                generate_big(big, os.path.join(tmp, "exports"), args.jobs)
                problems += compare_big(os.path.join(tmp, "exports"), EXPORTS_DIR, big)
        if problems:
            print("make_fixtures --check: regenerated fixtures do not match the committed ones:",
                  file=sys.stderr)
            for p in problems:
                print("  " + p, file=sys.stderr)
            print("If the change is intended, run /usr/bin/python3 models/make_fixtures.py "
                  "[--big] and commit models/fixtures (and models/exports).", file=sys.stderr)
            return 1
        what = f"{len(names)} fixtures" + (f" and {len(big)} big exports" if big else "")
        print(f"make_fixtures --check: {what} match (rel tol {REL_TOL:g}, gradients {GRAD_REL_TOL:g})")
        return 0
    out_root = args.out or FIXTURES_DIR
    with tempfile.TemporaryDirectory(prefix="foundry-fixtures-") as tmp:
        generate(names, tmp, args.jobs)
        changed = sum(install(os.path.join(tmp, n), os.path.join(out_root, n)) for n in names)
        print(f"make_fixtures: {len(names)} fixtures in {out_root}, {changed} files changed")
        if big:
            generate_big(big, os.path.join(tmp, "exports"), args.jobs)
            # Only the exports made here: the others in EXPORTS_DIR are not stale.
            changed = install(os.path.join(tmp, "exports"), EXPORTS_DIR,
                              remove_stale=big == BIG)
            print(f"make_fixtures: {len(big)} no-weights exports in {EXPORTS_DIR}, "
                  f"{changed} files changed")
    return 0


def install(new_dir: str, old_dir: str, remove_stale: bool = True) -> int:
    """Copies regenerated files over the committed ones, except those that --check would accept
    (same numbers within its tolerances, same structure): functions exports differ in internal
    names from run to run and gradients in rounding from CPU to CPU, and rewriting them would
    only churn the repository. Stale files are removed, unless `remove_stale` is off (a partial
    set of exports)."""
    changed = 0
    new_files = files_under(new_dir)
    old_files = files_under(old_dir) if os.path.isdir(old_dir) else set()
    for rel in sorted(old_files - new_files) if remove_stale else []:
        os.remove(os.path.join(old_dir, rel))
        changed += 1
    floor = grad_floor(old_dir, old_files)
    for rel in sorted(new_files):
        a, b = os.path.join(new_dir, rel), os.path.join(old_dir, rel)
        if rel in old_files and not compare_fixture_file(new_dir, old_dir, rel, floor, rel):
            continue
        os.makedirs(os.path.dirname(b), exist_ok=True)
        shutil.copyfile(a, b)
        changed += 1
    return changed


if __name__ == "__main__":
    sys.exit(main())
