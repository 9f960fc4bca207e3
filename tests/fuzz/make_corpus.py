#!/usr/bin/python3
"""Writes the seed corpus of the import + compile fuzzer (tests/fuzz/corpus/, each file <= 8 KB).

    /usr/bin/python3 tests/fuzz/make_corpus.py

Needs onnx 1.12 (Debian's). The seeds: the small models of tests/data/onnx, and hand-made graphs
that together touch every annotation format and most op families foundry implements (shape
arithmetic, masks, normalizations, the decompositions canonicalize fuses, a loss, local functions).
The output is deterministic and committed; rerun only to change it.
"""

import json
import os
import shutil

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(HERE, "corpus")
MAX = 8192
rng = np.random.default_rng(7)

F, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def w(name, *shape):
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.1, name)


def i64(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def f32(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.float32), name)


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def model(nodes, inputs, outputs, inits, params=None, opset=17, functions=(), meta=None, ir=8):
    g = helper.make_graph(nodes, "g", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)] +
                          [helper.make_opsetid(f.domain, 1) for f in functions[:1]],
                          functions=list(functions))
    m.ir_version = ir
    props = dict(meta or {})
    if params is not None:
        props["foundry.parameters"] = json.dumps(params)
    for k, v in props.items():
        e = m.metadata_props.add()
        e.key, e.value = k, v
    return m


def mlp():
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], "/fc1/MatMul"),
             helper.make_node("Add", ["h", "b1"], ["hb"], "/fc1/Add"),
             helper.make_node("Relu", ["hb"], ["r"], "/act/Relu"),
             helper.make_node("MatMul", ["r", "w2"], ["o"], "/fc2/MatMul"),
             helper.make_node("ReduceMean", ["o"], ["loss"], "/loss", keepdims=0)]
    return model(nodes, [vi("x", F, ["batch", 4])], [vi("loss", F, [])],
                 [w("w1", 4, 6), w("b1", 6), w("w2", 6, 3)], ["w1", "b1", "w2"],
                 meta={"foundry.module_classes": json.dumps(
                     {"": ["toy.Mlp"], "fc1": ["torch.nn.Linear"], "fc2": ["torch.nn.Linear"],
                      "act": ["torch.nn.ReLU"]})})


def lm():
    """Embedding -> LayerNorm -> logits; foundry appends the cross-entropy loss over labels."""
    nodes = [helper.make_node("Gather", ["emb", "input_ids"], ["e"], "/wte/Gather"),
             helper.make_node("LayerNormalization", ["e", "g", "b"], ["n"], "/ln/LN", axis=-1),
             helper.make_node("Transpose", ["emb"], ["embt"], "/head/T", perm=[1, 0]),
             helper.make_node("MatMul", ["n", "embt"], ["logits"], "/head/MatMul")]
    return model(nodes, [vi("input_ids", I64, ["batch", "seq"])],
                 [vi("logits", F, ["batch", "seq", 16])],
                 [w("emb", 16, 8), f32("g", np.ones(8)), f32("b", np.zeros(8))], ["emb", "g", "b"])


def shape_arith():
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "i0"], ["b"], axis=0),
             helper.make_node("Gather", ["s", "i1"], ["t"], axis=0),
             helper.make_node("Mul", ["b", "t"], ["bt"]),
             helper.make_node("Unsqueeze", ["bt", "ax"], ["bt1"]),
             helper.make_node("Concat", ["bt1", "last"], ["ns"], axis=0),
             helper.make_node("Reshape", ["x", "ns"], ["flat"]),
             helper.make_node("MatMul", ["flat", "w"], ["y"]),
             helper.make_node("Flatten", ["y"], ["fy"], axis=1),
             helper.make_node("ReduceSum", ["fy"], ["loss"], keepdims=0)]
    return model(nodes, [vi("x", F, ["batch", "seq", 4])], [vi("loss", F, [])],
                 [w("w", 4, 4), i64("i0", 0), i64("i1", 1), i64("ax", [0]), i64("last", [4])],
                 ["w"])


