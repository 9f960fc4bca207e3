#!/usr/bin/python3
"""Checks the committed fixtures in models/fixtures/ and the exporter that makes them.

Run from anywhere: /usr/bin/python3 tests/models/fixtures_test.py
Exits 77 (skip) where torch, onnx or numpy are not importable, except under CI (FOUNDRY_CI=1,
set by .ci/run), where that is a failure. Checks are `check()` calls, not `assert` statements,
so they still run under `python3 -O`.

For every fixture:
- parameters map one-to-one to initializers (name, shape, exact values) against a fresh PyTorch
  model built from config.json with the same seed, in all three formats; no renamed (`onnx::`) or
  Identity-merged copies; foundry.parameters / foundry.module_classes / the graph signature agree
  with the module tree; every non-parameter initializer is a named buffer of at most 64 KiB;
- the metadata-format file carries NodeProto field 9 entries on every node;
- the stock export (model.stock.onnx, plain torch.onnx.export) carries no foundry metadata at all
  (no foundry.* or torch.export model keys, no node metadata, no functions); its graph and
  initializers are exactly the scopes file's (foundry's scopes annotation only adds model
  metadata), so a tied weight is one initializer under its first name there too; the float
  initializers that are not parameters are exactly the model's float buffers (none named *.weight
  or *.bias, so a stock export, which has no parameter list, keeps them constant);
- the four files compute PyTorch's loss (NumPy interpreter, models/onnx_eval.py) at the fixture
  shape and at another (batch, seq), so `batch` and `seq` really are symbolic (dropout fixtures:
  Dropout as identity against PyTorch in eval mode);
- reference gradients exist for exactly the trainable parameters, are named `<init>_grad`, have
  the parameter's shape and are not all zero;
- only the op types documented in models/OPS.md occur;
- the torch 2.6 `dynamo=True` exports (dynamo/, and mpt_tiny's dynamo_sdpa/; make_fixtures.py
  --dynamo): present for every fixture with reference gradients, IR 10 / opset 18 from torch 2.6,
  weights in model.onnx.data, gradients for exactly the fresh model's parameters (a tied weight
  under any of its names, as tied.json says), the same inputs as the other formats;
- every format carries `foundry.padding_idx` exactly when an nn.Embedding has a padding row
  (BERT), and the inputs look that row up;
and `make_fixtures.py --check` reproduces every committed number within relative 1e-6.
"""

import ast
import json
import os
import subprocess
import sys
import time
import traceback

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

try:
    import numpy as np
    import onnx
    import torch
    from onnx import numpy_helper
except ImportError as e:
    if os.environ.get("FOUNDRY_CI") == "1":
        print(f"FAIL: {e}; CI (FOUNDRY_CI=1) needs torch, onnx and numpy: run scripts/setup.sh")
        sys.exit(1)
    print(f"SKIP: {e} (install python3-torch and python3-onnx with scripts/setup.sh)")
    sys.exit(77)

from models import families  # noqa: E402
from models.foundry_export import (  # noqa: E402
    CLASS_HIERARCHY_KEY, GRAPH_SIGNATURE_KEY, NAME_SCOPES_KEY, PADDING_IDX_KEY, ScopeResolver,
    buffer_names, class_chain, encode_metadata_entry, module_classes, padding_rows,
    parameter_names, read_node_metadata)
from models.make_fixtures import FIXTURES, FIXTURES_DIR, has_dropout  # noqa: E402
from models.onnx_eval import Evaluator  # noqa: E402

MAX_BUFFER_BYTES = 64 * 1024
LOSS_RTOL = 1e-5
# Every op type an export may contain (models/OPS.md); all in the default ONNX domain, opset 17.
KNOWN_OPS = {
    "Add", "Cast", "Clip", "Concat", "Constant", "ConstantOfShape", "Cos", "Div", "Dropout",
    "Equal", "Erf", "Expand", "Gather", "Greater", "LayerNormalization", "MatMul", "Mul", "Neg",
    "Pow", "Range", "ReduceMean", "Reshape", "Shape", "Sigmoid", "Sin", "Slice", "Softmax",
    "SoftmaxCrossEntropyLoss", "Sqrt", "Sub", "Transpose", "Unsqueeze", "Where",
    "Gemm", "Split", "Squeeze", "Tanh",  # GPT-2: Conv1D's addmm, c_attn split, shapes, gelu_new
    "GreaterOrEqual", "Or",  # llama_tiny_window's sliding-window mask (Tanh: its soft-cap)
}

