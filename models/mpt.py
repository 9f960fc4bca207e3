"""MPT as llm-foundry defines it, rebuilt for ONNX export.

Module attribute names and class names follow llm-foundry
(`llmfoundry/models/mpt/modeling_mpt.py`,
`llmfoundry/models/layers/{attention,blocks,ffn,norm}.py`),
so an export of this model carries the same scopes (`transformer.blocks.3.attn.Wqkv`) and the same
class hierarchy (MultiheadAttention -> GroupedQueryAttention, LPLayerNorm -> LayerNorm,
MPTGLU -> MPTMLP) as a user's export of the real thing.

Differences from llm-foundry, all chosen so that the exported graph is small and plain:
- only the torch attention implementation; no KV cache, no padding masks, no sequence ids,
  no RoPE, no MoE, no autocast handling in the low-precision norms (they compute in the input
  dtype);
- the causal mask is `arange(S)[None, :] > arange(S)[:, None]` (Range, Unsqueeze, Greater, Where)
  instead of `ones(S, S).tril()` (Trilu), and the ALiBi bias is computed from the runtime sequence
  length inside the graph (llm-foundry caches a (1, H, 1, max_seq_len) tensor and slices it);
- labels are shifted with `cat(labels[:, 1:], -100)` instead of `roll` + index assignment
  (same values, no ScatterND);
- q, k and v are three Slices of Wqkv's output, not `split` (torch 1.13 leaves the Split's size
  constant without a scope, which breaks function extraction for 3+ blocks);
- attention modules return only the output tensor (no attention weights / past key values);
- k/v are repeated to n_heads for every kv_n_heads < n_heads, MQA included (llm-foundry lets
  matmul broadcast the single kv head), so every attention MatMul has equal batch dims.

Only APIs present in both PyTorch 1.13 and 2.x are used.
"""

import math
from typing import Any, Dict, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

# --------------------------------------------------------------------------------------------
# Configuration (llm-foundry's MPTConfig keys and defaults).

_ATTN_DEFAULTS: Dict[str, Any] = {
    "attn_type": "multihead_attention",
    "attn_pdrop": 0.0,
    "attn_impl": "torch",
    "qk_ln": False,
    "clip_qkv": None,
    "softmax_scale": None,
    "alibi": False,
    "alibi_bias_max": 8,
    "kv_n_heads": 1,
}

_FFN_DEFAULTS: Dict[str, Any] = {
    "ffn_type": "mptmlp",
    "ffn_act_fn": {"name": "gelu", "approximate": "none"},
}

_DEFAULTS: Dict[str, Any] = {
    "d_model": 2048,
    "n_heads": 16,
    "n_layers": 24,
    "expansion_ratio": 4,
    "max_seq_len": 2048,
    "vocab_size": 50368,
    "resid_pdrop": 0.0,
    "emb_pdrop": 0.0,
    "learned_pos_emb": True,
    "no_bias": False,
    "norm_type": "low_precision_layernorm",
    "norm_eps": 1e-5,
    "tie_word_embeddings": True,
}

# Keys a config may carry that do not change the model (bookkeeping and export settings).
_IGNORED_KEYS = {"name", "family", "description", "foundry", "model_type"}


