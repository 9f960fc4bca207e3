#!/usr/bin/python3
"""Lists the ONNX ops an export contains and how each is used (the data behind models/OPS.md).

    /usr/bin/python3 models/op_inventory.py models/fixtures/mpt_tiny/model.onnx [more.onnx ...]
    /usr/bin/python3 models/op_inventory.py --markdown FILES...   # tables as in OPS.md

Per file: node count (total, per layer, outside the layers), the distinct op types with their
domain, and every distinct usage of each op: input kinds (`p` parameter, `b` buffer, `c` Constant
output, `x` computed value, `-` omitted optional input), input element types and ranks (from ONNX
shape inference), constant input values, and attributes.
"""

import argparse
import collections
import json
import os
import re
import sys
from typing import Dict, List

import numpy as np
import onnx
from onnx import helper, numpy_helper

_TYPE = {v: k.lower() for k, v in onnx.TensorProto.DataType.items()}
_LAYER = re.compile(r"/(?:blocks|layers|layer|h)\.(\d+)/")


def _short(value) -> str:
    if isinstance(value, np.ndarray):
        if value.size > 8:
            return f"{value.dtype}{list(value.shape)}"
        v = value.tolist()
        if value.dtype == np.float32 and value.size == 1:
            f = float(value.reshape(-1)[0])
            return repr(f) if abs(f) < 1e30 else f"{f:.4g}"
        return json.dumps(v)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, onnx.TensorProto):
        return _short(numpy_helper.to_array(value))
    if isinstance(value, float):
        return repr(value) if abs(value) < 1e30 else f"{value:.4g}"
    return str(value)


def inventory(path: str) -> Dict:
    model = onnx.load(path)
    params = set()
    for p in model.metadata_props:
        if p.key == "foundry.parameters":
            params = set(json.loads(p.value))
    inits = {i.name for i in model.graph.initializer}
    if model.ir_version <= 8 and not model.functions:
        try:
            typed = onnx.shape_inference.infer_shapes(model)
        except Exception:  # noqa: BLE001 - types are a nicety
            typed = model
    else:
        typed = model
    types = {}
    for vi in list(typed.graph.value_info) + list(typed.graph.input) + list(typed.graph.output):
        t = vi.type.tensor_type
        types[vi.name] = (_TYPE.get(t.elem_type, "?"),
                          len(t.shape.dim) if t.HasField("shape") else None)
    for init in model.graph.initializer:
        types[init.name] = (_TYPE.get(init.data_type, "?"), len(init.dims))
    constants = {}
    for node in model.graph.node:
        if node.op_type == "Constant":
            constants[node.output[0]] = numpy_helper.to_array(
                helper.get_attribute_value(node.attribute[0]))

    def kind(name):
        if not name:
            return "-"
        if name in params:
            return "p"
        if name in inits:
            return "b"
        if name in constants:
            return "c"
        return "x"

    # Unscoped nodes (torch leaves some Constants without a scope) count for the layer of their
    # first consumer.
    def layer_of_name(name):
        m = _LAYER.search(name + "/")
        return int(m.group(1)) if m else None

    consumer_layer = {}
    for node in model.graph.node:
        for name in node.input:
            consumer_layer.setdefault(name, layer_of_name(node.name))
    per_op = collections.defaultdict(collections.Counter)
    per_layer = collections.Counter()
    for node in model.graph.node:
        layer = layer_of_name(node.name)
        if not node.name.startswith("/") and node.output:
            layer = consumer_layer.get(node.output[0])
        per_layer[layer] += 1
        if node.op_type == "Constant":
            continue
        parts = []
        for name in node.input:
            k = kind(name)
            t = types.get(name)
            desc = k
            if t:
                desc += f":{t[0]}" + (f"/r{t[1]}" if t[1] is not None else "")
            if k == "c":
                desc += "=" + _short(constants[name])
            parts.append(desc)
        attrs = [f"{a.name}={_short(helper.get_attribute_value(a))}" for a in node.attribute]
        usage = f"({', '.join(parts)})" + (f" {{{', '.join(attrs)}}}" if attrs else "")
        per_op[(node.domain or "ai.onnx", node.op_type)][usage] += 1
    n_layers = len([k for k in per_layer if k is not None])
    ordered = sorted(per_op.items(), key=lambda x: x[0][1])
    return {
        "path": path,
        "nodes": len(model.graph.node),
        "functions": len(model.functions),
        "per_layer": [per_layer[i] for i in range(n_layers)],
        "outside_layers": per_layer[None],
        "ops": {f"{d}::{o}": dict(u) for (d, o), u in ordered},
        "op_counts": {f"{d}::{o}": sum(u.values()) for (d, o), u in ordered},
        "bytes": os.path.getsize(path),
    }


def markdown(invs: List[Dict]) -> str:
    out = []
    for inv in invs:
        out.append(f"### `{inv['path']}`\n")
        per_layer = inv["per_layer"]
        layers = (f"{per_layer[0]} per layer x {len(per_layer)}" if len(set(per_layer)) == 1
                  else f"per layer {per_layer}")
        out.append(f"{inv['bytes']} bytes; {inv['nodes']} nodes ({layers}, "
                   f"{inv['outside_layers']} outside the layers; Constant nodes included, "
                   f"unscoped ones counted with their first consumer)\n")
        ops = ", ".join(f"{k.split('::')[1]} {v}" for k, v in inv["op_counts"].items())
        out.append(f"Ops (domain ai.onnx, opset 17; Constant not listed): {ops}\n")
    return "\n".join(out)


def usage_markdown(invs: List[Dict]) -> str:
    merged = collections.defaultdict(collections.Counter)
    for inv in invs:
        for op, usages in inv["ops"].items():
            merged[op].update(usages)
    out = []
    for op in sorted(merged, key=lambda k: k.split("::")[1]):
        out.append(f"- **{op.split('::')[1]}** ({op.split('::')[0]})")
        for usage, n in sorted(merged[op].items(), key=lambda x: -x[1]):
            out.append(f"  - `{usage}` x{n}")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--usages", action="store_true", help="merged usage list (markdown)")
    args = ap.parse_args(argv)
    invs = [inventory(f) for f in args.files]
    if args.usages:
        print(usage_markdown(invs))
    elif args.markdown:
        print(markdown(invs))
    else:
        json.dump(invs, sys.stdout, indent=1)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