_models = {}


class CheckFailed(Exception):
    pass


def check(condition, message=""):
    """An assertion that `python3 -O` keeps (it strips `assert` statements)."""
    if not condition:
        raise CheckFailed(message)


def fixture_dir(name):
    return os.path.join(FIXTURES_DIR, name)


def load_tensor(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t


def fresh_model(name):
    if name not in _models:
        with open(os.path.join(fixture_dir(name), "config.json")) as f:
            config = json.load(f)
        config.setdefault("name", name)
        _models[name] = (config, families.seeded_model(config))
    return _models[name]


def model_files(name):
    d = fixture_dir(name)
    files = {"scopes": os.path.join(d, "model.onnx"),
             "metadata": os.path.join(d, "model.metadata.onnx"),
             "functions": os.path.join(d, "model.functions.onnx")}
    return {k: v for k, v in files.items() if os.path.exists(v)}


def stock_file(name):
    return os.path.join(fixture_dir(name), "model.stock.onnx")


def export_files(name):
    """The annotated formats and the stock export."""
    return dict(model_files(name), stock=stock_file(name))


def all_nodes(model):
    yield from model.graph.node
    for f in model.functions:
        yield from f.node


# --------------------------------------------------------------------------------------------


def check_layout(name):
    d = fixture_dir(name)
    config, _ = fresh_model(name)
    with open(os.path.join(d, "config.json")) as f, \
            open(os.path.join(families.CONFIGS_DIR, name + ".json")) as g:
        check(f.read() == g.read(), "config.json differs from models/configs/" + name + ".json")
    for fmt in ("scopes", "metadata", "functions"):
        check(fmt in model_files(name), f"missing the {fmt} model file")
    check(os.path.exists(stock_file(name)), "missing model.stock.onnx")
    s = families.settings(config)
    for input_name in ("input_ids", "labels"):
        t = load_tensor(os.path.join(d, "inputs", input_name + ".pb"))
        check(t.name == input_name, f"inputs/{input_name}.pb is named {t.name!r}")
        check(t.data_type == onnx.TensorProto.INT64)
        check(list(t.dims) == [s["batch_size"], s["seq_len"]], list(t.dims))
    # A padding row the inputs never look up would not test foundry.padding_idx at all.
    ids = numpy_helper.to_array(load_tensor(os.path.join(d, "inputs", "input_ids.pb")))
    for pname, row in padding_rows(fresh_model(name)[1]).items():
        check(row in ids, f"inputs/input_ids.pb never holds {pname}'s padding row {row}")
    has_ref = os.path.isdir(os.path.join(d, "reference"))
    check(has_ref != has_dropout(config), "reference/ must exist exactly for dropout-off configs")


def check_parameters_one_to_one(name):
    config, model = fresh_model(name)
    params = dict(model.named_parameters())
    trainable = parameter_names(model)
    buffers = dict(model.named_buffers())
    for fmt, path in model_files(name).items():
        proto = onnx.load(path)
        inits = [i.name for i in proto.graph.initializer]
        check(len(inits) == len(set(inits)), f"{fmt}: duplicate initializer names")
        by_name = {i.name: i for i in proto.graph.initializer}
        for pname in trainable:
            check(pname in by_name, f"{fmt}: parameter {pname} is not an initializer")
            value = numpy_helper.to_array(by_name[pname])
            expected = params[pname].detach().numpy()
            check(value.shape == expected.shape, f"{fmt}: {pname} shape {value.shape}")
            check(np.array_equal(value, expected), f"{fmt}: {pname} values differ from PyTorch")
        for iname, init in by_name.items():
            if iname in params:
                continue
            check(not iname.startswith("onnx::"), f"{fmt}: renamed initializer {iname}")
            check(iname in buffers, f"{fmt}: initializer {iname} is neither parameter nor buffer")
            nbytes = numpy_helper.to_array(init).nbytes
            check(nbytes <= MAX_BUFFER_BYTES, f"{fmt}: buffer {iname} has {nbytes} bytes")
            check(np.array_equal(numpy_helper.to_array(init), buffers[iname].numpy()))
        for node in all_nodes(proto):
            check(node.op_type != "Identity" or not set(node.input) & set(params),
                  f"{fmt}: Identity node {node.name} copies a parameter")
        meta = {p.key: p.value for p in proto.metadata_props}
        # Every format carries the padding rows (without them the gradients differ from torch's).
        rows = padding_rows(model)
        check(json.loads(meta.get(PADDING_IDX_KEY, "{}")) == rows, f"{fmt}: {PADDING_IDX_KEY}")
        if fmt == "metadata":
            check(not [k for k in meta if k.startswith("foundry.") and k != PADDING_IDX_KEY],
                  "foundry.* in format 3")
            sig = meta[GRAPH_SIGNATURE_KEY]
            sig_params = [line.split("target='")[1].rstrip("'") for line in sig.splitlines()
                          if ": PARAMETER " in line]
            sig_buffers = [line.split("target='")[1].split("'")[0] for line in sig.splitlines()
                           if ": BUFFER " in line]
            check(sig_params == trainable, "graph signature parameters differ")
            check(sig_buffers == buffer_names(model), "graph signature buffers differ")
        else:
            check(json.loads(meta["foundry.parameters"]) == trainable)
            check(json.loads(meta["foundry.module_classes"]) == module_classes(model))
            resolver = ScopeResolver(dict(model.named_modules()))
            for scope, path in json.loads(meta["foundry.scopes"]).items():
                check(resolver.resolve(scope) == path, (scope, path))


def check_graph_io_and_ops(name):
    for fmt, path in export_files(name).items():
        proto = onnx.load(path)
        inputs = {i.name: i for i in proto.graph.input}
        for input_name in ("input_ids", "labels"):
            dims = inputs[input_name].type.tensor_type.shape.dim
            check([d.dim_param for d in dims] == ["batch", "seq"], f"{fmt}: {input_name} dims")
            check(inputs[input_name].type.tensor_type.elem_type == onnx.TensorProto.INT64)
        check([o.name for o in proto.graph.output] == ["loss"], f"{fmt}: outputs")
        check([(o.domain, o.version) for o in proto.opset_import if o.domain == ""] == [("", 17)])
        function_ops = {(f.domain, f.name) for f in proto.functions}
        for node in all_nodes(proto):
            if (node.domain, node.op_type) in function_ops:
                continue
            check(node.domain == "", f"{fmt}: op {node.domain}::{node.op_type}")
            check(node.op_type in KNOWN_OPS,
                  f"{fmt}: op {node.op_type} is not documented in models/OPS.md")


def check_metadata_format(name):
    _, model = fresh_model(name)
    classes = module_classes(model)
    proto = onnx.load(model_files(name)["metadata"])
    check(proto.ir_version == 10, proto.ir_version)
    values = set()
    for node in proto.graph.node:
        entries = dict(read_node_metadata(node))
        check(NAME_SCOPES_KEY in entries and CLASS_HIERARCHY_KEY in entries,
              f"node {node.name} lacks field-9 metadata")
        scopes = ast.literal_eval(entries[NAME_SCOPES_KEY])
        hierarchy = ast.literal_eval(entries[CLASS_HIERARCHY_KEY])
        check(len(scopes) == len(hierarchy) >= 2, (node.name, scopes, hierarchy))
        check(scopes[0] == "" and hierarchy[0] == classes[""][0])
        for path, cls in zip(scopes[:-1], hierarchy[:-1]):
            check(classes[path][0] == cls, (path, cls))
        check(not node.name.startswith("/") and "/" not in node.name, node.name)
        values.update(node.output)
    check(not [v for v in values if "/" in v], "value names still carry scopes")
    # Unknown fields survive a parse/serialise round trip of the whole model.
    again = onnx.ModelProto()
    again.ParseFromString(proto.SerializeToString())
    check(read_node_metadata(again.graph.node[-1]) == read_node_metadata(proto.graph.node[-1]))


def check_loss_matches_pytorch(name):
    """With dropout on, Dropout nodes run as identity and PyTorch runs in eval mode."""
    config, model = fresh_model(name)
    dropout = has_dropout(config)
    d = fixture_dir(name)
    ids = numpy_helper.to_array(load_tensor(os.path.join(d, "inputs", "input_ids.pb")))
    labels = numpy_helper.to_array(load_tensor(os.path.join(d, "inputs", "labels.pb")))
    other_ids, other_labels = families.make_inputs(config, 3, 5)
    model.train(not dropout)
    with torch.no_grad():
        fresh = float(model(torch.tensor(ids), torch.tensor(labels)))
        other_ref = float(model(other_ids, other_labels))
    model.train()
    if dropout:
        ref = fresh
    else:
        ref = float(numpy_helper.to_array(load_tensor(os.path.join(d, "reference", "loss.pb"))))
        check(abs(fresh - ref) <= LOSS_RTOL * abs(ref), f"PyTorch gives {fresh}, reference {ref}")
    for fmt, path in export_files(name).items():
        ev = Evaluator(onnx.load(path), dropout_as_identity=dropout)
        loss = float(ev.run({"input_ids": ids, "labels": labels})["loss"])
        check(abs(loss - ref) <= LOSS_RTOL * abs(ref), f"{fmt}: ONNX loss {loss} != {ref}")
        loss = float(ev.run({"input_ids": other_ids.numpy(),
                             "labels": other_labels.numpy()})["loss"])
        check(abs(loss - other_ref) <= LOSS_RTOL * abs(other_ref),
              f"{fmt}: at batch 3, seq 5 ONNX loss {loss} != PyTorch {other_ref}")


def check_stock_export(name):
    _, model = fresh_model(name)
    stock, scopes = onnx.load(stock_file(name)), onnx.load(model_files(name)["scopes"])
    keys = [p.key for p in stock.metadata_props]
    check(not [k for k in keys if k.startswith("foundry.") or k == GRAPH_SIGNATURE_KEY],
          f"foundry or torch.export metadata in a stock export: {keys}")
    check(not stock.functions, "a stock export has no local functions")
    check(not [n.name for n in stock.graph.node if read_node_metadata(n)],
          "node metadata_props in a stock export")
    # The scopes format is the stock export plus model metadata: same nodes, same initializers
    # (names, order, bytes). So the reference numbers and every check of the annotated files
    # carry over, and a change in either exporter shows here.
    check(stock.graph.SerializeToString() == scopes.graph.SerializeToString(),
          "the stock graph differs from the scopes file's graph")
    inits = {i.name: i for i in stock.graph.initializer}
    params = dict(model.named_parameters())  # a tied weight once, under its first name
    trainable = parameter_names(model)
    for pname in trainable:
        check(pname in inits, f"parameter {pname} is not an initializer")
        check(np.array_equal(numpy_helper.to_array(inits[pname]), params[pname].detach().numpy()),
              f"{pname}: values differ from PyTorch")
    # A weight registered under two names (Hugging Face's tied head: `lm_head.weight` is
    # `transformer.wte.weight`) is one initializer under its first name: torch deduplicates by
    # identity, so the alias never appears. (MPT ties by calling wte twice: no alias.)
    aliases = [f"{path}.{local}" if path else local
               for path, m in model.named_modules() for local, p in m._parameters.items()
               if p is not None and params.get(f"{path}.{local}" if path else local) is not p]
    check(not [a for a in aliases if a in inits], f"tied aliases as initializers: {aliases}")
    # What foundry trains in a stock export beyond PyTorch's parameters (it has no parameter
    # list, so every float initializer): exactly the model's float buffers.
    floats = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
              onnx.TensorProto.DOUBLE}
    extra = [n for n, i in inits.items() if n not in params and i.data_type in floats]
    buffers = dict(model.named_buffers())
    float_buffers = [b for b in buffer_names(model)
                     if b in inits and buffers[b].is_floating_point()]
    check(extra == float_buffers, f"float initializers beyond the parameters {extra} != the "
          f"model's float buffers {float_buffers}")
    for iname in inits:
        check(iname in params or iname in buffers,
              f"initializer {iname} is neither parameter nor buffer")