class MPTConfig:
    """llm-foundry's MPTConfig, reduced to what this model supports; unknown keys are errors."""

    def __init__(self, **kwargs: Any):
        unknown = set(kwargs) - set(_DEFAULTS) - {"attn_config", "ffn_config"} - _IGNORED_KEYS
        if unknown:
            raise ValueError(f"MPTConfig: unsupported keys {sorted(unknown)}")
        for key, value in _DEFAULTS.items():
            setattr(self, key, kwargs.get(key, value))
        self.attn_config = dict(_ATTN_DEFAULTS)
        self.attn_config.update(kwargs.get("attn_config") or {})
        self.ffn_config = dict(_FFN_DEFAULTS)
        self.ffn_config.update(kwargs.get("ffn_config") or {})
        bad = set(self.attn_config) - set(_ATTN_DEFAULTS)
        if bad:
            raise ValueError(f"MPTConfig.attn_config: unsupported keys {sorted(bad)}")
        if self.attn_config["attn_impl"] not in ("torch", "sdpa"):
            # flash/triton change kernels, not the graph; the export uses the torch path.
            self.attn_config["attn_impl"] = "torch"
        if self.d_model % self.n_heads:
            raise ValueError("d_model must be divisible by n_heads")
        attn_type = self.attn_config["attn_type"]
        if attn_type == "multihead_attention":
            self.attn_config["kv_n_heads"] = self.n_heads
        elif attn_type == "multiquery_attention":
            self.attn_config["kv_n_heads"] = 1
        elif attn_type != "grouped_query_attention":
            raise ValueError(f"unknown attn_type {attn_type!r}")
        if self.n_heads % self.attn_config["kv_n_heads"]:
            raise ValueError("n_heads must be divisible by kv_n_heads")
        if self.attn_config["alibi"]:
            self.learned_pos_emb = False
        if self.norm_type.lower() not in NORM_CLASS_REGISTRY:
            raise ValueError(f"unknown norm_type {self.norm_type!r}")
        if self.ffn_config["ffn_type"] not in FFN_CLASS_REGISTRY:
            raise ValueError(f"unknown ffn_type {self.ffn_config['ffn_type']!r}")

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "MPTConfig":
        return cls(**d)


# --------------------------------------------------------------------------------------------
# Norms (llmfoundry/models/layers/norm.py).


class LPLayerNorm(nn.LayerNorm):
    """Low-precision LayerNorm. `bias=False` (no_bias) keeps the weight only."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True,
                 device=None, dtype=None, bias: bool = True):
        super().__init__(normalized_shape, eps=eps, elementwise_affine=elementwise_affine,
                         device=device, dtype=dtype)
        if not bias:
            # torch 1.13's LayerNorm has no `bias` argument; drop the parameter by hand.
            self.bias = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


def rms_norm(x: torch.Tensor, weight: Optional[torch.Tensor] = None, eps: float = 1e-5):
    output = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        return output * weight
    return output


class RMSNorm(nn.Module):

    def __init__(self, normalized_shape, eps: float = 1e-5, weight: bool = True, dtype=None,
                 device=None, bias: bool = False):
        super().__init__()
        self.eps = eps
        if weight:
            self.weight = nn.Parameter(torch.ones(normalized_shape, dtype=dtype, device=device))
        else:
            self.register_parameter("weight", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


class LPRMSNorm(RMSNorm):
    """Low-precision RMSNorm; without autocast it computes exactly as RMSNorm."""


NORM_CLASS_REGISTRY = {
    "layernorm": LPLayerNorm,
    "low_precision_layernorm": LPLayerNorm,
    "rmsnorm": RMSNorm,
    "low_precision_rmsnorm": LPRMSNorm,
}


def build_norm(name: str, normalized_shape: int, eps: float, device=None, bias: bool = True):
    cls = NORM_CLASS_REGISTRY[name.lower()]
    return cls(normalized_shape, eps=eps, device=device, bias=bias)


# --------------------------------------------------------------------------------------------
# Attention (llmfoundry/models/layers/attention.py, torch implementation).


def gen_slopes(n_heads: int, alibi_bias_max: int = 8, device=None) -> torch.Tensor:
    """ALiBi slopes, as llm-foundry's gen_slopes; shape (1, H, 1, 1)."""
    _n_heads = 2 ** math.ceil(math.log2(n_heads))
    m = torch.arange(1, _n_heads + 1, dtype=torch.float32, device=device)
    m = m.mul(alibi_bias_max / _n_heads)
    slopes = 1.0 / torch.pow(2, m)
    if _n_heads != n_heads:
        slopes = torch.cat([slopes[1::2], slopes[::2]])[:n_heads]
    return slopes.view(1, n_heads, 1, 1)


def build_alibi_bias(slopes: torch.Tensor, seq_len) -> torch.Tensor:
    """Causal ALiBi bias (1, H, 1, S): slope_h * (j - (S - 1)) for key position j.

    `seq_len` is the traced sequence length, so the bias follows the graph's `seq` dimension.
    """
    alibi_bias = torch.arange(1 - seq_len, 1, dtype=torch.int32, device=slopes.device)
    alibi_bias = alibi_bias.view(1, 1, 1, seq_len)
    return alibi_bias * slopes