def causal_mask():
    nodes = [helper.make_node("Shape", ["x"], ["s"], start=1, end=2),
             helper.make_node("Squeeze", ["s"], ["t"]),
             helper.make_node("Range", ["zero", "t", "one"], ["r"]),
             helper.make_node("Unsqueeze", ["r", "ax0"], ["ru"]),
             helper.make_node("Unsqueeze", ["r", "axm1"], ["rc"]),
             helper.make_node("Less", ["ru", "rc"], ["mask"]),
             helper.make_node("Trilu", ["ones"], ["tri"], upper=0),
             helper.make_node("MatMul", ["x", "wq"], ["q"]),
             helper.make_node("Transpose", ["q"], ["qt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "qt"], ["sc"]),
             helper.make_node("Where", ["mask", "ninf", "sc"], ["msk"]),
             helper.make_node("Softmax", ["msk"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "q"], ["o"]),
             helper.make_node("ReduceSum", ["o"], ["loss"], keepdims=0)]
    return model(nodes, [vi("x", F, ["batch", "seq", 4])], [vi("loss", F, [])],
                 [w("wq", 4, 4), i64("zero", 0), i64("one", 1), i64("ax0", [0]),
                  i64("axm1", [-1]), f32("ninf", -1e9), f32("ones", np.ones((3, 3)))], ["wq"])


def generators():
    nodes = [helper.make_node("ConstantOfShape", ["shp"], ["c"],
                              value=helper.make_tensor("v", F, [1], [0.5])),
             helper.make_node("Tile", ["c", "reps"], ["tc"]),
             helper.make_node("Expand", ["bias", "eshape"], ["eb"]),
             helper.make_node("Pad", ["tc", "pads"], ["pc"], mode="constant"),
             helper.make_node("Slice", ["pc", "st", "en", "axs", "sp"], ["sl"]),
             helper.make_node("Split", ["sl", "spl"], ["a", "b"], axis=1),
             helper.make_node("Concat", ["b", "a"], ["cat"], axis=1),
             helper.make_node("Add", ["cat", "eb"], ["s1"]),
             helper.make_node("Mul", ["s1", "x"], ["s2"]),
             helper.make_node("MatMul", ["s2", "w"], ["s3"]),
             helper.make_node("ReduceMean", ["s3"], ["loss"], keepdims=0)]
    return model(nodes, [vi("x", F, [2, 4])], [vi("loss", F, [])],
                 [w("w", 4, 2), w("bias", 4), i64("shp", [1, 2]), i64("reps", [2, 1]),
                  i64("eshape", [2, 4]), i64("pads", [0, 1, 0, 1]), i64("st", [0]),
                  i64("en", [4]), i64("axs", [1]), i64("sp", [1]), i64("spl", [2, 2])],
                 ["w", "bias"])


def gelu_rmsnorm_dropout():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Div", ["h", "sqrt2"], ["d"]),
             helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "onef"], ["e1"]),
             helper.make_node("Mul", ["h", "e1"], ["he"]),
             helper.make_node("Mul", ["he", "half"], ["g"]),
             helper.make_node("Pow", ["g", "two"], ["sq"]),
             helper.make_node("ReduceMean", ["sq"], ["ms"], axes=[-1], keepdims=1),
             helper.make_node("Add", ["ms", "eps"], ["mse"]),
             helper.make_node("Sqrt", ["mse"], ["rms"]),
             helper.make_node("Div", ["g", "rms"], ["nrm"]),
             helper.make_node("Mul", ["nrm", "scale"], ["y"]),
             helper.make_node("Dropout", ["y", "ratio", "train"], ["dy", "mask"]),
             helper.make_node("Tanh", ["dy"], ["t"]),
             helper.make_node("Sigmoid", ["t"], ["sg"]),
             helper.make_node("ReduceSum", ["sg"], ["loss"], keepdims=0)]
    m = model(nodes, [vi("x", F, ["batch", 4])], [vi("loss", F, [])],
              [w("w", 4, 4), f32("sqrt2", 1.4142135), f32("onef", 1.0), f32("half", 0.5),
               f32("two", 2.0), f32("eps", 1e-5), f32("scale", np.ones(4)), f32("ratio", 0.1),
               numpy_helper.from_array(np.array(True), "train")], ["w", "scale"])
    m.opset_import[0].version = 13
    return m


