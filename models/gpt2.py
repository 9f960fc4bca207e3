"""GPT-2 as Hugging Face's `transformers` defines it (`models/gpt2/modeling_gpt2.py`).

Module paths and class names are Hugging Face's, so a `GPT2LMHeadModel` state dict maps 1:1:
`transformer.wte`, `transformer.wpe` (learned positions), `transformer.drop`,
`transformer.h.N.{ln_1, attn, ln_2, mlp}` (GPT2Block), `attn.{c_attn, c_proj, attn_dropout,
resid_dropout}` (GPT2Attention), `mlp.{c_fc, c_proj, act, dropout}` (GPT2MLP), `transformer.ln_f`
and `lm_head`, tied to `transformer.wte.weight` (one parameter, one initializer).

The forward is written the way Hugging Face writes it, because that is what a user's export
contains:
- Conv1D keeps its weight as [in, out] and computes `addmm(bias, x.view(-1, in), weight)`, which
  torch exports as `Gemm` between two Reshapes (no Transpose);
- q, k and v come from one `split` of c_attn's output (`Split`);
- scores are divided by `torch.full([], head_dim ** 0.5)`, then masked with
  `torch.where(causal_mask, scores, finfo.min)`, where causal_mask is a slice of the registered
  lower-triangular bool buffer `bias` [1, 1, n_positions, n_positions]. The buffer is persistent,
  as in transformers 4.x before 4.31 (and in the original checkpoints' state dicts), so exports
  keep it as the initializer `transformer.h.N.attn.bias`; transformers >= 4.31 registers it with
  persistent=False, which only drops it from `state_dict()`. The `masked_bias` buffer those
  versions also register is left out: nothing reads it, so no export would contain it;
- `gelu_new` is NewGELUActivation's tanh form, `0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 *
  x^3)))`, with `torch.pow(x, 3.0)`;
- every nn.Dropout is called, so a pdrop of 0.0 still exports as a ratio-0 Dropout node;
- the loss is Hugging Face's: logits[..., :-1, :] against labels[..., 1:], ignore_index -100.

Not modelled: the KV cache, attention masks and head masks, cross-attention,
`reorder_and_upcast_attn` (refused), activations other than gelu_new (refused).
"""

import math
from typing import Any, Dict

import torch
import torch.nn as nn
import torch.nn.functional as F

# GPT2Config's keys and defaults.
_DEFAULTS: Dict[str, Any] = {
    "vocab_size": 50257,
    "n_positions": 1024,
    "n_embd": 768,
    "n_layer": 12,
    "n_head": 12,
    "n_inner": None,
    "activation_function": "gelu_new",
    "resid_pdrop": 0.1,
    "embd_pdrop": 0.1,
    "attn_pdrop": 0.1,
    "layer_norm_epsilon": 1e-5,
    "initializer_range": 0.02,
    "scale_attn_weights": True,
    "scale_attn_by_inverse_layer_idx": False,
    "reorder_and_upcast_attn": False,
    "tie_word_embeddings": True,
}

# Keys a config may carry that do not change the training graph.
_IGNORED_KEYS = {"name", "family", "description", "foundry", "model_type", "use_cache",
                 "bos_token_id", "eos_token_id", "architectures"}


class GPT2Config:

    def __init__(self, **kwargs: Any):
        unknown = set(kwargs) - set(_DEFAULTS) - _IGNORED_KEYS
        if unknown:
            raise ValueError(f"GPT2Config: unsupported keys {sorted(unknown)}")
        for key, value in _DEFAULTS.items():
            setattr(self, key, kwargs.get(key, value))
        if self.activation_function != "gelu_new":
            raise ValueError("only activation_function=gelu_new is supported")
        if self.reorder_and_upcast_attn:
            raise ValueError("reorder_and_upcast_attn is not supported")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd {self.n_embd} is not a multiple of n_head {self.n_head}")
        # Hugging Face's attribute_map aliases.
        self.hidden_size = self.n_embd
        self.num_attention_heads = self.n_head
        self.num_hidden_layers = self.n_layer
        self.max_position_embeddings = self.n_positions