def repeat_kv(x: torch.Tensor, n_rep: int, out_shape) -> torch.Tensor:
    """(b, kv, a, c) -> `out_shape` = (b, kv * n_rep, a, c), kv head i feeding heads
    i * n_rep ... i * n_rep + n_rep - 1 (as llm-foundry's repeat_kv_for_gqa).

    Written as Unsqueeze + Concat + Reshape: torch's `expand` exports a ConstantOfShape/Equal/Where
    guard around Expand, and `repeat_interleave` a long Shape/Where chain.
    """
    if n_rep == 1:
        return x
    x = x.unsqueeze(2)
    return torch.cat([x] * n_rep, dim=2).reshape(out_shape)


def scaled_multihead_dot_product_attention(query, key, value, n_heads: int, kv_n_heads: int,
                                           head_dim: int, softmax_scale: float, attn_bias=None,
                                           dropout_p: float = 0.0, training: bool = False,
                                           sdpa: bool = False):
    # b and s are traced (symbolic `batch`, `seq`); head counts and head_dim are Python ints.
    b, s = query.size(0), query.size(1)
    q = query.view(b, s, n_heads, head_dim).transpose(1, 2)              # b h s d
    k = key.view(b, s, kv_n_heads, head_dim).permute(0, 2, 3, 1)         # b h d s
    v = value.view(b, s, kv_n_heads, head_dim).transpose(1, 2)           # b h s d
    n_rep = n_heads // kv_n_heads
    k = repeat_kv(k, n_rep, (b, n_heads, head_dim, s))
    v = repeat_kv(v, n_rep, (b, n_heads, s, head_dim))

    if sdpa:
        # attn_impl "sdpa" (torch >= 2.0 only): F.scaled_dot_product_attention with the ALiBi
        # bias and the causal mask as one additive attn_mask, as a torch 2.x user writes it.
        # Without a bias, is_causal=True: no mask at all (the fastest form torch has).
        mask = None
        if attn_bias is not None:
            pos = torch.arange(s, device=query.device)
            mask = attn_bias + torch.zeros(s, s, dtype=query.dtype, device=query.device).masked_fill(
                pos.unsqueeze(0) > pos.unsqueeze(1), torch.finfo(query.dtype).min)
        out = F.scaled_dot_product_attention(q, k.transpose(2, 3), v, attn_mask=mask,
                                             dropout_p=dropout_p if training else 0.0,
                                             is_causal=mask is None, scale=softmax_scale)
        return out.transpose(1, 2).reshape(b, s, n_heads * head_dim)
    attn_weight = q.matmul(k) * softmax_scale
    if attn_bias is not None:
        attn_weight = attn_weight + attn_bias
    min_val = torch.finfo(query.dtype).min
    pos = torch.arange(s, device=query.device)
    causal_mask = pos.unsqueeze(0) > pos.unsqueeze(1)                    # (s, s), True above diag
    attn_weight = attn_weight.masked_fill(causal_mask, min_val)
    attn_weight = torch.softmax(attn_weight, dim=-1)
    if dropout_p:
        attn_weight = F.dropout(attn_weight, p=dropout_p, training=training)
    out = attn_weight.matmul(v)                                          # b h s d
    return out.transpose(1, 2).reshape(b, s, n_heads * head_dim)