def check_reference_grads(name):
    config, model = fresh_model(name)
    if has_dropout(config):
        return
    grads_dir = os.path.join(fixture_dir(name), "reference", "grads")
    params = dict(model.named_parameters())
    files = sorted(os.listdir(grads_dir))
    check(files == sorted(p + "_grad.pb" for p in parameter_names(model)), "grad file set")
    for fname in files:
        t = load_tensor(os.path.join(grads_dir, fname))
        pname = fname[:-len("_grad.pb")]
        check(t.name == pname + "_grad", t.name)
        check(t.data_type == onnx.TensorProto.FLOAT)
        check(list(t.dims) == list(params[pname].shape), (pname, list(t.dims)))
        check(np.abs(numpy_helper.to_array(t)).max() > 0, f"{pname}: gradient is all zero")


# --------------------------------------------------------------------------------------------
# Exporter pieces that the fixtures do not pin down on their own.


def test_class_chain_and_registry():
    from models import mpt
    check(class_chain(mpt.MultiheadAttention) == [
        "models.mpt.MultiheadAttention", "models.mpt.GroupedQueryAttention"])
    check(class_chain(mpt.LPLayerNorm) == [
        "models.mpt.LPLayerNorm", "torch.nn.modules.normalization.LayerNorm"])
    check(class_chain(mpt.MPTGLU) == ["models.mpt.MPTGLU", "models.mpt.MPTMLP"])
    check(set(mpt.MODULE_REGISTRY) == {
        "mptblock", "grouped_query_attention", "multihead_attention", "multiquery_attention",
        "mptmlp", "mptglu", "layernorm", "low_precision_layernorm", "rmsnorm",
        "low_precision_rmsnorm"})
    for key, cls in mpt.MODULE_REGISTRY.items():
        check(isinstance(key, str) and issubclass(cls, torch.nn.Module))
    check(issubclass(mpt.MultiQueryAttention, mpt.GroupedQueryAttention))
    check(issubclass(mpt.LPRMSNorm, mpt.RMSNorm))


