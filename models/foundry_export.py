"""Export any torch.nn.Module to ONNX with the module annotations foundry reads (docs/design.md §2).

    info = export_with_annotations(model, (input_ids, labels), "model.onnx",
                                   annotations="scopes",            # or "functions", "metadata"
                                   input_names=["input_ids", "labels"], output_names=["loss"],
                                   dynamic_axes={"input_ids": {0: "batch", 1: "seq"},
                                                 "labels": {0: "batch", 1: "seq"}})

Every format is a training export (TrainingMode.TRAINING, no constant folding, opset 17), so each
parameter stays one initializer under its torch name. On top of what torch writes:

- "scopes" (format 2, the default): TorchScript's scoped node names plus model `metadata_props`
  `foundry.module_classes` (module path -> [class, base classes...]), `foundry.parameters` (the
  trainable initializers) and `foundry.scopes` (node-name scope -> module path, see below).
  Where an `nn.Embedding` has a `padding_idx`, also `foundry.padding_idx` (see `padding_rows`).
- "functions" (format 1): `export_modules_as_functions=function_classes`, plus the same metadata.
  When torch's function extraction fails, the export falls back to "scopes" and says so in the
  returned info (`info["fallback"]`).
- "metadata" (format 3): the dynamo exporter's shape, synthesised from the scopes export: IR 10,
  nodes renamed `node_<op>[_k]`, intermediate values renamed, and per node the NodeProto field 9
  (`metadata_props`) entries `namespace`, `pkg.torch.onnx.class_hierarchy`,
  `pkg.torch.onnx.name_scopes`; model metadata `pkg.torch.export.ExportedProgram.graph_signature`
  (parameters vs buffers) and no `foundry.*` keys (a dynamo export would not have ours) except
  `foundry.padding_idx`, without which foundry's gradients differ from PyTorch's on that row.

Scope segments in TorchScript names are *not* always the child attribute: each segment is the
called module's "unqualified" name (last non-numeric atom of its path and what follows:
`transformer.blocks.0` -> `blocks.0`), relative to the calling module, which need not be its
parent (`self.transformer.wte(x, True)` called from the root gives `/wte/MatMul`).
`resolve_scope` undoes this against `named_modules()`; `foundry.scopes` stores the result.
"""

import ast
import contextlib
import inspect
import io
import json
import time
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np
import onnx
import torch
import torch.nn as nn
from onnx import numpy_helper

ANNOTATIONS = ("scopes", "functions", "metadata")
OPSET = 17
GRAPH_SIGNATURE_KEY = "pkg.torch.export.ExportedProgram.graph_signature"
PADDING_IDX_KEY = "foundry.padding_idx"
NAME_SCOPES_KEY = "pkg.torch.onnx.name_scopes"
CLASS_HIERARCHY_KEY = "pkg.torch.onnx.class_hierarchy"

# --------------------------------------------------------------------------------------------
# Module tree: classes, parameters, buffers.


def qualified_class_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def class_chain(cls: type) -> List[str]:
    """The class and its nn.Module bases in MRO order, up to (not including) torch.nn.Module."""
    chain = []
    for c in cls.__mro__:
        if c is nn.Module:
            break
        if isinstance(c, type) and issubclass(c, nn.Module):
            chain.append(qualified_class_name(c))
    return chain


def module_classes(module: nn.Module) -> Dict[str, List[str]]:
    return {path: class_chain(type(m)) for path, m in module.named_modules()}


def parameter_names(module: nn.Module) -> List[str]:
    """Trainable parameters, one name per tensor (a tied weight keeps its first name)."""
    return [n for n, p in module.named_parameters() if p.requires_grad]


def buffer_names(module: nn.Module) -> List[str]:
    return [n for n, _ in module.named_buffers()]


