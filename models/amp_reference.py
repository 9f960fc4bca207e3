#!/usr/bin/env python3
"""PyTorch's mixed-precision references for `foundry-compile --precision amp_bf16`: CPU
autocast in bf16 against float64.

    scripts/torch26-env.sh run python3 models/amp_reference.py            # PyTorch 2.6
    scripts/torch26-env.sh run python3 models/amp_reference.py --only mpt_tiny

For every committed fixture without dropout (models/fixtures/<name>/, the same seeded model and
inputs make_fixtures.py used), one forward and backward three ways:
  - float64: the model and its inputs' embeddings in double, the reference every error is
    measured against;
  - float32 (no autocast): PyTorch's fp32 gradients, for scale;
  - autocast: torch.autocast("cpu", dtype=torch.bfloat16), parameters f32, the loss backward
    from its f32 value, as Composer's amp_bf16 runs (on the CPU, where the comparison runs).
Writes models/fixtures/<name>/amp_reference/:
  grads/<parameter>_grad.pb   the float64 gradient, stored as float32 (its rounding, 2^-24
                              relative, is far below bf16's 2^-9)
  reference.json              {"torch": version, "loss_f64", "loss_f32", "loss_autocast",
                               "grad_error": {"autocast": {param: e}, "f32": {param: e}}}
where e = ||g - g64||_2 / max(||g64||_2, error_floor) for one parameter, error_floor = 1e-3 of the
fixture's largest gradient norm (a gradient zero in exact arithmetic is rounding noise). tests/runtime/amp_reference_test.cc
holds foundry's amp_bf16 loss within 1e-2 relative of loss_autocast and each parameter's error
to at most 2x PyTorch autocast's.

PyTorch's CPU autocast lists are not its CUDA lists (aten/src/ATen/autocast_mode.cpp): on the CPU
softmax, log_softmax, layer_norm, group_norm, exp, log, pow, rsqrt, sum, prod, cumsum, ... are not
on the fp32 list (they run in their input's type); the CUDA lists foundry follows (passes/autocast.h)
put them there. CPU autocast does run cross_entropy/nll_loss in fp32, and both lists run mm, bmm,
addmm, linear, matmul and scaled_dot_product_attention in bf16. Where a fixture's norm reads the f32
residual stream, the two lists agree on it; where a bf16 tensor reaches one of the ops above (an
RMSNorm's pow and rsqrt inside a block, a softmax outside fused attention) foundry computes in f32
where PyTorch's CPU autocast computes in bf16.
"""

import argparse
import copy
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

FIXTURES = os.path.join(REPO, "models", "fixtures")


def read_pb(path):
    import onnx
    from onnx import numpy_helper
    return numpy_helper.to_array(onnx.load_tensor(path))


def write_pb(path, array, name):
    from onnx import numpy_helper
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(array, name).SerializeToString())


def run(model, input_ids, labels, autocast):
    import torch
    model.zero_grad(set_to_none=True)
    if autocast:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(input_ids, labels)
        loss = loss.float()
    else:
        loss = model(input_ids, labels)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return float(loss.detach()), grads


def rel_error(g, ref, floor):
    import torch
    ref = ref.double()
    den = max(float(torch.linalg.vector_norm(ref)), floor)
    return float(torch.linalg.vector_norm(g.double() - ref)) / den


def make_one(name):
    import torch

    from models import families
    from models.foundry_export import parameter_names
    from models.make_fixtures import has_dropout

    fixture = os.path.join(FIXTURES, name)
    config = families.load_config(os.path.join(fixture, "config.json"))
    if has_dropout(config):
        return None
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = families.seeded_model(config)
    input_ids = torch.from_numpy(read_pb(os.path.join(fixture, "inputs", "input_ids.pb")).copy())
    labels = torch.from_numpy(read_pb(os.path.join(fixture, "inputs", "labels.pb")).copy())

    m64 = copy.deepcopy(model).double()
    loss64, g64 = run(m64, input_ids, labels, autocast=False)
    loss32, g32 = run(copy.deepcopy(model), input_ids, labels, autocast=False)
    loss_ac, g_ac = run(copy.deepcopy(model), input_ids, labels, autocast=True)

    out = os.path.join(fixture, "amp_reference")
    errors = {"autocast": {}, "f32": {}}
    # A gradient that is zero in exact arithmetic (qk_ln's k_ln.bias, BERT's unused pooler) is
    # rounding noise in every precision: its error is measured against 1e-3 of the fixture's
    # largest gradient norm instead of its own.
    floor = 1e-3 * max(float(torch.linalg.vector_norm(g64[p])) for p in parameter_names(model))
    for pname in parameter_names(model):
        ref = g64[pname]
        write_pb(os.path.join(out, "grads", pname + "_grad.pb"), ref.numpy().astype("float32"),
                 pname + "_grad")
        errors["autocast"][pname] = rel_error(g_ac[pname], ref, floor)
        errors["f32"][pname] = rel_error(g32[pname], ref, floor)
    doc = {"torch": torch.__version__, "error_floor": floor, "loss_f64": loss64, "loss_f32": loss32,
           "loss_autocast": loss_ac, "grad_error": errors}
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
    worst = max(errors["autocast"].values())
    print(f"{name}: loss f64 {loss64:.6f} f32 {loss32:.6f} autocast {loss_ac:.6f}; "
          f"largest autocast gradient error {worst:.3e}")
    return doc


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help="fixture names (default: all)")
    args = ap.parse_args(argv)
    names = args.only or sorted(d for d in os.listdir(FIXTURES)
                                if os.path.isfile(os.path.join(FIXTURES, d, "config.json")))
    for name in names:
        if make_one(name) is None:
            print(f"{name}: dropout on, no reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
