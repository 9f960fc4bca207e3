#!/usr/bin/python3
"""Writes the small ONNX models the compiler's import/export tests read (tests/data/onnx/).

    /usr/bin/python3 tests/data/make_test_models.py

Needs torch 1.13 and onnx 1.12 (Debian's). Each torch export runs in its own process (torch 1.13
keeps state between exports). The outputs are committed; rerun this script only to change them.
They are deterministic (seeded weights) except for the value names inside toy.functions.onnx's
function bodies: torch keeps the names of one of the calls, not always the same one.

  toy.scopes.onnx      a 2-block toy transformer (d 8, classes named like llm-foundry's) with
                       TorchScript scoped names + foundry.* metadata (annotation format 2)
  toy.functions.onnx   the same model with ONNX local functions (format 1)
  toy.metadata.onnx    the same model in the dynamo exporter's shape: IR 10, NodeProto field 9
                       metadata_props (format 3)
  toy.noweights.onnx   format 2, export_params=False: parameters are graph inputs with shapes
  opset18.onnx         hand-made opset-18 graph: ReduceMean with axes as an input, Split with
                       num_outputs
  quoted_ir10.onnx     IR 10, field-9 metadata whose repr lists hold escaped quotes
  func_refs.onnx       hand-made local functions: nested calls, an attribute reference
                       (ref_attr_name), a call that uses no parameter, call-site variant `Act.1`
  external/model.onnx  an initializer in external data (external/weights.bin, offset 16)
  external_missing.onnx   refers to a data file that does not exist
  bad_raw_size.onnx    an initializer whose raw_data is shorter than its dims need
  func_refs.notable.onnx  the same without foundry.* metadata (no class table)
  opset11.onnx         a valid model of an opset foundry does not accept (IR 7)
  ir6.onnx             a valid opset-13 model of IR version 6
  no_nodes.onnx        a graph without nodes
  undefined_input.onnx an IR 10 model whose node reads a value nothing defines
  if_subgraph.onnx     an If node (subgraph attribute)
  ln_nobias.functions.onnx   stock torch 1.13 functions export (no foundry metadata) of a block
                       holding a LayerNorm whose bias is None, with a second such LayerNorm outside
                       it: torch hoists the None bias out of the functions as outputs no node
                       writes, read only as LayerNormalization's optional bias
  nested_child.functions.onnx   stock functions export of two BERT-shaped layers (Layer calls
                       Intermediate, whose only parameters are its child `dense`, and Output)
  tensor_float_data.pb / tensor_int32_bool.pb / tensor_raw_i64.pb   TensorProto files with typed
                       fields (float_data, int32_data for BOOL) and raw_data
"""

import json
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(HERE, "onnx")