def test_alibi_slopes_match_llm_foundry():
    from models import mpt
    # llm-foundry's gen_slopes for 8 heads: 1/2^1 ... 1/2^8; for 5 heads (n=8): odd then even.
    s8 = mpt.gen_slopes(8).flatten().tolist()
    check(s8 == [2.0 ** -i for i in range(1, 9)], s8)
    s5 = mpt.gen_slopes(5).flatten().tolist()
    check(s5 == [2.0 ** -i for i in (2, 4, 6, 8, 1)], s5)
    bias = mpt.build_alibi_bias(mpt.gen_slopes(4), 3)
    check(list(bias.shape) == [1, 4, 1, 3])
    check(bias[0, 0, 0].tolist() == [-0.5, -0.25, 0.0])  # slope 1/4, distances -2 -1 0


def test_scope_resolution():
    resolver = ScopeResolver(["", "transformer", "transformer.wte", "transformer.blocks",
                              "transformer.blocks.0", "transformer.blocks.0.attn"])
    check(resolver.resolve("/wte") == "transformer.wte")
    check(resolver.chain("/transformer/blocks.0/attn") == [
        "", "transformer", "transformer.blocks.0", "transformer.blocks.0.attn"])
    try:
        resolver.resolve("/transformer/nope")
    except ValueError as e:
        check("nope" in str(e))
    else:
        raise AssertionError("unknown scope segment accepted")


