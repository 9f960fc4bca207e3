"""A small NumPy interpreter for the forward graphs our exports contain (no onnxruntime here).

It runs exactly the op set listed in models/OPS.md (opset 17 semantics), inlines model-local
functions (format 1), and ignores node names and metadata (formats 2 and 3), so the three files of
a fixture can be checked to compute the same loss as PyTorch, at the traced shape and at others
(which proves `batch` and `seq` are really symbolic). Dropout runs only with ratio 0 or
training_mode false (a random mask cannot match PyTorch's), or as identity when asked.
"""

import math
from typing import Dict, List

import numpy as np
import onnx
from onnx import helper, numpy_helper

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _attrs(node) -> Dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _int_div(a, b):
    q = np.abs(a) // np.abs(b)
    return (np.sign(a) * np.sign(b) * q).astype(a.dtype)


def _reshape(x, shape, allowzero=0):
    shape = [int(d) for d in shape]
    if not allowzero:
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return x.reshape(shape)


def _slice(x, starts, ends, axes=None, steps=None):
    axes = list(range(len(starts))) if axes is None else [int(a) for a in axes]
    steps = [1] * len(starts) if steps is None else [int(s) for s in steps]
    index = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        dim = x.shape[a]
        s, e = int(s), int(e)
        # ONNX clamps; Python slicing clamps the same way for step 1 and for INT64 extremes.
        s = max(min(s, dim), -dim - 1)
        e = max(min(e, dim), -dim - 1)
        index[a] = slice(s, e, st)
    return x[tuple(index)]


def _gemm(a, b, c=None, alpha=1.0, beta=1.0, transA=0, transB=0):
    y = np.float32(alpha) * np.matmul(a.T if transA else a, b.T if transB else b)
    if c is not None:
        y = y + np.float32(beta) * c
    return y.astype(a.dtype)


def _split(x, split, axis, outputs):
    if split is None:
        return np.split(x, len(outputs), axis=axis)
    return np.split(x, np.cumsum([int(s) for s in split])[:-1], axis=axis)