class GroupedQueryAttention(nn.Module):

    def __init__(self, d_model: int, n_heads: int, kv_n_heads: int,
                 clip_qkv: Optional[float] = None, qk_ln: bool = False,
                 softmax_scale: Optional[float] = None, attn_pdrop: float = 0.0,
                 norm_type: str = "low_precision_layernorm", norm_eps: float = 1e-5,
                 device=None, bias: bool = True, attn_impl: str = "torch"):
        super().__init__()
        self.attn_impl = attn_impl
        self.d_model = d_model
        self.n_heads = n_heads
        self.kv_n_heads = kv_n_heads
        self.clip_qkv = clip_qkv
        self.qk_ln = qk_ln
        self.head_dim = d_model // n_heads
        self.softmax_scale = softmax_scale or 1 / math.sqrt(self.d_model / self.n_heads)
        self.attn_dropout_p = attn_pdrop
        self.Wqkv = nn.Linear(d_model, d_model + 2 * kv_n_heads * self.head_dim, bias=bias,
                              device=device)
        if qk_ln:
            self.q_ln = build_norm(norm_type, d_model, norm_eps, device=device, bias=bias)
            self.k_ln = build_norm(norm_type, kv_n_heads * self.head_dim, norm_eps, device=device,
                                   bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias, device=device)
        self.out_proj._is_residual = True

    def forward(self, x: torch.Tensor, attn_bias: Optional[torch.Tensor] = None) -> torch.Tensor:
        qkv = self.Wqkv(x)
        if self.clip_qkv:
            qkv = qkv.clamp(min=-self.clip_qkv, max=self.clip_qkv)
        kv_dim = self.kv_n_heads * self.head_dim
        # llm-foundry calls qkv.split([d, kv, kv], dim=2). Its exported Split takes a `split`
        # Constant that torch 1.13 leaves without a scope, which breaks function extraction for
        # three or more blocks; three Slices carry their scope and compute the same values.
        query = qkv[:, :, :self.d_model]
        key = qkv[:, :, self.d_model:self.d_model + kv_dim]
        value = qkv[:, :, self.d_model + kv_dim:]
        if self.qk_ln:
            query = self.q_ln(query)
            key = self.k_ln(key)
        context = scaled_multihead_dot_product_attention(
            query, key, value, self.n_heads, self.kv_n_heads, self.head_dim, self.softmax_scale,
            attn_bias=attn_bias, dropout_p=self.attn_dropout_p, training=self.training,
            sdpa=self.attn_impl == "sdpa")
        return self.out_proj(context)


class MultiheadAttention(GroupedQueryAttention):

    def __init__(self, d_model: int, n_heads: int, **kwargs: Any):
        kwargs.pop("kv_n_heads", None)
        super().__init__(d_model, n_heads, kv_n_heads=n_heads, **kwargs)


class MultiQueryAttention(GroupedQueryAttention):

    def __init__(self, d_model: int, n_heads: int, **kwargs: Any):
        kwargs.pop("kv_n_heads", None)
        super().__init__(d_model, n_heads, kv_n_heads=1, **kwargs)


ATTN_CLASS_REGISTRY = {
    "grouped_query_attention": GroupedQueryAttention,
    "multihead_attention": MultiheadAttention,
    "multiquery_attention": MultiQueryAttention,
}

# --------------------------------------------------------------------------------------------
# FFN (llmfoundry/models/layers/ffn.py).


def _build_act(act_cfg: Dict[str, Any]):
    name = act_cfg.get("name", "gelu")
    if name == "gelu":
        approximate = act_cfg.get("approximate", "none")
        if approximate != "none":
            raise ValueError("only exact GELU is supported")
        return nn.GELU(approximate="none")
    if name == "silu":
        return nn.SiLU()
    raise ValueError(f"unsupported ffn_act_fn {name!r}")


class MPTMLP(nn.Module):

    def __init__(self, d_model: int, expansion_ratio: float, act_fn: nn.Module, device=None,
                 bias: bool = True):
        super().__init__()
        ffn_hidden_size = int(d_model * expansion_ratio)
        self.up_proj = nn.Linear(d_model, ffn_hidden_size, bias=bias, device=device)
        self.act = act_fn
        self.down_proj = nn.Linear(ffn_hidden_size, d_model, bias=bias, device=device)
        self.down_proj._is_residual = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.up_proj(x)))