def toy_model():
    """A 2-block transformer-shaped model whose classes carry llm-foundry's names."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class GroupedQueryAttention(nn.Module):
        __module__ = "toy.layers"
        __qualname__ = "GroupedQueryAttention"

        def __init__(self, d):
            super().__init__()
            self.Wqkv = nn.Linear(d, 3 * d)
            self.out_proj = nn.Linear(d, d)
            self.scale = 1.0 / d ** 0.5

        def forward(self, x):
            q, k, v = self.Wqkv(x).chunk(3, dim=-1)
            a = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) * self.scale, dim=-1)
            return self.out_proj(torch.matmul(a, v))

    class MultiheadAttention(GroupedQueryAttention):
        __module__ = "toy.layers"
        __qualname__ = "MultiheadAttention"

    class MPTMLP(nn.Module):
        __module__ = "toy.layers"
        __qualname__ = "MPTMLP"

        def __init__(self, d):
            super().__init__()
            self.up_proj = nn.Linear(d, 2 * d)
            self.act = nn.GELU()
            self.down_proj = nn.Linear(2 * d, d)

        def forward(self, x):
            return self.down_proj(self.act(self.up_proj(x)))

    class LPLayerNorm(nn.LayerNorm):
        __module__ = "toy.layers"
        __qualname__ = "LPLayerNorm"

    class MPTBlock(nn.Module):
        __module__ = "toy.layers"
        __qualname__ = "MPTBlock"

        def __init__(self, d):
            super().__init__()
            self.norm_1 = LPLayerNorm(d)
            self.attn = MultiheadAttention(d)
            self.norm_2 = LPLayerNorm(d)
            self.ffn = MPTMLP(d)

        def forward(self, x):
            x = x + self.attn(self.norm_1(x))
            return x + self.ffn(self.norm_2(x))

    class Transformer(nn.Module):
        __module__ = "toy.model"
        __qualname__ = "Transformer"

        def __init__(self, vocab, d, layers):
            super().__init__()
            self.wte = nn.Embedding(vocab, d)
            self.blocks = nn.ModuleList([MPTBlock(d) for _ in range(layers)])
            self.norm_f = LPLayerNorm(d)
            self.register_buffer("pos_bias", torch.zeros(d))

        def forward(self, ids):
            x = self.wte(ids) + self.pos_bias
            for block in self.blocks:
                x = block(x)
            return self.norm_f(x)

    class ToyLM(nn.Module):
        __module__ = "toy.model"
        __qualname__ = "ToyLM"

        def __init__(self, vocab=16, d=8, layers=2):
            super().__init__()
            self.transformer = Transformer(vocab, d, layers)

        def forward(self, input_ids, labels):
            h = self.transformer(input_ids)
            logits = F.linear(h, self.transformer.wte.weight)
            return F.cross_entropy(logits.flatten(0, 1), labels.flatten())

    torch.manual_seed(0)
    model = ToyLM()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape) * 0.1)
    model.train()
    classes = {GroupedQueryAttention, MultiheadAttention, MPTMLP, LPLayerNorm, MPTBlock}
    return model, classes


def export_one(annotations, out, no_weights):
    """Runs in a child process: torch 1.13 keeps state between exports."""
    import torch
    sys.path.insert(0, ROOT)
    from models.foundry_export import export_with_annotations
    model, classes = toy_model()
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 16, (2, 4), generator=gen)
    info = export_with_annotations(
        model, (ids, ids.clone()), out, annotations=annotations,
        input_names=["input_ids", "labels"], output_names=["loss"],
        dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "labels": {0: "batch", 1: "seq"}},
        function_classes=classes, export_params=not no_weights, check_values=False)
    if info["fallback"]:
        raise SystemExit(f"{out}: {info['fallback']}")


def export_toy():
    runs = [("toy.scopes.onnx", "scopes", False), ("toy.functions.onnx", "functions", False),
            ("toy.metadata.onnx", "metadata", False), ("toy.noweights.onnx", "scopes", True)]
    for name, annotations, no_weights in runs:
        args = [sys.executable, os.path.abspath(__file__), "--export", annotations,
                os.path.join(OUT, name)] + (["--no-weights"] if no_weights else [])
        subprocess.run(args, check=True)


def stock_functions_model(which):
    """Small modules exported by stock torch.onnx.export(export_modules_as_functions=...)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class LPLayerNorm(nn.LayerNorm):
        # llm-foundry's no_bias: torch 1.13's LayerNorm has no bias=False.
        def __init__(self, d):
            super().__init__(d)
            self.bias = None

        def forward(self, x):
            return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    class Block(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.norm = LPLayerNorm(d)
            self.fc = nn.Linear(d, d)

        def forward(self, x):
            return self.fc(self.norm(x))

    class NoBias(nn.Module):
        def __init__(self, d=4):
            super().__init__()
            self.b = Block(d)
            self.norm_f = LPLayerNorm(d)

        def forward(self, x):
            return self.norm_f(self.b(x)).sum()

    class Intermediate(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.dense = nn.Linear(d, 2 * d)

        def forward(self, x):
            return F.gelu(self.dense(x))

    class Output(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.dense = nn.Linear(2 * d, d)
            self.LayerNorm = nn.LayerNorm(d)

        def forward(self, h, x):
            return self.LayerNorm(self.dense(h) + x)

    class Layer(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.intermediate = Intermediate(d)
            self.output = Output(d)

        def forward(self, x):
            return self.output(self.intermediate(x), x)

    class Encoder(nn.Module):
        def __init__(self, d=4):
            super().__init__()
            self.layer = nn.ModuleList([Layer(d), Layer(d)])

        def forward(self, x):
            for layer in self.layer:
                x = layer(x)
            return x.sum()

    for cls in (LPLayerNorm, Block, NoBias, Intermediate, Output, Layer, Encoder):
        cls.__module__, cls.__qualname__ = "stock", cls.__name__  # the functions' domain, name
    torch.manual_seed(0)
    if which == "ln_nobias":
        return NoBias(), {Block, LPLayerNorm}
    return Encoder(), {Layer, Intermediate, Output}


def export_stock(which, out):
    """Runs in a child process: torch 1.13 keeps state between exports."""
    import torch
    model, classes = stock_functions_model(which)
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(1))
    torch.onnx.export(model, (x,), out, input_names=["x"], output_names=["loss"],
                      export_modules_as_functions=classes, opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)


def export_stocks():
    for which in ("ln_nobias", "nested_child"):
        args = [sys.executable, os.path.abspath(__file__), "--export-stock", which,
                os.path.join(OUT, which + ".functions.onnx")]
        subprocess.run(args, check=True)


def save(model, name, check=True):
    if check:
        onnx.checker.check_model(model)
    path = os.path.join(OUT, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(model.SerializeToString())


def opset18():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2])
    axes = numpy_helper.from_array(np.array([1], dtype=np.int64), "axes")
    nodes = [
        helper.make_node("ReduceMean", ["x", "axes"], ["m"], name="mean", keepdims=1),
        helper.make_node("Sub", ["x", "m"], ["c"], name="center"),
        helper.make_node("Split", ["c"], ["a", "b"], name="split", axis=1, num_outputs=2),
        helper.make_node("Add", ["a", "b"], ["y"], name="add"),
    ]
    graph = helper.make_graph(nodes, "opset18", [x], [y], [axes])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    save(model, "opset18.onnx", check=False)  # ONNX 1.12's checker stops at opset 17


def _varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | 0x80 if v else b)
        if not v:
            return bytes(out)


def metadata_entry(key, value):
    """NodeProto field 9 (metadata_props) holding a StringStringEntryProto."""
    k, v = key.encode(), value.encode()
    body = b"\x0a" + _varint(len(k)) + k + b"\x12" + _varint(len(v)) + v
    return b"\x4a" + _varint(len(body)) + body


def quoted_ir10():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    w = numpy_helper.from_array(np.array([1.0, 2.0], dtype=np.float32), "it's.w")
    n0 = helper.make_node("Mul", ["x", "it's.w"], ["t"], name="node_mul")
    n1 = helper.make_node("Relu", ["t"], ["y"], name="node_relu")
    # Module "it's" (a quote inside the path) of class a"b; the second node also goes through a
    # repeated call "it's@1" of the same module.
    scopes0 = repr(["", "it's", "mul"])
    classes0 = repr(["toy.Root", 'toy.Quote"Class', "aten.mul.Tensor"])
    scopes1 = repr(["", "it's@1", "relu"])
    classes1 = repr(["toy.Root", 'toy.Quote"Class', "aten.relu.default"])
    n0.MergeFromString(metadata_entry("pkg.torch.onnx.name_scopes", scopes0) +
                       metadata_entry("pkg.torch.onnx.class_hierarchy", classes0))
    n1.MergeFromString(metadata_entry("pkg.torch.onnx.name_scopes", scopes1) +
                       metadata_entry("pkg.torch.onnx.class_hierarchy", classes1))
    graph = helper.make_graph([n0, n1], "quoted", [x], [y], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    save(model, "quoted_ir10.onnx", check=False)


def func_refs():
    """Root calls Block (domain toy.layers) twice; Block calls Act (no parameter) and Scaler."""
    dom = "toy.layers"
    # Act(x) = LeakyRelu(x, alpha=@alpha): an attribute reference.
    act = helper.make_function(
        dom, "Act", ["x"], ["y"],
        [_ref_node()],
        [helper.make_opsetid("", 17)], attributes=["alpha"])
    act_variant = onnx.FunctionProto()
    act_variant.CopyFrom(act)
    act_variant.name = "Act.1"
    scale = helper.make_function(
        dom, "Scaler", ["x", "blocks.0.scale.weight"], ["y"],
        [helper.make_node("Mul", ["x", "blocks.0.scale.weight"], ["y"], name="Mul_0")],
        [helper.make_opsetid("", 17)])
    block_nodes = [
        helper.make_node("Scaler", ["x", "blocks.0.scale.weight"], ["s"], name="Scale_0", domain=dom),
        helper.make_node("Act", ["s"], ["a"], name="Act_1", domain=dom,
                         alpha=0.5),
        helper.make_node("Act.1", ["a"], ["b"], name="Act.1_2", domain=dom),
        helper.make_node("Add", ["b", "x"], ["y"], name="Add_3"),
    ]
    block = helper.make_function(dom, "Block", ["x", "blocks.0.scale.weight"], ["y"], block_nodes,
                                 [helper.make_opsetid("", 17), helper.make_opsetid(dom, 1)])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])
    w0 = numpy_helper.from_array(np.array([1.0, 2.0, 3.0], dtype=np.float32), "blocks.0.scale.weight")
    w1 = numpy_helper.from_array(np.array([4.0, 5.0, 6.0], dtype=np.float32), "blocks.1.scale.weight")
    nodes = [
        helper.make_node("Block", ["x", "blocks.0.scale.weight"], ["h"], name="Block_0", domain=dom),
        helper.make_node("Block", ["h", "blocks.1.scale.weight"], ["y"], name="Block_1", domain=dom),
    ]
    graph = helper.make_graph(nodes, "func_refs", [x], [y], [w0, w1])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(dom, 1)],
                              functions=[block, scale, act, act_variant])
    model.ir_version = 8
    classes = {
        "": ["toy.Root"],
        "blocks": ["torch.nn.modules.container.ModuleList"],
        "blocks.0": ["toy.layers.Block"], "blocks.0.scale": ["toy.layers.Scaler"],
        "blocks.0.act_in": ["toy.layers.Act"], "blocks.0.act_out": ["toy.layers.Act"],
        "blocks.1": ["toy.layers.Block"], "blocks.1.scale": ["toy.layers.Scaler"],
        "blocks.1.act_in": ["toy.layers.Act"], "blocks.1.act_out": ["toy.layers.Act"],
    }
    helper.set_model_props(model, {"foundry.module_classes": json.dumps(classes),
                                   "foundry.parameters": json.dumps(["blocks.0.scale.weight",
                                                                     "blocks.1.scale.weight"])})
    save(model, "func_refs.onnx")
    del model.metadata_props[:]
    save(model, "func_refs.notable.onnx")