def misc_ops():
    nodes = [helper.make_node("Cast", ["ids"], ["idf"], to=F),
             helper.make_node("OneHot", ["ids", "depth", "vals"], ["oh"], axis=-1),
             helper.make_node("GatherElements", ["x", "gidx"], ["ge"], axis=1),
             helper.make_node("ScatterND", ["x", "sidx", "upd"], ["sc"]),
             helper.make_node("Clip", ["sc", "lo", "hi"], ["cl"]),
             helper.make_node("Gemm", ["cl", "w", "c"], ["gm"], transB=1),
             helper.make_node("LogSoftmax", ["gm"], ["ls"], axis=1),
             helper.make_node("Equal", ["ids", "ids"], ["eq"]),
             helper.make_node("Not", ["eq"], ["ne"]),
             helper.make_node("Where", ["ne", "ls", "ls"], ["wh"]),
             helper.make_node("Neg", ["wh"], ["ng"]),
             helper.make_node("Exp", ["ng"], ["ex"]),
             helper.make_node("Log", ["ex"], ["lg"]),
             helper.make_node("Abs", ["lg"], ["ab"]),
             helper.make_node("ReduceMax", ["ab"], ["mx"], keepdims=0),
             helper.make_node("ReduceSum", ["oh"], ["ohs"], keepdims=0),
             helper.make_node("Add", ["mx", "ohs"], ["loss"])]
    return model(nodes, [vi("ids", I64, [2, 3])], [vi("loss", F, [])],
                 [w("x", 2, 3), w("w", 3, 3), w("c", 3), i64("depth", 5), f32("vals", [0, 1]),
                  i64("gidx", [[0, 1, 2], [2, 1, 0]]), i64("sidx", [[1]]), w("upd", 1, 3),
                  f32("lo", -1), f32("hi", 1)], ["w", "c"])


def functions():
    dom = "toy.layers"
    body = [helper.make_node("MatMul", ["x", "w"], ["h"]),
            helper.make_node("Relu", ["h"], ["y"])]
    fn = helper.make_function(dom, "Block", ["x", "w"], ["y"], body,
                              [helper.make_opsetid("", 17)])
    nodes = [helper.make_node("Block", ["x", "blocks.0.fc.weight"], ["h0"], "Block_0", domain=dom),
             helper.make_node("Block", ["h0", "blocks.1.fc.weight"], ["h1"], "Block_1", domain=dom),
             helper.make_node("ReduceSum", ["h1"], ["loss"], keepdims=0)]
    return model(nodes, [vi("x", F, ["batch", 4])], [vi("loss", F, [])],
                 [w("blocks.0.fc.weight", 4, 4), w("blocks.1.fc.weight", 4, 4)],
                 ["blocks.0.fc.weight", "blocks.1.fc.weight"], functions=(fn,),
                 meta={"foundry.module_classes": json.dumps(
                     {"": ["toy.Root"], "blocks.0": ["toy.layers.Block"],
                      "blocks.1": ["toy.layers.Block"]})})


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    data = os.path.join(ROOT, "tests", "data", "onnx")
    for name in sorted(os.listdir(data)):
        p = os.path.join(data, name)
        if name.endswith(".onnx") and os.path.getsize(p) <= MAX:
            shutil.copy(p, os.path.join(OUT, name))
    for fn in [mlp, lm, shape_arith, causal_mask, generators, gelu_rmsnorm_dropout, misc_ops,
               functions]:
        m = fn()
        onnx.checker.check_model(m)
        b = m.SerializeToString()
        assert len(b) <= MAX, (fn.__name__, len(b))
        with open(os.path.join(OUT, fn.__name__ + ".onnx"), "wb") as f:
            f.write(b)
    for name in sorted(os.listdir(OUT)):
        print(f"{os.path.getsize(os.path.join(OUT, name)):6d} {name}")


if __name__ == "__main__":
    main()