def padding_rows(module: nn.Module) -> Dict[str, int]:
    """{parameter name: padding_idx} for every trainable `nn.Embedding` weight with a padding_idx.

    F.embedding gives the padding row no gradient from the lookup, and an ONNX Gather cannot say
    so (torch's exporter only warns). foundry reads this table (`foundry.padding_idx`) and zeroes
    that row of every Gather's gradient contribution to the parameter, so a tied weight still
    gets its other uses' gradient on the row, as in PyTorch.
    """
    names = {}
    for name, p in module.named_parameters():
        if p.requires_grad:
            names.setdefault(id(p), name)
    rows = {}
    for m in module.modules():
        if isinstance(m, nn.Embedding) and m.padding_idx is not None and id(m.weight) in names:
            rows[names[id(m.weight)]] = int(m.padding_idx)  # torch stores it non-negative
    return rows


def write_padding_idx(path: str, module: nn.Module) -> bool:
    """Adds `foundry.padding_idx` to an ONNX file exported from `module` some other way (a stock
    `torch.onnx.export`). Returns whether the module has a padding row at all."""
    rows = padding_rows(module)
    if rows:
        proto = onnx.load(path)
        _set_metadata(proto, {PADDING_IDX_KEY: json.dumps(rows, separators=(",", ":"))})
        with open(path, "wb") as f:
            f.write(proto.SerializeToString())
    return bool(rows)


# --------------------------------------------------------------------------------------------
# TorchScript scope names -> module paths.


def unqualified_name(path: str) -> str:
    """torch.onnx's scope segment for a module path (`a.blocks.0` -> `blocks.0`)."""
    atoms = path.split(".")
    for i in range(len(atoms) - 1, -1, -1):
        if not atoms[i].isnumeric():
            return ".".join(atoms[i:])
    return path


def node_scope(node_name: str) -> str:
    """`/transformer/blocks.0/attn/MatMul_1` -> `/transformer/blocks.0/attn`; unscoped -> ``."""
    if not node_name.startswith("/"):
        return ""
    return node_name.rsplit("/", 1)[0]


class ScopeResolver:
    """Maps a scope string to the chain of module paths it was called through."""

    def __init__(self, module_paths: Iterable[str]):
        self._paths = [p for p in module_paths if p]
        self._cache: Dict[str, List[str]] = {"": [""]}

    def chain(self, scope: str) -> List[str]:
        if scope in self._cache:
            return self._cache[scope]
        parent_scope, seg = scope.rsplit("/", 1)
        parent_chain = self.chain(parent_scope)
        cur = parent_chain[-1]
        prefix = cur + "." if cur else ""
        found = [p for p in self._paths
                 if p.startswith(prefix) and p != cur and unqualified_name(p) == seg]
        if not found:
            raise ValueError(f"scope {scope!r}: no module below {cur or '<root>'!r} "
                             f"is named {seg!r}")
        depth = min(p.count(".") for p in found)
        nearest = [p for p in found if p.count(".") == depth]
        if len(nearest) > 1:
            raise ValueError(f"scope {scope!r} is ambiguous: {nearest}")
        result = parent_chain + [nearest[0]]
        self._cache[scope] = result
        return result

    def resolve(self, scope: str) -> str:
        return self.chain(scope)[-1]


def scope_table(proto: onnx.ModelProto, resolver: ScopeResolver) -> Dict[str, str]:
    table = {}
    for node in proto.graph.node:
        scope = node_scope(node.name)
        if scope and scope not in table:
            table[scope] = resolver.resolve(scope)
    return table


# --------------------------------------------------------------------------------------------
# NodeProto field 9 (metadata_props), which ONNX 1.12's Python proto does not know.


def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def encode_metadata_entry(key: str, value: str) -> bytes:
    """NodeProto field 9 (tag 0x4A) holding a StringStringEntryProto (key 1, value 2)."""
    k, v = key.encode(), value.encode()
    body = b"\x0a" + _varint(len(k)) + k + b"\x12" + _varint(len(v)) + v
    return b"\x4a" + _varint(len(body)) + body


def _read_varint(buf: bytes, i: int) -> Tuple[int, int]:
    shift = result = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7