def _ref_node():
    node = helper.make_node("LeakyRelu", ["x"], ["y"], name="LeakyRelu_0")
    attr = onnx.AttributeProto()
    attr.name = "alpha"
    attr.ref_attr_name = "alpha"
    attr.type = onnx.AttributeProto.FLOAT
    node.attribute.append(attr)
    return node


def matmul_model(w_proto, name):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], name,
                              [x], [y], [w_proto])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def external():
    w = np.arange(6, dtype=np.float32).reshape(2, 3) * 0.5
    os.makedirs(os.path.join(OUT, "external"), exist_ok=True)
    with open(os.path.join(OUT, "external", "weights.bin"), "wb") as f:
        f.write(b"\xff" * 16 + w.tobytes())
    t = TensorProto()
    t.name, t.data_type = "w", TensorProto.FLOAT
    t.dims.extend([2, 3])
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "weights.bin"), ("offset", "16"), ("length", "24")):
        e = t.external_data.add()
        e.key, e.value = k, v
    save(matmul_model(t, "external"), "external/model.onnx", check=False)
    t2 = TensorProto()
    t2.CopyFrom(t)
    t2.external_data[0].value = "missing.bin"
    save(matmul_model(t2, "external_missing"), "external_missing.onnx", check=False)


def bad_raw_size():
    t = numpy_helper.from_array(np.zeros((2, 3), dtype=np.float32), "w")
    t.raw_data = t.raw_data[:20]
    save(matmul_model(t, "bad_raw_size"), "bad_raw_size.onnx", check=False)


