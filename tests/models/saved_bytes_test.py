#!/usr/bin/python3
"""`foundry-compile --report-json`'s saved-for-backward bytes, recomputed from PREFIX.train.onnx alone.

For each model below: compile with -o, --report-json and --memory-timeline, then read the exported
training graph with the onnx package and recompute, without foundry's code:
- each node's phase from its NodeProto doc string (`mark.phase=...`, compiler/phase.h; a node
  without one counts as forward) and its module from `scope=...`;
- buffers: a view (Reshape, Flatten, Squeeze, Unsqueeze, Identity in the default domain; never
  one whose output is a graph output) shares input 0's buffer, so chains of views are one buffer;
- saved for backward: the buffers holding a value that a forward node produces and a backward or
  recompute node reads, excluding the buffers of graph inputs, initializers and graph outputs;
  each counted once at its root's exact bytes (value_info shape x element size);
and compare with the report exactly: the total, and the split by the scope of each root's
producer (which must sum to the total). With --ckpt (every target form), the graph has recompute
nodes (none without), and the report's checkpoint object agrees with two training graphs: saved
before = the plain compile's total, after = this one's, before - bytes_freed + bytes_added =
after, and after < before. Foundry's in-place aliases are invisible here and need
not be: an input shares its buffer with the output only once nothing reads it any more, so no
second saved value ever sits in a saved buffer. The timeline must be well-formed XML (an <svg> root) that
carries the report's peak.

Run from anywhere: /usr/bin/python3 tests/models/saved_bytes_test.py (FOUNDRY_BIN_DIR names the
build folder, default build/). Exits 77 (skip) without onnx, except under FOUNDRY_CI=1.
"""

import json
import os
import subprocess
import sys
import tempfile
import traceback
import xml.etree.ElementTree as ET

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

try:
    import onnx
except ImportError as e:
    if os.environ.get("FOUNDRY_CI") == "1":
        print(f"FAIL: {e}; CI (FOUNDRY_CI=1) needs onnx: run scripts/setup.sh")
        sys.exit(1)
    print(f"SKIP: {e} (install python3-onnx with scripts/setup.sh)")
    sys.exit(77)

BIN = os.environ.get("FOUNDRY_BIN_DIR", os.path.join(REPO, "build"))
T = onnx.TensorProto
ELEMENT_BYTES = {T.FLOAT: 4, T.DOUBLE: 8, T.FLOAT16: 2, T.BFLOAT16: 2, T.INT64: 8, T.INT32: 4,
                 T.INT16: 2, T.INT8: 1, T.UINT8: 1, T.BOOL: 1}
VIEW_OPS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}
TINY = {"batch": 2, "seq": 16}
# (name, model, dims, --ckpt targets): annotated fixtures, stock torch.onnx.export fixtures, a
# structure export; plain, and checkpointed with every target form (a registry key, a class name,
# a path glob, a child name relative to the blocks, `block`, layer forms, several targets, nested
# targets), where the recompute clones read the kept boundary in the backward.
MODELS = [
    ("mpt_tiny", "models/fixtures/mpt_tiny/model.onnx", TINY, []),
    ("llama_tiny", "models/fixtures/llama_tiny/model.onnx", TINY, []),
    ("llama_tiny_window", "models/fixtures/llama_tiny_window/model.onnx", TINY, []),
    ("gpt2_tiny stock", "models/fixtures/gpt2_tiny/model.stock.onnx", TINY, []),
    ("mpt_tiny stock", "models/fixtures/mpt_tiny/model.stock.onnx", TINY, []),
    ("mpt_125m", "models/exports/mpt_125m.onnx", {"batch": 1, "seq": 128}, []),
    ("mpt_tiny mptblock", "models/fixtures/mpt_tiny/model.onnx", TINY, ["mptblock"]),
    ("mpt_tiny gqa", "models/fixtures/mpt_tiny/model.onnx", TINY, ["grouped_query_attention"]),
    ("mpt_tiny mptmlp first-1", "models/fixtures/mpt_tiny/model.onnx", TINY, ["mptmlp=first-1"]),
    ("mpt_tiny lp layernorm", "models/fixtures/mpt_tiny/model.onnx", TINY,
     ["low_precision_layernorm"]),
    ("mpt_tiny MPTMLP", "models/fixtures/mpt_tiny/model.onnx", TINY, ["MPTMLP"]),
    ("mpt_tiny glob", "models/fixtures/mpt_tiny/model.onnx", TINY, ["transformer.blocks.*.attn"]),
    ("mpt_tiny nested", "models/fixtures/mpt_tiny/model.onnx", TINY,
     ["mptblock=first-1", "grouped_query_attention"]),
    ("mpt_tiny_4layer layers", "models/fixtures/mpt_tiny_4layer/model.onnx", {"batch": 2, "seq": 24},
     ["mptblock=[0,2]", "grouped_query_attention=last-1", "mptmlp=middle-1"]),
    ("mpt_tiny_dropout mptblock", "models/fixtures/mpt_tiny_dropout/model.onnx", TINY,
     ["mptblock"]),
    ("llama_tiny LlamaAttention", "models/fixtures/llama_tiny/model.onnx", TINY,
     ["LlamaAttention", "LlamaMLP"]),
    ("llama_tiny_window LlamaAttention", "models/fixtures/llama_tiny_window/model.onnx",
     TINY, ["LlamaAttention"]),
    ("gpt2_tiny stock block", "models/fixtures/gpt2_tiny/model.stock.onnx", TINY, ["block"]),
    ("mpt_tiny stock attn", "models/fixtures/mpt_tiny/model.stock.onnx", TINY, ["attn"]),
    ("mpt_125m gqa+mptmlp", "models/exports/mpt_125m.onnx", {"batch": 1, "seq": 128},
     ["grouped_query_attention", "mptmlp"]),
]


