"""GPT-NeoX / Pythia with Hugging Face's module and class names (`GPTNeoXForCausalLM`).

The third family: `gpt_neox.embed_in`, `gpt_neox.layers.N.{input_layernorm,
post_attention_layernorm, attention, mlp}`, `gpt_neox.final_layer_norm` and an untied
`embed_out`, so a Hugging Face state dict maps one-to-one onto `named_parameters()`. What it
exercises beyond MPT and Llama:
- one fused `attention.query_key_value` Linear (with bias) in Hugging Face's head-interleaved
  layout: its output is viewed as (b, s, heads, 3 * head_dim) and q, k, v are the three thirds of
  the last axis of every head (not three blocks of hidden_size, as MPT's Wqkv);
- partial rotary embeddings: only the first rotary_ndims = int(head_dim * rotary_pct) dims of q
  and k rotate (rotate_half style), the rest pass through and are concatenated back;
- the parallel residual x + attn(ln1(x)) + mlp(ln2(x)) (`use_parallel_residual`, Pythia's
  setting), or the sequential one;
- biases on every Linear, LayerNorm with bias, erf GELU, Dropout modules at p = 0 (inactive).

Differences from Hugging Face that do not change the numbers' meaning: the causal mask is built
from `arange` comparisons (Hugging Face keeps a max_positions^2 buffer), the rotary cos/sin tables
are computed in the graph from `inv_freq` and the traced sequence length (a cached 2048 x
rotary_ndims table would be an initializer above the fixtures' 64 KiB buffer limit), `inv_freq` is
a persistent buffer so the export keeps it as a named initializer, and attention scores are
`matmul(q, k^T) * head_dim^-0.5` where Hugging Face writes `baddbmm(zeros, q, k^T, alpha=...)`.
"""

from typing import Any, Dict

import torch
import torch.nn as nn
import torch.nn.functional as F

from models.hf_common import rope_tables, rotate_half, shifted_lm_loss

_DEFAULTS: Dict[str, Any] = {
    "vocab_size": 50432,
    "hidden_size": 6144,
    "num_hidden_layers": 44,
    "num_attention_heads": 64,
    "intermediate_size": 24576,
    "hidden_act": "gelu",
    "rotary_pct": 0.25,
    "rotary_emb_base": 10000,
    "attention_dropout": 0.0,
    "hidden_dropout": 0.0,
    "max_position_embeddings": 2048,
    "layer_norm_eps": 1e-5,
    "tie_word_embeddings": False,
    "use_parallel_residual": True,
    "attention_bias": True,
}

# Keys of a Hugging Face config.json that do not change the training graph.
_IGNORED_KEYS = {"name", "family", "description", "foundry", "model_type", "architectures",
                 "bos_token_id", "eos_token_id", "initializer_range", "torch_dtype",
                 "transformers_version", "use_cache", "classifier_dropout"}


class GPTNeoXConfig:

    def __init__(self, **kwargs: Any):
        unknown = set(kwargs) - set(_DEFAULTS) - _IGNORED_KEYS
        if unknown:
            raise ValueError(f"GPTNeoXConfig: unsupported keys {sorted(unknown)}")
        for key, value in _DEFAULTS.items():
            setattr(self, key, kwargs.get(key, value))
        if self.hidden_act != "gelu":
            raise ValueError("only hidden_act=gelu (erf GELU, Pythia's) is supported")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError("hidden_size must be a multiple of num_attention_heads")
        self.head_size = self.hidden_size // self.num_attention_heads
        self.rotary_ndims = int(self.head_size * self.rotary_pct)
        if self.rotary_ndims % 2:
            raise ValueError(f"rotary_ndims = int(head_size * rotary_pct) = {self.rotary_ndims} "
                             "must be even")


class GPTNeoXRotaryEmbedding(nn.Module):
    """cos/sin tables (S, rotary_ndims) computed in the graph from `inv_freq` and the traced S.

    `device` is accepted like every module's, but the buffer is always built on the CPU: it is
    small, and a no-weights (meta) export needs its real values."""

    def __init__(self, dim: int, max_position_embeddings: int = 2048, base: float = 10000,
                 device=None):
        super().__init__()
        self.dim = dim
        self.max_position_embeddings = max_position_embeddings
        self.base = base
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv_freq)

    def forward(self, seq_len):
        return rope_tables(self.inv_freq, seq_len)