def opset11():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "old", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 7
    save(model, "opset11.onnx")
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 6
    save(model, "ir6.onnx")


def malformed():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    model = helper.make_model(helper.make_graph([], "empty", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    save(model, "no_nodes.onnx", check=False)
    # IR 10, so ONNX 1.12's checker is not run and the importer's own checks must catch it.
    graph = helper.make_graph([helper.make_node("Relu", ["nope"], ["y"], name="r")], "undef", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    save(model, "undefined_input.onnx", check=False)


def if_subgraph():
    c = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    one = helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])
    two = helper.make_tensor("two", TensorProto.FLOAT, [1], [2.0])
    then_g = helper.make_graph([helper.make_node("Constant", [], ["t"], value=one)], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1])])
    else_g = helper.make_graph([helper.make_node("Constant", [], ["e"], value=two)], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, [1])])
    node = helper.make_node("If", ["c"], ["y"], name="branch", then_branch=then_g,
                            else_branch=else_g)
    graph = helper.make_graph([node], "if", [c], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    save(model, "if_subgraph.onnx")


def tensor_files():
    t = TensorProto()
    t.name, t.data_type = "typed_f32", TensorProto.FLOAT
    t.dims.extend([2, 2])
    t.float_data.extend([1.5, -2.0, 3.25, 0.0])
    with open(os.path.join(OUT, "tensor_float_data.pb"), "wb") as f:
        f.write(t.SerializeToString())
    b = TensorProto()
    b.name, b.data_type = "typed_bool", TensorProto.BOOL
    b.dims.extend([3])
    b.int32_data.extend([1, 0, 1])
    with open(os.path.join(OUT, "tensor_int32_bool.pb"), "wb") as f:
        f.write(b.SerializeToString())
    r = numpy_helper.from_array(np.array([[-1, 2**40, 7]], dtype=np.int64), "raw_i64")
    with open(os.path.join(OUT, "tensor_raw_i64.pb"), "wb") as f:
        f.write(r.SerializeToString())


def main():
    os.makedirs(OUT, exist_ok=True)
    export_toy()
    export_stocks()
    opset18()
    quoted_ir10()
    func_refs()
    external()
    bad_raw_size()
    opset11()
    malformed()
    if_subgraph()
    tensor_files()
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(OUT) for f in fs)
    print(f"wrote {OUT} ({total} bytes)")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--export":
        export_one(sys.argv[2], sys.argv[3], "--no-weights" in sys.argv)
    elif len(sys.argv) > 1 and sys.argv[1] == "--export-stock":
        export_stock(sys.argv[2], sys.argv[3])
    else:
        main()