def test_node_metadata_round_trip():
    node = onnx.helper.make_node("Relu", ["x"], ["y"], name="node_relu")
    node.MergeFromString(encode_metadata_entry("k", "v" * 200) + encode_metadata_entry("a", ""))
    again = onnx.NodeProto()
    again.ParseFromString(node.SerializeToString())
    check(read_node_metadata(again) == [("k", "v" * 200), ("a", "")])


def test_no_weights_export():
    """The --no-weights path (meta device): real structure, parameters as graph inputs declared by
    shape, buffers kept as initializers, and the same loss as PyTorch once weights are fed."""
    import tempfile
    name = "mpt_tiny_gqa_glu"
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "m.onnx")
        proc = subprocess.run([sys.executable, os.path.join(REPO, "models", "export_mpt.py"),
                               "--config", name, "-o", out, "--no-weights", "--json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        check(proc.returncode == 0, proc.stderr[-2000:])
        proto = onnx.load(out)
    config, model = fresh_model(name)
    meta = {p.key: p.value for p in proto.metadata_props}
    trainable = parameter_names(model)
    check(json.loads(meta["foundry.parameters"]) == trainable)
    inputs = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim]
              for i in proto.graph.input}
    check(sorted(inputs) == sorted(trainable + ["input_ids", "labels"]), sorted(inputs))
    for pname, p in model.named_parameters():
        check(inputs[pname] == list(p.shape), pname)
    buffers = dict(model.named_buffers())
    check(sorted(i.name for i in proto.graph.initializer) == sorted(buffers))
    for init in proto.graph.initializer:
        check(np.array_equal(numpy_helper.to_array(init), buffers[init.name].numpy()))
    weights = {n: p.detach().numpy() for n, p in model.named_parameters()}
    ids, labels = families.make_inputs(config, 2, 9)
    with torch.no_grad():
        ref = float(model(ids, labels))
    loss = float(Evaluator(proto).run({"input_ids": ids.numpy(), "labels": labels.numpy()},
                                      weights)["loss"])
    check(abs(loss - ref) <= LOSS_RTOL * abs(ref), (loss, ref))