class GPTNeoXAttention(nn.Module):

    def __init__(self, config: GPTNeoXConfig, device=None):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.hidden_size = config.hidden_size
        self.head_size = config.head_size
        self.rotary_ndims = config.rotary_ndims
        self.norm_factor = self.head_size ** -0.5
        self.rotary_emb = GPTNeoXRotaryEmbedding(self.rotary_ndims,
                                                 config.max_position_embeddings,
                                                 config.rotary_emb_base, device=device)
        d, b = config.hidden_size, config.attention_bias
        self.query_key_value = nn.Linear(d, 3 * d, bias=b, device=device)
        self.dense = nn.Linear(d, d, bias=b, device=device)
        self.attention_dropout = nn.Dropout(config.attention_dropout)

    def forward(self, hidden_states):
        bsz, q_len = hidden_states.size(0), hidden_states.size(1)
        h, hd, r = self.num_attention_heads, self.head_size, self.rotary_ndims
        # Hugging Face's layout: per head [q | k | v], each head_size wide.
        qkv = self.query_key_value(hidden_states).view(bsz, q_len, h, 3 * hd)
        query = qkv[..., :hd].permute(0, 2, 1, 3)
        key = qkv[..., hd:2 * hd].permute(0, 2, 1, 3)
        value = qkv[..., 2 * hd:].permute(0, 2, 1, 3)
        cos, sin = self.rotary_emb(q_len)
        query_rot, query_pass = query[..., :r], query[..., r:]
        key_rot, key_pass = key[..., :r], key[..., r:]
        query_rot = query_rot * cos + rotate_half(query_rot, r // 2) * sin
        key_rot = key_rot * cos + rotate_half(key_rot, r // 2) * sin
        query = torch.cat((query_rot, query_pass), dim=-1)
        key = torch.cat((key_rot, key_pass), dim=-1)
        scores = torch.matmul(query, key.transpose(2, 3)) * self.norm_factor
        pos = torch.arange(q_len, device=hidden_states.device)
        causal_mask = pos.unsqueeze(0) > pos.unsqueeze(1)
        scores = scores.masked_fill(causal_mask, torch.finfo(scores.dtype).min)
        probs = self.attention_dropout(torch.softmax(scores, dim=-1))
        out = torch.matmul(probs, value).permute(0, 2, 1, 3).reshape(bsz, q_len, h * hd)
        return self.dense(out)


class GELUActivation(nn.Module):
    """Hugging Face's ACT2FN["gelu"]: the exact (erf) GELU."""

    def forward(self, x):
        return F.gelu(x)


class GPTNeoXMLP(nn.Module):

    def __init__(self, config: GPTNeoXConfig, device=None):
        super().__init__()
        d, i = config.hidden_size, config.intermediate_size
        self.dense_h_to_4h = nn.Linear(d, i, device=device)
        self.dense_4h_to_h = nn.Linear(i, d, device=device)
        self.act = GELUActivation()

    def forward(self, hidden_states):
        return self.dense_4h_to_h(self.act(self.dense_h_to_4h(hidden_states)))


class GPTNeoXLayer(nn.Module):

    def __init__(self, config: GPTNeoXConfig, device=None):
        super().__init__()
        self.use_parallel_residual = config.use_parallel_residual
        d, eps = config.hidden_size, config.layer_norm_eps
        self.input_layernorm = nn.LayerNorm(d, eps=eps, device=device)
        self.post_attention_layernorm = nn.LayerNorm(d, eps=eps, device=device)
        self.post_attention_dropout = nn.Dropout(config.hidden_dropout)
        self.post_mlp_dropout = nn.Dropout(config.hidden_dropout)
        self.attention = GPTNeoXAttention(config, device=device)
        self.mlp = GPTNeoXMLP(config, device=device)

    def forward(self, hidden_states):
        attn_output = self.post_attention_dropout(
            self.attention(self.input_layernorm(hidden_states)))
        if self.use_parallel_residual:
            # x = x + attn(ln1(x)) + mlp(ln2(x)), summed in Hugging Face's order.
            mlp_output = self.post_mlp_dropout(
                self.mlp(self.post_attention_layernorm(hidden_states)))
            return mlp_output + attn_output + hidden_states
        attn_output = attn_output + hidden_states
        mlp_output = self.post_mlp_dropout(self.mlp(self.post_attention_layernorm(attn_output)))
        return mlp_output + attn_output


class GPTNeoXModel(nn.Module):

    def __init__(self, config: GPTNeoXConfig, device=None):
        super().__init__()
        self.embed_in = nn.Embedding(config.vocab_size, config.hidden_size, device=device)
        self.emb_dropout = nn.Dropout(config.hidden_dropout)
        self.layers = nn.ModuleList(
            [GPTNeoXLayer(config, device) for _ in range(config.num_hidden_layers)])
        self.final_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps,
                                             device=device)

    def forward(self, input_ids):
        hidden_states = self.emb_dropout(self.embed_in(input_ids))
        for layer in self.layers:
            hidden_states = layer(hidden_states)
        return self.final_layer_norm(hidden_states)


class GPTNeoXForCausalLM(nn.Module):
    """forward(input_ids, labels) -> loss, or (loss, logits) when `output_logits` is set."""

    def __init__(self, config: GPTNeoXConfig, device=None):
        super().__init__()
        self.config = config
        self.gpt_neox = GPTNeoXModel(config, device=device)
        self.embed_out = nn.Linear(config.hidden_size, config.vocab_size, bias=False,
                                   device=device)
        if config.tie_word_embeddings:
            self.embed_out.weight = self.gpt_neox.embed_in.weight
        self.output_logits = False

    def forward(self, input_ids, labels=None):
        logits = self.embed_out(self.gpt_neox(input_ids))
        if labels is None:
            return logits
        loss = shifted_lm_loss(logits, labels, self.config.vocab_size)
        if self.output_logits:
            return loss, logits
        return loss


FUNCTION_CLASSES = {GPTNeoXLayer, GPTNeoXAttention, GPTNeoXMLP, nn.LayerNorm}


def build_model(config: Dict[str, Any], device=None) -> GPTNeoXForCausalLM:
    return GPTNeoXForCausalLM(GPTNeoXConfig(**config), device=device)