class CheckFailed(Exception):
    pass


def check(cond, message):
    if not cond:
        raise CheckFailed(message)


def doc_entries(node):
    """`key=value` lines of a foundry NodeProto doc string (values escape \\ and newline)."""
    entries = {}
    for line in node.doc_string.split("\n"):
        key, sep, value = line.partition("=")
        if sep:
            entries[key] = value.replace("\\n", "\n").replace("\\\\", "\\")
    return entries


def value_bytes(graph):
    sizes = {}
    for vi in list(graph.value_info) + list(graph.input) + list(graph.output):
        t = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim]
        if any(d < 0 for d in dims):
            continue
        n = 1
        for d in dims:
            n *= d
        check(t.elem_type in ELEMENT_BYTES, f"{vi.name}: element type {t.elem_type} not in the table")
        sizes[vi.name] = n * ELEMENT_BYTES[t.elem_type]
    return sizes


def saved_for_backward(path):
    """(total bytes, {scope: bytes}, recompute nodes) of the training graph at `path`, from the
    graph alone."""
    graph = onnx.load(path, load_external_data=False).graph
    outputs = {o.name for o in graph.output}
    excluded = outputs | {i.name for i in graph.input} | {t.name for t in graph.initializer}
    phase, scope, producer, root = {}, {}, {}, {}
    for node in graph.node:
        entries = doc_entries(node)
        phase[node.name] = entries.get("mark.phase", "forward")
        check(phase[node.name] in ("forward", "backward", "recompute", "optimizer"),
              f"node {node.name}: unknown phase {phase[node.name]!r}")
        scope[node.name] = entries.get("scope", "")
        for o in node.output:
            if o:
                producer[o] = node
        if (node.domain in ("", "ai.onnx") and node.op_type in VIEW_OPS and node.output[0]
                and node.output[0] not in outputs):
            root[node.output[0]] = root.get(node.input[0], node.input[0])
    saved = set()
    recomputed = sum(1 for p in phase.values() if p == "recompute")
    for node in graph.node:
        if phase[node.name] not in ("backward", "recompute"):
            continue
        for v in node.input:
            if v in producer and phase[producer[v].name] == "forward":
                r = root.get(v, v)
                if r not in excluded:
                    saved.add(r)
    sizes = value_bytes(graph)
    total, modules = 0, {}
    for r in saved:
        check(r in sizes, f"saved value {r} has no complete type in value_info")
        total += sizes[r]
        module = scope[producer[r].name]
        modules[module] = modules.get(module, 0) + sizes[r]
    return total, modules, recomputed