class Conv1D(nn.Module):
    """transformers.pytorch_utils.Conv1D: a Linear whose weight is stored transposed, [nx, nf]."""

    def __init__(self, nf: int, nx: int, device=None):
        super().__init__()
        self.nf = nf
        self.nx = nx
        self.weight = nn.Parameter(torch.empty(nx, nf, device=device))
        self.bias = nn.Parameter(torch.zeros(nf, device=device))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


class NewGELUActivation(nn.Module):
    """transformers.activations.NewGELUActivation (`gelu_new`), the tanh approximation."""

    def forward(self, input):
        return 0.5 * input * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) *
                                               (input + 0.044715 * torch.pow(input, 3.0))))


class GPT2Attention(nn.Module):

    def __init__(self, config: GPT2Config, layer_idx: int = 0, device=None):
        super().__init__()
        p = config.max_position_embeddings
        # Built on the CPU even for a meta model: a buffer keeps its real value in no-weights
        # exports (foundry_export.to_meta).
        self.register_buffer(
            "bias", torch.tril(torch.ones((p, p), dtype=torch.bool)).view(1, 1, p, p))
        self.embed_dim = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = self.embed_dim // self.num_heads
        self.split_size = self.embed_dim
        self.scale_attn_weights = config.scale_attn_weights
        self.scale_attn_by_inverse_layer_idx = config.scale_attn_by_inverse_layer_idx
        self.layer_idx = layer_idx
        self.c_attn = Conv1D(3 * self.embed_dim, self.embed_dim, device=device)
        self.c_proj = Conv1D(self.embed_dim, self.embed_dim, device=device)
        self.attn_dropout = nn.Dropout(config.attn_pdrop)
        self.resid_dropout = nn.Dropout(config.resid_pdrop)

    def _attn(self, query, key, value):
        attn_weights = torch.matmul(query, key.transpose(-1, -2))
        if self.scale_attn_weights:
            attn_weights = attn_weights / torch.full(
                [], value.size(-1) ** 0.5, dtype=attn_weights.dtype, device=attn_weights.device)
        if self.scale_attn_by_inverse_layer_idx:
            attn_weights = attn_weights / float(self.layer_idx + 1)
        query_length, key_length = query.size(-2), key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length:key_length, :key_length]
        mask_value = torch.finfo(attn_weights.dtype).min
        mask_value = torch.full([], mask_value, dtype=attn_weights.dtype).to(attn_weights.device)
        attn_weights = torch.where(causal_mask, attn_weights.to(attn_weights.dtype), mask_value)
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        attn_weights = attn_weights.type(value.dtype)
        attn_weights = self.attn_dropout(attn_weights)
        return torch.matmul(attn_weights, value)

    def _split_heads(self, tensor, num_heads, attn_head_size):
        new_shape = tensor.size()[:-1] + (num_heads, attn_head_size)
        return tensor.view(new_shape).permute(0, 2, 1, 3)  # (batch, head, seq, head_dim)

    def _merge_heads(self, tensor, num_heads, attn_head_size):
        tensor = tensor.permute(0, 2, 1, 3).contiguous()
        new_shape = tensor.size()[:-2] + (num_heads * attn_head_size,)
        return tensor.view(new_shape)

    def forward(self, hidden_states):
        query, key, value = self.c_attn(hidden_states).split(self.split_size, dim=2)
        query = self._split_heads(query, self.num_heads, self.head_dim)
        key = self._split_heads(key, self.num_heads, self.head_dim)
        value = self._split_heads(value, self.num_heads, self.head_dim)
        attn_output = self._attn(query, key, value)
        attn_output = self._merge_heads(attn_output, self.num_heads, self.head_dim)
        attn_output = self.c_proj(attn_output)
        return self.resid_dropout(attn_output)