def test_tied_embedding_is_one_initializer():
    """mpt_tiny and gpt2_tiny tie wte as the LM head: one initializer, read by the Gather and
    the head (GPT-2: `lm_head.weight` is not a second initializer)."""
    for fixture in ("mpt_tiny", "gpt2_tiny"):
        proto = onnx.load(model_files(fixture)["scopes"])
        name = "transformer.wte.weight"
        inits = [i.name for i in proto.graph.initializer]
        check(inits.count(name) == 1 and "lm_head.weight" not in inits, fixture)
        users = sorted(n.op_type for n in proto.graph.node if name in n.input)
        check(users == ["Gather", "Transpose"], (fixture, users))


def test_big_exports():
    """The committed no-weights exports (models/exports): real structure, parameters as graph
    inputs with the model's shapes, buffers as initializers, symbolic batch/seq, known ops."""
    from models.make_fixtures import BIG, EXPORTS_DIR
    for name in BIG:
        config = families.load_config(name)
        model = families.build(config, device="meta")
        shapes = {n: list(p.shape) for n, p in model.named_parameters()}
        buffers = dict(model.named_buffers())  # built on CPU even in a meta model
        # Weights stay out; buffers stay in (GPT-2's causal masks: 12 x 1 MiB of bool).
        limit = 2 * 1024 * 1024 + sum(b.numel() * b.element_size() for b in buffers.values())
        for suffix in (".onnx", ".functions.onnx"):
            path = os.path.join(EXPORTS_DIR, name + suffix)
            check(os.path.exists(path), f"missing {path} (make_fixtures.py --big)")
            check(os.path.getsize(path) < limit, f"{path} is over {limit} bytes")
            proto = onnx.load(path)
            meta = {p.key: p.value for p in proto.metadata_props}
            check(json.loads(meta["foundry.parameters"]) == list(shapes), name)
            inputs = {i.name: i.type.tensor_type.shape.dim for i in proto.graph.input}
            for pname, shape in shapes.items():
                check([d.dim_value for d in inputs[pname]] == shape, (name, pname))
            for input_name in ("input_ids", "labels"):
                check([d.dim_param for d in inputs[input_name]] == ["batch", "seq"])
            check(sorted(i.name for i in proto.graph.initializer) == sorted(buffers), name)
            for init in proto.graph.initializer:
                check(np.array_equal(numpy_helper.to_array(init), buffers[init.name].numpy()))
            function_ops = {(f.domain, f.name) for f in proto.functions}
            for node in all_nodes(proto):
                if (node.domain, node.op_type) not in function_ops:
                    check(node.domain == "" and node.op_type in KNOWN_OPS, node.op_type)


