"""A small Llama-style decoder with Hugging Face's module and class names.

It is the second model family that proves `foundry_export.export_with_annotations` is generic:
`model.layers.N.self_attn.{q,k,v,o}_proj` (LlamaAttention), `model.layers.N.mlp.{gate,up,down}_proj`
(LlamaMLP, SwiGLU), LlamaRMSNorm, rotary embeddings computed in the graph from an `inv_freq`
buffer and the runtime sequence length, grouped-query attention, an untied `lm_head` and
Hugging Face's loss (logits[:, :-1] against labels[:, 1:]).

As in models/mpt.py the causal mask is built from `arange` comparisons (no Trilu, nothing S x S
stored) and k/v heads are repeated with Unsqueeze + Concat + Reshape.

Two Gemma-2 attention options, with Hugging Face Gemma2Config's key names, make the
sliding-window variant (`llama_tiny_window`); a config without them exports exactly as before:
- `sliding_window` W and `layer_types` (one "sliding_attention" or "full_attention" per layer;
  default all full): on a sliding layer query i sees keys j with j <= i and i - j < W, the causal
  mask OR-ed with a second arange comparison;
- `attn_logit_softcapping` c: scores = c * tanh(scores / c) after the scaling, before the mask.
"""

from typing import Any, Dict

import torch
import torch.nn as nn

from models.hf_common import rope_tables, rotate_half, shifted_lm_loss

_DEFAULTS: Dict[str, Any] = {
    "vocab_size": 32000,
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": None,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "attention_bias": False,
    "mlp_bias": False,
    "tie_word_embeddings": False,
    "hidden_act": "silu",
    # Gemma-2's attention options (Gemma2Config's names); None leaves the graph as plain Llama's.
    "sliding_window": None,
    "layer_types": None,
    "attn_logit_softcapping": None,
}

_LAYER_TYPES = ("sliding_attention", "full_attention")

_IGNORED_KEYS = {"name", "family", "description", "foundry", "model_type"}


class LlamaConfig:

    def __init__(self, **kwargs: Any):
        unknown = set(kwargs) - set(_DEFAULTS) - _IGNORED_KEYS
        if unknown:
            raise ValueError(f"LlamaConfig: unsupported keys {sorted(unknown)}")
        for key, value in _DEFAULTS.items():
            setattr(self, key, kwargs.get(key, value))
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        if self.hidden_act != "silu":
            raise ValueError("only hidden_act=silu is supported")
        self.head_dim = self.hidden_size // self.num_attention_heads
        if self.layer_types is None:
            self.layer_types = ["full_attention"] * self.num_hidden_layers
        if len(self.layer_types) != self.num_hidden_layers or \
                any(t not in _LAYER_TYPES for t in self.layer_types):
            raise ValueError(f"layer_types: one of {list(_LAYER_TYPES)} per layer "
                             f"({self.num_hidden_layers}), got {self.layer_types}")
        if "sliding_attention" in self.layer_types and not self.sliding_window:
            raise ValueError("layer_types names sliding_attention layers but sliding_window "
                             "is not set")


class LlamaRMSNorm(nn.Module):

    def __init__(self, hidden_size: int, eps: float = 1e-6, device=None):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size, device=device))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states


class LlamaRotaryEmbedding(nn.Module):
    """cos/sin tables (S, head_dim) computed in the graph from `inv_freq` and the traced S."""

    def __init__(self, head_dim: int, base: float):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        # Persistent, so the export keeps it as a named initializer (a buffer, never a gradient).
        self.register_buffer("inv_freq", inv_freq)

    def forward(self, seq_len):
        return rope_tables(self.inv_freq, seq_len)


def repeat_kv(x: torch.Tensor, n_rep: int, out_shape) -> torch.Tensor:
    """(b, kv, s, d) -> (b, kv * n_rep, s, d), as Hugging Face's repeat_kv."""
    if n_rep == 1:
        return x
    return torch.cat([x.unsqueeze(2)] * n_rep, dim=2).reshape(out_shape)