class GPT2MLP(nn.Module):

    def __init__(self, intermediate_size: int, config: GPT2Config, device=None):
        super().__init__()
        embed_dim = config.hidden_size
        self.c_fc = Conv1D(intermediate_size, embed_dim, device=device)
        self.c_proj = Conv1D(embed_dim, intermediate_size, device=device)
        self.act = NewGELUActivation()
        self.dropout = nn.Dropout(config.resid_pdrop)

    def forward(self, hidden_states):
        hidden_states = self.c_fc(hidden_states)
        hidden_states = self.act(hidden_states)
        hidden_states = self.c_proj(hidden_states)
        return self.dropout(hidden_states)


class GPT2Block(nn.Module):

    def __init__(self, config: GPT2Config, layer_idx: int = 0, device=None):
        super().__init__()
        hidden_size = config.hidden_size
        inner_dim = config.n_inner if config.n_inner is not None else 4 * hidden_size
        eps = config.layer_norm_epsilon
        self.ln_1 = nn.LayerNorm(hidden_size, eps=eps, device=device)
        self.attn = GPT2Attention(config, layer_idx=layer_idx, device=device)
        self.ln_2 = nn.LayerNorm(hidden_size, eps=eps, device=device)
        self.mlp = GPT2MLP(inner_dim, config, device=device)

    def forward(self, hidden_states):
        residual = hidden_states
        attn_output = self.attn(self.ln_1(hidden_states))
        hidden_states = attn_output + residual
        residual = hidden_states
        feed_forward_hidden_states = self.mlp(self.ln_2(hidden_states))
        return residual + feed_forward_hidden_states


class GPT2Model(nn.Module):

    def __init__(self, config: GPT2Config, device=None):
        super().__init__()
        self.embed_dim = config.hidden_size
        self.wte = nn.Embedding(config.vocab_size, self.embed_dim, device=device)
        self.wpe = nn.Embedding(config.max_position_embeddings, self.embed_dim, device=device)
        self.drop = nn.Dropout(config.embd_pdrop)
        self.h = nn.ModuleList([GPT2Block(config, layer_idx=i, device=device)
                                for i in range(config.num_hidden_layers)])
        self.ln_f = nn.LayerNorm(self.embed_dim, eps=config.layer_norm_epsilon, device=device)

    def forward(self, input_ids):
        input_shape = input_ids.size()
        input_ids = input_ids.view(-1, input_shape[-1])
        position_ids = torch.arange(0, input_shape[-1], dtype=torch.long,
                                    device=input_ids.device)
        position_ids = position_ids.unsqueeze(0).view(-1, input_shape[-1])
        inputs_embeds = self.wte(input_ids)
        position_embeds = self.wpe(position_ids)
        hidden_states = inputs_embeds + position_embeds
        hidden_states = self.drop(hidden_states)
        output_shape = input_shape + (hidden_states.size(-1),)
        for block in self.h:
            hidden_states = block(hidden_states)
        hidden_states = self.ln_f(hidden_states)
        return hidden_states.view(output_shape)


class GPT2LMHeadModel(nn.Module):
    """forward(input_ids, labels) -> loss, or (loss, logits) when `output_logits` is set."""

    def __init__(self, config: GPT2Config, device=None):
        super().__init__()
        self.config = config
        self.transformer = GPT2Model(config, device=device)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False, device=device)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.transformer.wte.weight
        self.output_logits = False

    def forward(self, input_ids, labels=None):
        lm_logits = self.lm_head(self.transformer(input_ids))
        if labels is None:
            return lm_logits
        shift_logits = lm_logits[..., :-1, :].contiguous()
        shift_labels = labels[..., 1:].contiguous()
        loss = F.cross_entropy(shift_logits.view(-1, shift_logits.size(-1)),
                               shift_labels.view(-1), ignore_index=-100)
        if self.output_logits:
            return loss, lm_logits
        return loss


FUNCTION_CLASSES = {GPT2Block, GPT2Attention, GPT2MLP, nn.LayerNorm}


def build_model(config: Dict[str, Any], device=None) -> GPT2LMHeadModel:
    return GPT2LMHeadModel(GPT2Config(**config), device=device)