def check_dynamo_exports(name):
    from models.make_fixtures import DYNAMO_SDPA
    config, model = fresh_model(name)
    variants = [] if has_dropout(config) else ["dynamo"] + (["dynamo_sdpa"] if name in DYNAMO_SDPA
                                                           else [])
    present = sorted(x for x in os.listdir(fixture_dir(name)) if x.startswith("dynamo"))
    check(present == variants, f"dynamo folders {present}, expected {variants}")
    for variant in variants:
        d = os.path.join(fixture_dir(name), variant)
        with open(os.path.join(d, "export.json")) as f:
            info = json.load(f)
        check(info["torch"].startswith("2.6") and info["variant"] == variant, info)
        proto = onnx.load(os.path.join(d, "model.onnx"))  # loads model.onnx.data beside it
        check(proto.ir_version == 10, f"{variant}: IR {proto.ir_version}")
        check({(o.domain, o.version) for o in proto.opset_import} == {("", 18)}, variant)
        check([i.name for i in proto.graph.input] == ["input_ids", "labels"],
              [i.name for i in proto.graph.input])
        inits = {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}
        with open(os.path.join(d, "reference", "tied.json")) as f:
            tied = json.load(f)
        grads = sorted(f[:-len("_grad.pb")] for f in os.listdir(os.path.join(d, "reference",
                                                                             "grads")))
        params = dict(model.named_parameters())
        check(grads == sorted(parameter_names(model)), f"{variant}: gradients {grads}")
        for pname in grads:
            names = [pname] + tied.get(pname, [])
            held = [n for n in names if n in inits]
            check(len(held) == 1, f"{variant}: {pname} is held as {held}")
            check(inits[held[0]].shape == tuple(params[pname].shape), (variant, pname))


def test_make_fixtures_check():
    proc = subprocess.run([sys.executable, os.path.join(REPO, "models", "make_fixtures.py"),
                           "--check"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    check(proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:])


PER_FIXTURE = [check_layout, check_parameters_one_to_one, check_graph_io_and_ops,
               check_metadata_format, check_stock_export, check_loss_matches_pytorch,
               check_reference_grads, check_dynamo_exports]
GLOBAL = [test_class_chain_and_registry, test_alibi_slopes_match_llm_foundry,
          test_scope_resolution, test_node_metadata_round_trip, test_no_weights_export,
          test_tied_embedding_is_one_initializer, test_big_exports, test_make_fixtures_check]


def main() -> int:
    torch.set_num_threads(1)
    cases = [(f"{check.__name__}[{name}]", check, (name,))
             for name in FIXTURES for check in PER_FIXTURE]
    cases += [(t.__name__, t, ()) for t in GLOBAL]
    passed = failed = 0
    for label, fn, args in cases:
        start = time.time()
        try:
            fn(*args)
        except Exception:  # noqa: BLE001 - report every failure, keep going
            failed += 1
            print(f"FAIL {label}")
            traceback.print_exc(file=sys.stdout)
        else:
            passed += 1
            print(f"ok   {label} ({time.time() - start:.2f}s)")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