def _softmax(x, axis):
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def _layer_norm(x, scale, bias=None, axis=-1, epsilon=1e-5):
    axis = axis % x.ndim
    axes = tuple(range(axis, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    inv_std = 1.0 / np.sqrt(var + np.float32(epsilon))
    y = (x - mean) * inv_std * scale
    if bias is not None:
        y = y + bias
    return y.astype(x.dtype), mean.astype(x.dtype), inv_std.astype(x.dtype)


def _sce_loss(scores, labels, weights=None, ignore_index=None, reduction=b"mean"):
    if weights is not None:
        raise NotImplementedError("SoftmaxCrossEntropyLoss with weights")
    if isinstance(reduction, bytes):
        reduction = reduction.decode()
    # scores (N, C) [or (N, C, d...)], labels (N) [(N, d...)]
    x = scores.astype(np.float64)
    x = x - x.max(axis=1, keepdims=True)
    log_prob = x - np.log(np.exp(x).sum(axis=1, keepdims=True))
    mask = np.ones(labels.shape, dtype=bool) if ignore_index is None else labels != ignore_index
    safe = np.where(mask, labels, 0)
    picked = np.take_along_axis(log_prob, np.expand_dims(safe, 1), axis=1).squeeze(1)
    losses = np.where(mask, -picked, 0.0)
    if reduction == "none":
        loss = losses
    elif reduction == "sum":
        loss = losses.sum()
    else:
        loss = losses.sum() / mask.sum()
    return np.asarray(loss, dtype=scores.dtype), log_prob.astype(scores.dtype)


def _dropout(x, ratio=None, training_mode=None, as_identity=False):
    r = 0.0 if ratio is None else float(ratio)
    training = False if training_mode is None else bool(training_mode)
    if training and r > 0 and not as_identity:
        raise NotImplementedError("Dropout with ratio > 0 in training mode (random mask)")
    return x, np.ones(x.shape, dtype=bool)


def _run_op(node, ins: List, attrs: Dict, dropout_as_identity: bool = False):
    op = node.op_type
    a = attrs
    if op == "Constant":
        return [numpy_helper.to_array(a["value"])]
    if op == "Shape":
        return [np.array(ins[0].shape, dtype=np.int64)]
    if op == "Gather":
        return [np.take(ins[0], ins[1], axis=a.get("axis", 0))]
    if op == "Unsqueeze":
        y = ins[0]
        axes = sorted(int(v) % (y.ndim + len(ins[1])) for v in ins[1])
        for ax in axes:
            y = np.expand_dims(y, ax)
        return [y]
    if op == "Squeeze":
        return [np.squeeze(ins[0], axis=tuple(int(v) for v in ins[1]))]
    if op == "Concat":
        return [np.concatenate(ins, axis=a["axis"])]
    if op == "Reshape":
        return [_reshape(ins[0], ins[1], a.get("allowzero", 0))]
    if op == "Transpose":
        return [np.transpose(ins[0], a.get("perm"))]
    if op == "MatMul":
        return [np.matmul(ins[0], ins[1])]
    if op == "Gemm":
        return [_gemm(*ins, **a)]
    if op == "Split":
        return _split(ins[0], ins[1] if len(ins) > 1 else None, a.get("axis", 0),
                      node.output)
    if op in ("Add", "Sub", "Mul"):
        f = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}[op]
        return [f(ins[0], ins[1]).astype(np.result_type(ins[0], ins[1]))]
    if op == "Div":
        if np.issubdtype(ins[0].dtype, np.integer):
            return [_int_div(ins[0], ins[1])]
        return [(ins[0] / ins[1]).astype(ins[0].dtype)]
    if op == "Pow":
        return [np.power(ins[0], ins[1]).astype(ins[0].dtype)]
    if op == "Sqrt":
        return [np.sqrt(ins[0])]
    if op == "Erf":
        return [_erf(ins[0]).astype(ins[0].dtype)]
    if op in ("Cos", "Sin", "Neg", "Tanh"):
        return [{"Cos": np.cos, "Sin": np.sin, "Neg": np.negative, "Tanh": np.tanh}[op](ins[0])]
    if op == "Sigmoid":
        return [(1.0 / (1.0 + np.exp(-ins[0]))).astype(ins[0].dtype)]
    if op == "ReduceMean":
        axes = tuple(a["axes"]) if "axes" in a else None
        return [ins[0].mean(axis=axes, keepdims=bool(a.get("keepdims", 1))).astype(ins[0].dtype)]
    if op == "Cast":
        return [ins[0].astype(onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[a["to"]])]
    if op == "Range":
        return [np.arange(ins[0], ins[1], ins[2], dtype=ins[0].dtype)]
    if op == "Greater":
        return [np.greater(ins[0], ins[1])]
    if op == "GreaterOrEqual":
        return [np.greater_equal(ins[0], ins[1])]
    if op == "Or":
        return [np.logical_or(ins[0], ins[1])]
    if op == "Equal":
        return [np.equal(ins[0], ins[1])]
    if op == "Where":
        return [np.where(ins[0], ins[1], ins[2]).astype(np.result_type(ins[1], ins[2]))]
    if op == "Softmax":
        return [_softmax(ins[0], a.get("axis", -1))]
    if op == "Slice":
        return [_slice(ins[0], *[None if v is None else list(v) for v in ins[1:]])]
    if op == "Clip":
        lo = -np.inf if len(ins) < 2 or ins[1] is None else ins[1]
        hi = np.inf if len(ins) < 3 or ins[2] is None else ins[2]
        return [np.clip(ins[0], lo, hi).astype(ins[0].dtype)]
    if op == "ConstantOfShape":
        value = numpy_helper.to_array(a["value"]) if "value" in a else np.zeros(1, np.float32)
        return [np.full([int(d) for d in ins[0]], value.reshape(-1)[0], dtype=value.dtype)]
    if op == "Expand":
        return [ins[0] * np.ones([int(d) for d in ins[1]], dtype=ins[0].dtype)]
    if op == "Dropout":
        return list(_dropout(*ins, as_identity=dropout_as_identity))
    if op == "LayerNormalization":
        return list(_layer_norm(ins[0], ins[1], ins[2] if len(ins) > 2 else None,
                                a.get("axis", -1), a.get("epsilon", 1e-5)))
    if op == "SoftmaxCrossEntropyLoss":
        return list(_sce_loss(*ins, ignore_index=a.get("ignore_index"),
                              reduction=a.get("reduction", b"mean")))
    raise NotImplementedError(f"onnx_eval: op {op} (node {node.name})")


class Evaluator:

    def __init__(self, model: onnx.ModelProto, dropout_as_identity: bool = False):
        """`dropout_as_identity` runs Dropout with ratio > 0 as identity (as in eval mode)."""
        self.model = model
        self.dropout_as_identity = dropout_as_identity
        self.functions = {(f.domain, f.name): f for f in model.functions}

    def _run_nodes(self, nodes, env: Dict[str, np.ndarray]):
        for node in nodes:
            ins = [env[i] if i else None for i in node.input]
            key = (node.domain, node.op_type)
            if key in self.functions:
                f = self.functions[key]
                sub = {formal: v for formal, v in zip(f.input, ins)}
                self._run_nodes(f.node, sub)
                outs = [sub[o] for o in f.output]
            else:
                outs = _run_op(node, ins, _attrs(node), self.dropout_as_identity)
            for name, value in zip(node.output, outs):
                if name:
                    env[name] = value

    def run(self, feeds: Dict[str, np.ndarray], weights: Dict[str, np.ndarray] = None):
        env: Dict[str, np.ndarray] = {}
        for init in self.model.graph.initializer:
            env[init.name] = numpy_helper.to_array(init)
        env.update(weights or {})
        env.update(feeds)
        self._run_nodes(self.model.graph.node, env)
        return {o.name: env[o.name] for o in self.model.graph.output}