def _fields(buf: bytes):
    """Yields (field number, wire type, value) of a serialized message; value is bytes or int."""
    i = 0
    while i < len(buf):
        tag, i = _read_varint(buf, i)
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            value, i = _read_varint(buf, i)
        elif wire == 2:
            n, i = _read_varint(buf, i)
            value, i = buf[i:i + n], i + n
        elif wire == 5:
            value, i = buf[i:i + 4], i + 4
        elif wire == 1:
            value, i = buf[i:i + 8], i + 8
        else:
            raise ValueError(f"unsupported wire type {wire}")
        yield field, wire, value


def read_node_metadata(node: onnx.NodeProto) -> List[Tuple[str, str]]:
    """The (key, value) entries of NodeProto field 9, read from the node's wire bytes."""
    entries = []
    for field, wire, value in _fields(node.SerializeToString()):
        if field == 9 and wire == 2:
            kv = {f: v for f, _, v in _fields(value)}
            entries.append((kv.get(1, b"").decode(), kv.get(2, b"").decode()))
    return entries


# --------------------------------------------------------------------------------------------
# Export.


def _torch_export(module, args, *, input_names, output_names, dynamic_axes, export_params,
                  function_classes) -> onnx.ModelProto:
    buf = io.BytesIO()
    extra = {}
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        extra["dynamo"] = False  # torch >= 2.9 defaults to the dynamo exporter; we trace
    torch.onnx.export(
        module, args, buf, **extra,
        export_params=export_params,
        training=torch.onnx.TrainingMode.TRAINING,
        do_constant_folding=False,
        opset_version=OPSET,
        input_names=list(input_names),
        output_names=list(output_names),
        dynamic_axes=dynamic_axes or {},
        export_modules_as_functions=set(function_classes) if function_classes else False,
    )
    return onnx.load_from_string(buf.getvalue())


def canonicalize_functions(proto: onnx.ModelProto) -> None:
    """Names function variants by first call and orders `ModelProto.functions` by it.

    torch 1.13 numbers the variants of one class (`MPTBlock`, `MPTBlock.1`) and orders the
    function list from pointer-keyed maps, so two exports of one model differ run to run. Here
    the first variant called (depth-first, in node order) keeps the bare class name, the next is
    `.1`, and so on; the functions are listed in that same order.
    """
    by_key = {(f.domain, f.name): f for f in proto.functions}
    order: List[Tuple[str, str]] = []

    def visit(nodes):
        for node in nodes:
            key = (node.domain, node.op_type)
            if key in by_key and key not in order:
                order.append(key)
                visit(by_key[key].node)

    visit(proto.graph.node)
    order += [k for k in by_key if k not in order]  # never called; kept as torch wrote them
    new_name: Dict[Tuple[str, str], str] = {}
    variants: Dict[Tuple[str, str], int] = {}
    for domain, name in order:
        base = name.split(".")[0]
        k = variants.get((domain, base), 0)
        variants[(domain, base)] = k + 1
        new_name[(domain, name)] = base if k == 0 else f"{base}.{k}"

    def rename(nodes):
        for node in nodes:
            key = (node.domain, node.op_type)
            if key in new_name:
                node.op_type = new_name[key]

    rename(proto.graph.node)
    functions = [by_key[k] for k in order]
    for f in functions:
        rename(f.node)
        f.name = new_name[(f.domain, f.name)]
    copies = [onnx.FunctionProto() for _ in functions]
    for c, f in zip(copies, functions):
        c.CopyFrom(f)
    del proto.functions[:]
    proto.functions.extend(copies)