def run(cmd):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    check(proc.returncode == 0,
          f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return proc


def compile_model(model, dims, ckpt, prefix):
    """foundry-compile MODEL -o PREFIX with the report and timeline: (.train.onnx path, process)."""
    cmd = [os.path.join(BIN, "foundry-compile"), os.path.join(REPO, model), "-o", prefix,
           "--report-json", prefix + ".report.json", "--memory-timeline", prefix + ".svg"]
    for k, v in dims.items():
        cmd += ["--dim", f"{k}={v}"]
    for target in ckpt:
        cmd += ["--ckpt", target]
    return prefix + ".train.onnx", run(cmd)


def check_model(name, model, dims, ckpt, tmp):
    prefix = os.path.join(tmp, name.replace(" ", "_").replace("+", "_"))
    report_path, svg_path = prefix + ".report.json", prefix + ".svg"
    _, proc = compile_model(model, dims, ckpt, prefix)
    with open(report_path) as f:
        report = json.load(f)
    memory = report["memory"]
    check(report["dims"] == dims, f"report dims {report['dims']} != {dims}")
    # The memory report's line; with --ckpt also the checkpointing section's before -> after.
    line = [s for s in proc.stdout.splitlines() if s.startswith("  saved for backward ")]
    check(len(line) == (2 if ckpt else 1) and
          f"({memory['saved_for_backward_bytes']} B)" in line[0],
          f"the text report does not show {memory['saved_for_backward_bytes']} bytes saved for "
          f"backward:\n{proc.stdout}")

    total, modules, recomputed = saved_for_backward(prefix + ".train.onnx")
    check(total > 0, "nothing saved for backward: the phase marks are missing")
    check(bool(recomputed) == bool(ckpt),
          f"{recomputed} recompute nodes with --ckpt {ckpt}" if ckpt else
          f"{recomputed} recompute nodes without --ckpt")
    check(memory["saved_for_backward_bytes"] == total,
          f"report says {memory['saved_for_backward_bytes']} bytes saved for backward, "
          f"the training graph {total}")
    reported = {m["module"]: m["saved_for_backward_bytes"] for m in report["modules"]}
    check(len(reported) == len(report["modules"]), "a module is listed twice")
    check(sum(reported.values()) == total,
          f"modules sum to {sum(reported.values())}, the total is {total}")
    check(reported == modules, "per-module bytes differ:\n" + "\n".join(
        f"  {m!r}: report {reported.get(m)}, graph {modules.get(m)}"
        for m in sorted(set(reported) | set(modules)) if reported.get(m) != modules.get(m)))
    if ckpt:
        # Before and after, each recomputed from a training graph: the plain compile's and this
        # one's; the report's accounting identity holds on them.
        plain_total, _, _ = saved_for_backward(compile_model(model, dims, [], prefix + "_plain")[0])
        c = report["checkpoint"]
        check(c["targets"] == ckpt, f"report targets {c['targets']} != {ckpt}")
        check(c["saved_before_bytes"] == plain_total,
              f"report says {c['saved_before_bytes']} bytes saved before checkpointing, the plain "
              f"training graph {plain_total}")
        check(c["saved_after_bytes"] == total,
              f"report says {c['saved_after_bytes']} bytes saved after, the training graph {total}")
        check(plain_total - c["bytes_freed"] + c["bytes_added"] == total,
              f"{plain_total} - {c['bytes_freed']} freed + {c['bytes_added']} added != {total}")
        check(total < plain_total, f"--ckpt {ckpt} saves {total} bytes, plain {plain_total}")
        check(f"= {total} B)" in line[1], f"the checkpointing section does not end at {total} B: "
              f"{line[1]}")

    svg = ET.parse(svg_path).getroot()
    check(svg.tag == "{http://www.w3.org/2000/svg}svg", f"the timeline's root is {svg.tag}")
    texts = [t.text or "" for t in svg.iter("{http://www.w3.org/2000/svg}text")]
    peak = [t for t in texts if t.startswith("peak ")]
    check(len(peak) == 1 and f"at step {memory['peak_step']} " in peak[0],
          f"the timeline's peak label {peak} does not name step {memory['peak_step']}")
    return (f"{total} B saved for backward in {len(modules)} modules; arena "
            f"{memory['arena_bytes']} B, bound {memory['lower_bound_bytes']} B")


def main():
    tool = os.path.join(BIN, "foundry-compile")
    if not os.access(tool, os.X_OK):
        print(f"FAIL: {tool} not built (set FOUNDRY_BIN_DIR)")
        return 1
    failed = 0
    with tempfile.TemporaryDirectory(prefix="foundry-saved-") as tmp:
        for name, model, dims, ckpt in MODELS:
            try:
                print(f"ok   {name}: {check_model(name, model, dims, ckpt, tmp)}")
            except Exception:  # noqa: BLE001 -- report every model, then fail
                failed += 1
                print(f"FAIL {name}")
                traceback.print_exc(file=sys.stdout)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