class MPTGLU(MPTMLP):

    def __init__(self, d_model: int, expansion_ratio: float, act_fn: nn.Module, device=None,
                 bias: bool = True):
        super().__init__(d_model, expansion_ratio, act_fn, device=device, bias=bias)
        self.gate_proj = nn.Linear(d_model, self.up_proj.out_features, bias=bias, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


FFN_CLASS_REGISTRY = {"mptmlp": MPTMLP, "mptglu": MPTGLU}

# --------------------------------------------------------------------------------------------
# Block, model, causal LM (llmfoundry/models/layers/blocks.py, llmfoundry/models/mpt/).


class MPTBlock(nn.Module):

    def __init__(self, config: MPTConfig, device=None):
        super().__init__()
        ac = config.attn_config
        bias = not config.no_bias
        self.norm_1 = build_norm(config.norm_type, config.d_model, config.norm_eps, device, bias)
        attn_cls = ATTN_CLASS_REGISTRY[ac["attn_type"]]
        self.attn = attn_cls(d_model=config.d_model, n_heads=config.n_heads,
                             kv_n_heads=ac["kv_n_heads"], clip_qkv=ac["clip_qkv"],
                             qk_ln=ac["qk_ln"], softmax_scale=ac["softmax_scale"],
                             attn_pdrop=ac["attn_pdrop"], norm_type=config.norm_type,
                             norm_eps=config.norm_eps, device=device, bias=bias,
                             attn_impl=ac["attn_impl"])
        self.norm_2 = build_norm(config.norm_type, config.d_model, config.norm_eps, device, bias)
        ffn_cls = FFN_CLASS_REGISTRY[config.ffn_config["ffn_type"]]
        self.ffn = ffn_cls(config.d_model, config.expansion_ratio,
                           _build_act(config.ffn_config["ffn_act_fn"]), device=device, bias=bias)
        self.resid_attn_dropout = nn.Dropout(config.resid_pdrop)
        self.resid_ffn_dropout = nn.Dropout(config.resid_pdrop)

    def forward(self, x: torch.Tensor, attn_bias: Optional[torch.Tensor] = None) -> torch.Tensor:
        a = self.norm_1(x)
        b = self.attn(a, attn_bias=attn_bias)
        x = x + self.resid_attn_dropout(b)
        m = self.norm_2(x)
        n = self.ffn(m)
        return x + self.resid_ffn_dropout(n)


class SharedEmbedding(nn.Embedding):
    """Token embedding that doubles as the LM head (`unembed=True`), as llm-foundry's."""

    def forward(self, input: torch.Tensor, unembed: bool = False) -> torch.Tensor:
        if unembed:
            return F.linear(input, self.weight)
        return super().forward(input)


class MPTModel(nn.Module):

    def __init__(self, config: MPTConfig, device=None):
        super().__init__()
        self.config = config
        self.alibi = config.attn_config["alibi"]
        self.learned_pos_emb = config.learned_pos_emb
        self.wte = SharedEmbedding(config.vocab_size, config.d_model, device=device)
        if self.learned_pos_emb:
            self.wpe = nn.Embedding(config.max_seq_len, config.d_model, device=device)
        self.emb_drop = nn.Dropout(config.emb_pdrop)
        self.blocks = nn.ModuleList([MPTBlock(config, device) for _ in range(config.n_layers)])
        self.norm_f = build_norm(config.norm_type, config.d_model, config.norm_eps, device,
                                 not config.no_bias)
        if self.alibi:
            # H floats: a buffer (never a gradient), not an S x S or H x S table.
            # Always real (CPU) values, also when the rest is built on the meta device.
            self.register_buffer("alibi_slopes", gen_slopes(
                config.n_heads, config.attn_config["alibi_bias_max"]))

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        seq_len = input_ids.size(1)
        x = self.wte(input_ids)
        if self.learned_pos_emb:
            pos = torch.arange(seq_len, device=input_ids.device).unsqueeze(0)
            x = x + self.wpe(pos)
        x = self.emb_drop(x)
        attn_bias = build_alibi_bias(self.alibi_slopes, seq_len) if self.alibi else None
        for block in self.blocks:
            x = block(x, attn_bias=attn_bias)
        return self.norm_f(x)


class MPTForCausalLM(nn.Module):
    """forward(input_ids, labels) -> loss, or (loss, logits) when `output_logits` is set."""

    def __init__(self, config: MPTConfig, device=None):
        super().__init__()
        self.config = config
        self.transformer = MPTModel(config, device=device)
        if not config.tie_word_embeddings:
            self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False, device=device)
        self.output_logits = False

    def forward(self, input_ids: torch.Tensor, labels: Optional[torch.Tensor] = None):
        hidden = self.transformer(input_ids)
        if self.config.tie_word_embeddings:
            logits = self.transformer.wte(hidden, True)
        else:
            logits = self.lm_head(hidden)
        if labels is None:
            return logits
        loss = causal_lm_loss(logits, labels, self.config.vocab_size)
        if self.output_logits:
            return loss, logits
        return loss