def check_parameters(proto: onnx.ModelProto, module: nn.Module, export_params: bool,
                     check_values: bool = True) -> None:
    """Every trainable parameter is exactly one initializer (or, without weights, one graph input)
    under its torch name with its shape; no renamed copies behind Identity nodes."""
    params = dict(module.named_parameters())
    inits = {}
    for init in proto.graph.initializer:
        if init.name in inits:
            raise ValueError(f"initializer {init.name!r} appears twice")
        inits[init.name] = init
    inputs = {i.name: i for i in proto.graph.input}
    problems = []
    for name in parameter_names(module):
        p = params[name]
        if export_params:
            if name not in inits:
                problems.append(f"parameter {name} is not an initializer")
                continue
            if list(inits[name].dims) != list(p.shape):
                problems.append(f"parameter {name}: shape {list(inits[name].dims)} != "
                                f"{list(p.shape)}")
            elif check_values:
                value = numpy_helper.to_array(inits[name])
                if not np.array_equal(value, p.detach().cpu().numpy()):
                    problems.append(f"parameter {name}: initializer values differ from the "
                                    "module's")
        else:
            if name not in inputs:
                problems.append(f"parameter {name} is not a graph input")
                continue
            dims = [d.dim_value for d in inputs[name].type.tensor_type.shape.dim]
            if dims != list(p.shape):
                problems.append(f"parameter {name}: input shape {dims} != {list(p.shape)}")
    for node in proto.graph.node:
        if node.op_type == "Identity" and any(i in params for i in node.input):
            problems.append(f"Identity node {node.name} copies a parameter")
    renamed = [n for n in inits if n.startswith("onnx::") and len(inits[n].dims) >= 2
               and inits[n].data_type == onnx.TensorProto.FLOAT]
    if renamed:
        problems.append(f"renamed float initializers (a folded or duplicated parameter?): "
                        f"{renamed}")
    if problems:
        raise ValueError("parameters do not map one-to-one to the export:\n  "
                         + "\n  ".join(problems))


def _set_metadata(proto: onnx.ModelProto, entries: Dict[str, str]) -> None:
    keep = [(p.key, p.value) for p in proto.metadata_props if p.key not in entries]
    del proto.metadata_props[:]
    for k, v in keep + list(entries.items()):
        entry = proto.metadata_props.add()
        entry.key, entry.value = k, v


def foundry_metadata(proto: onnx.ModelProto, module: nn.Module) -> Dict[str, str]:
    classes = module_classes(module)
    resolver = ScopeResolver(classes)
    compact = dict(separators=(",", ":"))
    entries = {
        "foundry.module_classes": json.dumps(classes, **compact),
        "foundry.parameters": json.dumps(parameter_names(module), **compact),
        "foundry.scopes": json.dumps(scope_table(proto, resolver), **compact),
    }
    if padding_rows(module):
        entries[PADDING_IDX_KEY] = json.dumps(padding_rows(module), **compact)
    return entries


def graph_signature(module: nn.Module, input_names: Sequence[str],
                    output_names: Sequence[str]) -> str:
    """torch.export's ExportGraphSignature text (`str(ep.graph_signature)`) for this module."""
    lines = [f"p_{n.replace('.', '_')}: PARAMETER target='{n}'" for n in parameter_names(module)]
    lines += [f"b_{n.replace('.', '_')}: BUFFER target='{n}' persistent=True"
              for n in buffer_names(module)]
    lines += [f"{n}: USER_INPUT" for n in input_names]
    outputs = "\n".join(f"{n}: USER_OUTPUT" for n in output_names)
    return "\n# inputs\n" + "\n".join(lines) + "\n\n# outputs\n" + outputs + "\n"