class LlamaAttention(nn.Module):

    def __init__(self, config: LlamaConfig, layer_idx: int = 0, device=None):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.num_key_value_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        self.scaling = self.head_dim ** -0.5
        sliding = config.layer_types[layer_idx] == "sliding_attention"
        self.sliding_window = config.sliding_window if sliding else None
        self.attn_logit_softcapping = config.attn_logit_softcapping
        d, hd = config.hidden_size, self.head_dim
        b = config.attention_bias
        self.q_proj = nn.Linear(d, self.num_heads * hd, bias=b, device=device)
        self.k_proj = nn.Linear(d, self.num_key_value_heads * hd, bias=b, device=device)
        self.v_proj = nn.Linear(d, self.num_key_value_heads * hd, bias=b, device=device)
        self.o_proj = nn.Linear(self.num_heads * hd, d, bias=b, device=device)

    def forward(self, hidden_states, cos, sin):
        bsz, q_len = hidden_states.size(0), hidden_states.size(1)
        h, kv, hd = self.num_heads, self.num_key_value_heads, self.head_dim
        q = self.q_proj(hidden_states).view(bsz, q_len, h, hd).transpose(1, 2)
        k = self.k_proj(hidden_states).view(bsz, q_len, kv, hd).transpose(1, 2)
        v = self.v_proj(hidden_states).view(bsz, q_len, kv, hd).transpose(1, 2)
        q = q * cos + rotate_half(q, hd // 2) * sin
        k = k * cos + rotate_half(k, hd // 2) * sin
        k = repeat_kv(k, h // kv, (bsz, h, q_len, hd))
        v = repeat_kv(v, h // kv, (bsz, h, q_len, hd))
        scores = torch.matmul(q, k.transpose(2, 3)) * self.scaling
        if self.attn_logit_softcapping is not None:
            c = self.attn_logit_softcapping
            scores = scores / c
            scores = torch.tanh(scores)
            scores = scores * c
        pos = torch.arange(q_len, device=hidden_states.device)
        mask = pos.unsqueeze(0) > pos.unsqueeze(1)  # row i is the query, column j the key
        if self.sliding_window is not None:
            mask = mask | (pos.unsqueeze(1) - pos.unsqueeze(0) >= self.sliding_window)
        scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)
        probs = torch.softmax(scores, dim=-1)
        out = torch.matmul(probs, v).transpose(1, 2).reshape(bsz, q_len, h * hd)
        return self.o_proj(out)


class LlamaMLP(nn.Module):

    def __init__(self, config: LlamaConfig, device=None):
        super().__init__()
        d, i, b = config.hidden_size, config.intermediate_size, config.mlp_bias
        self.gate_proj = nn.Linear(d, i, bias=b, device=device)
        self.up_proj = nn.Linear(d, i, bias=b, device=device)
        self.down_proj = nn.Linear(i, d, bias=b, device=device)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):

    def __init__(self, config: LlamaConfig, layer_idx: int = 0, device=None):
        super().__init__()
        self.self_attn = LlamaAttention(config, layer_idx, device=device)
        self.mlp = LlamaMLP(config, device=device)
        self.input_layernorm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps, device)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps,
                                                     device)

    def forward(self, hidden_states, cos, sin):
        residual = hidden_states
        hidden_states = self.self_attn(self.input_layernorm(hidden_states), cos, sin)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.mlp(self.post_attention_layernorm(hidden_states))
        return residual + hidden_states


class LlamaModel(nn.Module):

    def __init__(self, config: LlamaConfig, device=None):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, device=device)
        self.layers = nn.ModuleList(
            [LlamaDecoderLayer(config, i, device) for i in range(config.num_hidden_layers)])
        self.norm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps, device)
        self.rotary_emb = LlamaRotaryEmbedding(config.head_dim, config.rope_theta)

    def forward(self, input_ids):
        hidden_states = self.embed_tokens(input_ids)
        cos, sin = self.rotary_emb(input_ids.size(1))
        for layer in self.layers:
            hidden_states = layer(hidden_states, cos, sin)
        return self.norm(hidden_states)


class LlamaForCausalLM(nn.Module):
    """forward(input_ids, labels) -> loss, or (loss, logits) when `output_logits` is set."""

    def __init__(self, config: LlamaConfig, device=None):
        super().__init__()
        self.config = config
        self.model = LlamaModel(config, device=device)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False, device=device)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.output_logits = False

    def forward(self, input_ids, labels=None):
        logits = self.lm_head(self.model(input_ids))
        if labels is None:
            return logits
        loss = shifted_lm_loss(logits, labels, self.config.vocab_size)
        if self.output_logits:
            return loss, logits
        return loss


FUNCTION_CLASSES = {LlamaDecoderLayer, LlamaAttention, LlamaMLP, LlamaRMSNorm}


def build_model(config: Dict[str, Any], device=None) -> LlamaForCausalLM:
    return LlamaForCausalLM(LlamaConfig(**config), device=device)