def causal_lm_loss(logits: torch.Tensor, labels: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """llm-foundry's loss: labels shifted left by one, last position ignored, mean CE."""
    ignore = torch.full_like(labels[:, :1], -100)
    targets = torch.cat([labels[:, 1:], ignore], dim=1)
    return F.cross_entropy(logits.reshape(-1, vocab_size), targets.reshape(-1), ignore_index=-100)


# --------------------------------------------------------------------------------------------
# Registry: llm-foundry's activation-checkpointing names -> classes (a key matches subclasses,
# so `grouped_query_attention` covers MultiheadAttention and MultiQueryAttention).

MODULE_REGISTRY = {
    "mptblock": MPTBlock,
    "grouped_query_attention": GroupedQueryAttention,
    "multihead_attention": MultiheadAttention,
    "multiquery_attention": MultiQueryAttention,
    "mptmlp": MPTMLP,
    "mptglu": MPTGLU,
    "layernorm": LPLayerNorm,
    "low_precision_layernorm": LPLayerNorm,
    "rmsnorm": RMSNorm,
    "low_precision_rmsnorm": LPRMSNorm,
}

# Classes exported as ONNX functions in the `functions` annotation format.
FUNCTION_CLASSES = {MPTBlock, GroupedQueryAttention, MultiheadAttention, MultiQueryAttention,
                    MPTMLP, MPTGLU, LPLayerNorm, RMSNorm, LPRMSNorm}


def apply_activation_checkpointing(model: nn.Module, targets) -> int:
    """Wraps, in place, every module of `model` that is an instance of a MODULE_REGISTRY class
    named in `targets` (registry keys, e.g. ["grouped_query_attention", "mptmlp"]) in a
    non-reentrant checkpoint, as llm-foundry trains with `fsdp_config.activation_checkpointing`
    (Composer's FSDP setup, `activation_checkpointing_reentrant: false`): torch's
    `checkpoint_wrapper(module, checkpoint_impl=CheckpointImpl.NO_REENTRANT)` in place of each
    selected child, inner modules before outer ones, as torch's `apply_activation_checkpointing`
    (which Composer calls) does. That function itself is not used: it imports
    torch.distributed.fsdp, which Debian's torch 1.13 cannot import under Python 3.11.

    Off unless called; the export never calls it. The wrapped forward runs the same modules on the
    same inputs, so loss and gradients are unchanged (the backward re-runs each wrapped forward
    with the saved RNG state). Returns how many modules were wrapped.
    """
    # Private in torch 1.13 and 2.x alike, but the same path and signature in both.
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointImpl, checkpoint_wrapper)

    unknown = [t for t in targets if t.lower() not in MODULE_REGISTRY]
    if unknown:
        raise ValueError(f"unknown activation checkpointing targets {unknown} "
                         f"(known: {sorted(MODULE_REGISTRY)})")
    classes = tuple(MODULE_REGISTRY[t.lower()] for t in targets)

    def wrap_children(parent: nn.Module) -> int:
        wrapped = 0
        for name, child in list(parent.named_children()):
            wrapped += wrap_children(child)
            if isinstance(child, classes):
                setattr(parent, name,
                        checkpoint_wrapper(child, checkpoint_impl=CheckpointImpl.NO_REENTRANT))
                wrapped += 1
        return wrapped

    return wrap_children(model)


def build_model(config: Dict[str, Any], device=None) -> MPTForCausalLM:
    return MPTForCausalLM(MPTConfig.from_dict(config), device=device)