def to_metadata_format(proto: onnx.ModelProto, module: nn.Module, input_names: Sequence[str],
                       output_names: Sequence[str]) -> onnx.ModelProto:
    """Rewrites a scopes export into the dynamo exporter's annotation shape (format 3)."""
    classes = module_classes(module)
    resolver = ScopeResolver(classes)
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    out.ir_version = 10
    graph = out.graph
    keep = {i.name for i in graph.input} | {o.name for o in graph.output}
    keep |= {i.name for i in graph.initializer}
    rename: Dict[str, str] = {}
    used = set(keep)
    counters: Dict[str, int] = {}
    for node in graph.node:
        chain = resolver.chain(node_scope(node.name))
        base = node.op_type.lower()
        k = counters.get(base, 0)
        counters[base] = k + 1
        leaf = base if k == 0 else f"{base}_{k}"
        node.name = f"node_{leaf}"
        for j, value in enumerate(node.output):
            if not value or value in keep:
                continue
            new = leaf if j == 0 else f"{leaf}_out{j}"
            while new in used:
                new += "_"
            used.add(new)
            rename[value] = new
        op = f"onnx.{node.op_type}"
        name_scopes = chain + [leaf]
        hierarchy = [classes[p][0] for p in chain] + [op]
        namespace = "/".join(f"{p}: {classes[p][0]}" for p in chain) + f"/{leaf}: {op}"
        raw = b"".join(encode_metadata_entry(k_, v_) for k_, v_ in (
            ("namespace", namespace),
            (CLASS_HIERARCHY_KEY, repr(hierarchy)),
            (NAME_SCOPES_KEY, repr(name_scopes)),
        ))
        node.MergeFromString(raw)
    for node in graph.node:
        for j, value in enumerate(node.input):
            if value in rename:
                node.input[j] = rename[value]
        for j, value in enumerate(node.output):
            if value in rename:
                node.output[j] = rename[value]
    for vi in list(graph.value_info):
        if vi.name in rename:
            vi.name = rename[vi.name]
    del out.metadata_props[:]
    entries = {GRAPH_SIGNATURE_KEY: graph_signature(module, input_names, output_names)}
    if padding_rows(module):
        entries[PADDING_IDX_KEY] = json.dumps(padding_rows(module), separators=(",", ":"))
    _set_metadata(out, entries)
    return out


def export_with_annotations(module: nn.Module, args: Tuple[Any, ...], path: Optional[str], *,
                            annotations: str = "scopes",
                            input_names: Sequence[str] = ("input_ids", "labels"),
                            output_names: Sequence[str] = ("loss",),
                            dynamic_axes: Optional[Dict[str, Dict[int, str]]] = None,
                            function_classes: Optional[Iterable[type]] = None,
                            export_params: bool = True,
                            buffer_values: Optional[Dict[str, torch.Tensor]] = None,
                            check_values: bool = True) -> Dict[str, Any]:
    """Exports `module(*args)` to `path` with foundry's annotations (see the module doc).

    `export_params=False` leaves weights out (parameters become graph inputs); `buffer_values`
    then puts the named buffers back as initializers. A module whose parameters are on the meta
    device (see `to_meta`) is exported that way without allocating any weight.

    Returns {"annotations": format written, "fallback": reason or None, "seconds": export time,
    "proto": the ModelProto written}. `path=None` writes nothing.
    """
    if annotations not in ANNOTATIONS:
        raise ValueError(f"annotations must be one of {ANNOTATIONS}, not {annotations!r}")
    if annotations == "functions" and not function_classes:
        raise ValueError("annotations='functions' needs function_classes (the classes to extract)")
    info: Dict[str, Any] = {"requested": annotations, "annotations": annotations, "fallback": None}
    start = time.time()
    kwargs = dict(input_names=input_names, output_names=output_names, dynamic_axes=dynamic_axes,
                  export_params=export_params)
    on_meta = any(p.device.type == "meta" for p in module.parameters())
    if on_meta:
        if export_params:
            raise ValueError("a module on the meta device has no weights: pass export_params=False")
        args = tuple(a.to("meta") if isinstance(a, torch.Tensor) else a for a in args)
    patches = _MetaExportPatches() if on_meta else contextlib.nullcontext()
    with patches:
        proto, info = _export_proto(module, args, annotations, function_classes, kwargs, info)
    if not export_params and buffer_values:
        _restore_buffers(proto, buffer_values)
    info["seconds"] = time.time() - start
    check_parameters(proto, module, export_params, check_values=check_values)
    if info["annotations"] == "metadata":
        proto = to_metadata_format(proto, module, input_names, output_names)
    else:
        _set_metadata(proto, foundry_metadata(proto, module))
    if path is not None:
        with open(path, "wb") as f:
            f.write(proto.SerializeToString())
    info["proto"] = proto
    return info


def _export_proto(module, args, annotations, function_classes, kwargs, info):
    proto = None
    if annotations == "functions":
        try:
            proto = _torch_export(module, args, function_classes=function_classes, **kwargs)
            canonicalize_functions(proto)
        except RuntimeError as e:  # torch's function extraction is fragile (REFERENCE.md)
            first = str(e).strip().splitlines()[0] if str(e).strip() else repr(e)
            info["fallback"] = f"function extraction failed ({first}); wrote scopes instead"
            info["annotations"] = "scopes"
    if proto is None:
        proto = _torch_export(module, args, function_classes=None, **kwargs)
    return proto, info


