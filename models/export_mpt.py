#!/usr/bin/python3
"""Export a model config to ONNX with foundry's module annotations.

    /usr/bin/python3 models/export_mpt.py --config models/configs/mpt_tiny.json -o mpt.onnx
    /usr/bin/python3 models/export_mpt.py --config mpt_7b -o mpt7b.onnx --no-weights
    /usr/bin/python3 models/export_mpt.py --config mpt_tiny -o f.onnx --annotations functions
    /usr/bin/python3 models/export_mpt.py --config mpt_7b --n-layers 24 -o m24.onnx --no-weights

--annotations: scopes (default; TorchScript scoped names + foundry.* metadata), functions (ONNX
local functions; falls back to scopes, with a message, where torch's extraction fails) or
metadata (dynamo-style node metadata_props, IR 10). --no-weights builds the model without
allocating weights and exports parameters as graph inputs (for MPT-7B/30B shapes).

Run one export per process: torch 1.13 keeps state between exports (a second functions export in
one process trips an internal assert).
"""

import argparse
import json
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from models import families  # noqa: E402
from models.foundry_export import ANNOTATIONS, export_with_annotations  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True, help="config JSON file or name in models/configs")
    ap.add_argument("-o", "--output", required=True, help="output .onnx path")
    ap.add_argument("--annotations", choices=ANNOTATIONS, default="scopes")
    ap.add_argument("--no-weights", action="store_true",
                    help="do not materialise weights; parameters become graph inputs")
    ap.add_argument("--logits", action="store_true", help="also output `logits`")
    ap.add_argument("--batch", type=int, help="trace batch size (the graph keeps `batch` symbolic)")
    ap.add_argument("--seq", type=int,
                    help="trace sequence length (the graph keeps `seq` symbolic)")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    ap.add_argument("--n-layers", type=int,
                    help="override the config's n_layers (exports that differ only in depth, "
                         "for bench/compile_scaling.sh)")
    args = ap.parse_args(argv)

    torch.manual_seed(0)
    torch.set_num_threads(1)
    config = families.load_config(args.config)
    if args.n_layers is not None:
        if families.family(config) != "mpt":
            ap.error(f"--n-layers applies to MPT configs (n_layers), not {config['name']}")
        if args.n_layers < 1:
            ap.error(f"--n-layers must be at least 1, got {args.n_layers}")
        config["n_layers"] = args.n_layers
        config["name"] = f"{config['name']}_{args.n_layers}l"
    s = families.settings(config)
    start = time.time()
    buffer_values = None
    if args.no_weights:
        model, buffer_values = families.meta_model(config)
        batch, seq = args.batch or 1, args.seq or s["trace_seq_len"]
    else:
        model = families.seeded_model(config)
        batch, seq = args.batch or s["batch_size"], args.seq or s["seq_len"]
    model.output_logits = args.logits
    inputs = families.make_inputs(config, batch, seq)
    output_names = ["loss", "logits"] if args.logits else ["loss"]
    info = export_with_annotations(
        model, inputs, args.output, annotations=args.annotations,
        input_names=["input_ids", "labels"], output_names=output_names,
        dynamic_axes=dict(families.DYNAMIC_AXES,
                          **({"logits": {0: "batch", 1: "seq"}} if args.logits else {})),
        function_classes=families.function_classes(config),
        export_params=not args.no_weights, buffer_values=buffer_values)
    proto = info.pop("proto")
    summary = {
        "config": config["name"],
        "output": args.output,
        "annotations": info["annotations"],
        "fallback": info["fallback"],
        "weights": not args.no_weights,
        "trace_shape": [batch, seq],
        "nodes": len(proto.graph.node),
        "functions": len(proto.functions),
        "bytes": os.path.getsize(args.output),
        "export_seconds": round(info["seconds"], 2),
        "total_seconds": round(time.time() - start, 2),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    if info["fallback"]:
        print(f"export_mpt: {config['name']}: {info['fallback']}", file=sys.stderr)
    if args.json:
        print(json.dumps(summary))
    else:
        for k, v in summary.items():
            print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
