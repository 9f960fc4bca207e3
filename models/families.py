"""Model families, configs, seeded weights and inputs shared by the exporter and the fixtures.

A config is a JSON file in models/configs/: the family's own keys (llm-foundry's MPTConfig keys
for "mpt", Hugging Face's LlamaConfig keys for "llama", GPT2Config keys for "gpt2",
GPTNeoXConfig keys for "gpt_neox", BertConfig keys for "bert") plus
  "family":  "mpt" (default), "llama", "gpt2", "gpt_neox" or "bert" (BertForMaskedLM),
  "foundry": {"batch_size": B, "seq_len": S, "seed": N, "trace_seq_len": T}
where batch_size/seq_len size the fixture inputs (and the export trace), seed seeds weights and
inputs, and trace_seq_len (default min(seq_len, 16)) is the sequence length big configs are
traced at (the graph keeps `batch` and `seq` symbolic either way).
"""

import json
import os
from typing import Any, Dict, Tuple

import torch
import torch.nn as nn

from models import bert, gpt2, gpt_neox, llama, mpt

MODELS_DIR = os.path.dirname(os.path.abspath(__file__))
CONFIGS_DIR = os.path.join(MODELS_DIR, "configs")
DYNAMIC_AXES = {"input_ids": {0: "batch", 1: "seq"}, "labels": {0: "batch", 1: "seq"}}

_FAMILIES = {
    "mpt": (mpt.build_model, mpt.FUNCTION_CLASSES),
    "llama": (llama.build_model, llama.FUNCTION_CLASSES),
    "gpt2": (gpt2.build_model, gpt2.FUNCTION_CLASSES),
    "gpt_neox": (gpt_neox.build_model, gpt_neox.FUNCTION_CLASSES),
    "bert": (bert.build_model, bert.FUNCTION_CLASSES),
}
# Families whose inputs are not the causal-LM (ids, ids) pair: fn(config, batch, seq, generator).
_INPUT_HOOKS = {
    "bert": bert.make_inputs,
}
# Each family's config default, for configs that leave vocab_size out.
_DEFAULT_VOCAB = {"mpt": 50368, "llama": 32000, "gpt2": 50257, "gpt_neox": 50432, "bert": 30522}


def load_config(path_or_name: str) -> Dict[str, Any]:
    path = path_or_name
    if not os.path.exists(path):
        path = os.path.join(CONFIGS_DIR, path_or_name + ".json")
    with open(path) as f:
        config = json.load(f)
    config.setdefault("name", os.path.splitext(os.path.basename(path))[0])
    return config


def family(config: Dict[str, Any]) -> str:
    name = config.get("family", "mpt")
    if name not in _FAMILIES:
        raise ValueError(f"unknown family {name!r} (known: {sorted(_FAMILIES)})")
    return name


def settings(config: Dict[str, Any]) -> Dict[str, Any]:
    s = {"batch_size": 2, "seq_len": 16, "seed": 0}
    s.update(config.get("foundry", {}))
    s.setdefault("trace_seq_len", min(s["seq_len"], 16))
    return s


def vocab_size(config: Dict[str, Any]) -> int:
    return int(config.get("vocab_size", _DEFAULT_VOCAB[family(config)]))


def function_classes(config: Dict[str, Any]):
    return _FAMILIES[family(config)][1]


def build(config: Dict[str, Any], device=None) -> nn.Module:
    return _FAMILIES[family(config)][0](config, device=device)


def init_weights(model: nn.Module, seed: int, perturb_affine: bool = True) -> None:
    """Deterministic init: N(0, 0.02) for Linear/Embedding weights (and any weight of two or more
    dimensions, such as GPT-2's Conv1D); other weights (norms) 1, biases 0.

    With `perturb_affine` (the fixtures) every bias and norm weight gets N(0, 0.02) noise on top,
    so a dropped bias or scale changes the numbers. Parameters are visited in `named_parameters`
    order with one CPU generator, so a seed gives the same bits on any machine.
    """
    gen = torch.Generator().manual_seed(seed)
    matrix_like = set()
    for mod in model.modules():
        if isinstance(mod, (nn.Linear, nn.Embedding)):
            matrix_like.add(id(mod.weight))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if id(p) in matrix_like or p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
                continue
            p.fill_(0.0 if name.endswith("bias") else 1.0)
            if perturb_affine:
                p.add_(torch.randn(p.shape, generator=gen) * 0.02)


def seeded_model(config: Dict[str, Any]) -> nn.Module:
    model = build(config)
    init_weights(model, settings(config)["seed"])
    model.train()
    return model


def make_inputs(config: Dict[str, Any], batch_size=None,
                seq_len=None) -> Tuple[torch.Tensor, torch.Tensor]:
    """Seeded token ids and raw labels (= the ids; the model shifts them). The last three labels
    of the last row are -100 (padding), so ignore_index is exercised. A family with an input hook
    (BERT's masked positions) makes its own from the same generator."""
    s = settings(config)
    b = batch_size or s["batch_size"]
    t = seq_len or s["seq_len"]
    gen = torch.Generator().manual_seed(s["seed"] + 1)
    if family(config) in _INPUT_HOOKS:
        return _INPUT_HOOKS[family(config)](config, b, t, gen)
    input_ids = torch.randint(0, vocab_size(config), (b, t), generator=gen, dtype=torch.int64)
    labels = input_ids.clone()
    labels[-1, -3:] = -100
    return input_ids, labels


def meta_model(config: Dict[str, Any]):
    """(model, buffer values): the real structure on the meta device, no weight memory at all,
    for --no-weights exports (`export_with_annotations(..., export_params=False,
    buffer_values=...)`)."""
    from models.foundry_export import to_meta
    model = build(config, device="meta")
    buffer_values = to_meta(model)
    model.train()
    return model, buffer_values