def parse_repr_list(text: str) -> List[str]:
    """Reads a `pkg.torch.onnx.*` value (a Python repr list)."""
    value = ast.literal_eval(text)
    if not isinstance(value, list):
        raise ValueError(f"not a list: {text!r}")
    return value


def to_meta(module: nn.Module) -> Dict[str, torch.Tensor]:
    """Moves every buffer of a module built on the meta device to meta; returns their values.

    Build the model with `device="meta"` (no weight memory at all), call this, and export with
    `export_params=False, buffer_values=<the returned dict>`: the export traces the real graph,
    parameters become graph inputs declared by shape, and the (small) buffers stay initializers
    with their real values.
    """
    values = {}
    for name, buf in module.named_buffers():
        values[name] = buf.detach().clone()
    for mod in module.modules():
        for name, buf in list(mod._buffers.items()):
            if buf is not None:
                mod._buffers[name] = buf.to("meta")
    return values


class _MetaExportPatches:
    """Makes torch 1.13's TorchScript exporter work on a module whose parameters are on meta.

    Two passes touch parameter *data*: ONNX shape inference copies every initializer it is given
    (minutes and the full weight size in memory for MPT-1B, impossible for 30B; on meta it raises
    "Cannot copy out of meta tensor"), and initializer deduplication merges tensors with equal
    data pointers (all meta tensors have none, so every same-shaped parameter would collapse into
    one behind Identity nodes). During the export, shape inference sees no meta tensors and
    deduplication is skipped; both are restored afterwards.

    A scalar the forward builds and moves to its input's device (Hugging Face's GPT-2:
    `torch.full([], finfo.min).to(attn_weights.device)`) is a constant of the trace; moved to
    meta it would have no value to export. Such `.to` calls keep the CPU scalar, which meta
    ops accept as they accept a Python number.
    """

    def __enter__(self):
        self._keep_scalars = _KeepScalarsOffMeta()
        self._keep_scalars.__enter__()
        C = torch._C
        self._saved = {}
        name = "_jit_pass_onnx_graph_shape_type_inference"
        if hasattr(C, name):
            orig = getattr(C, name)
            self._saved[name] = orig

            def shape_inference(graph, params_dict, *rest):
                real = {k: v for k, v in params_dict.items() if v.device.type != "meta"}
                return orig(graph, real, *rest)

            setattr(C, name, shape_inference)
        name = "_jit_pass_onnx_deduplicate_initializers"
        if hasattr(C, name):
            self._saved[name] = getattr(C, name)
            setattr(C, name, lambda graph, params_dict, *rest: params_dict)
        return self

    def __exit__(self, *exc):
        for name, fn in self._saved.items():
            setattr(torch._C, name, fn)
        self._keep_scalars.__exit__(*exc)
        return False


class _KeepScalarsOffMeta(torch.overrides.TorchFunctionMode):
    """`Tensor.to` of a 0-d tensor that is not on meta, to meta, returns the tensor unchanged."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.Tensor.to and isinstance(out, torch.Tensor):
            src = args[0]
            if out.device.type == "meta" and src.device.type != "meta" and src.dim() == 0:
                return src
        return out


def _restore_buffers(proto: onnx.ModelProto, buffer_values: Dict[str, torch.Tensor]) -> None:
    """Turns graph inputs that are buffers back into initializers with their values."""
    keep = []
    for value_info in proto.graph.input:
        if value_info.name in buffer_values:
            array = buffer_values[value_info.name].cpu().numpy()
            proto.graph.initializer.append(numpy_helper.from_array(array, value_info.name))
        else:
            keep.append(value_info)
    if len(keep) != len(proto.graph.input):
        copies = [onnx.ValueInfoProto() for _ in keep]
        for c, v in zip(copies, keep):
            c.CopyFrom(v)
        del proto.graph.input[:]
        proto.graph.input.extend(copies)
