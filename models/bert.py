"""BERT masked-LM (`BertForMaskedLM`) with Hugging Face's module and class names.

The third model family, and the first encoder: `bert.embeddings.{word,position,token_type}_
embeddings` + LayerNorm, `bert.encoder.layer.N.attention.{self.{query,key,value},output.dense}`,
`intermediate.dense` with erf GELU, `output.dense`, post-LayerNorms with eps 1e-12, and the MLM
head `cls.predictions.{transform,decoder}` whose decoder weight is tied to the word embeddings
and whose bias is the separate parameter `cls.predictions.bias` (as HF: `decoder.bias = bias`).
No pooler (BertForMaskedLM builds BertModel with add_pooling_layer=False).

Attention is bidirectional. As HF does when the caller passes no attention_mask, the model
builds a mask of ones from input_ids' shape and adds HF's extended mask
`(1 - mask[:, None, None, :]) * finfo.min` to the scores (-0.0 everywhere, an exact no-op, but
the export keeps the ops, as HF's eager attention path would); token_type_ids are zeros sliced from a
buffer and position_ids come from a buffer, so the graph's inputs stay input_ids and labels.
The loss is cross-entropy over every position (no shift); labels are -100 except at masked
positions (`make_inputs` below masks ~15% of each row with the [MASK] id).
"""

import math
from typing import Any, Dict, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

_DEFAULTS: Dict[str, Any] = {
    "vocab_size": 30522,
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "initializer_range": 0.02,
    "layer_norm_eps": 1e-12,
    "pad_token_id": 0,
    "position_embedding_type": "absolute",
    "tie_word_embeddings": True,
    # Not a BertConfig key: the id make_inputs writes at masked positions (bert-base-uncased's
    # tokenizer has [MASK] = 103; tiny configs name one inside their vocabulary).
    "mask_token_id": 103,
}

_IGNORED_KEYS = {"name", "family", "description", "foundry", "model_type", "architectures"}


class BertConfig:

    def __init__(self, **kwargs: Any):
        unknown = set(kwargs) - set(_DEFAULTS) - _IGNORED_KEYS
        if unknown:
            raise ValueError(f"BertConfig: unsupported keys {sorted(unknown)}")
        for key, value in _DEFAULTS.items():
            setattr(self, key, kwargs.get(key, value))
        if self.hidden_act != "gelu":
            raise ValueError("only hidden_act=gelu (erf GELU) is supported")
        if self.position_embedding_type != "absolute":
            raise ValueError("only position_embedding_type=absolute is supported")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError("hidden_size must be a multiple of num_attention_heads")
        if not 0 <= self.mask_token_id < self.vocab_size:
            raise ValueError(f"mask_token_id {self.mask_token_id} is outside the vocabulary")


class GELUActivation(nn.Module):
    """transformers.activations.GELUActivation: the exact (erf) GELU, ACT2FN["gelu"]."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return F.gelu(input)


class BertEmbeddings(nn.Module):

    def __init__(self, config: BertConfig, device=None):
        super().__init__()
        d = config.hidden_size
        self.word_embeddings = nn.Embedding(config.vocab_size, d, padding_idx=config.pad_token_id,
                                            device=device)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, d, device=device)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, d, device=device)
        self.LayerNorm = nn.LayerNorm(d, eps=config.layer_norm_eps, device=device)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        # Both persistent, so the export keeps them as named initializers (buffers): torch 1.13's
        # exporter takes only state-dict tensors as initializers and bakes non-persistent ones
        # into anonymous Constants. HF's position_ids was persistent too until 4.31;
        # token_type_ids never was (load a HF state dict with strict=False).
        positions = torch.arange(config.max_position_embeddings).expand((1, -1))
        self.register_buffer("position_ids", positions)
        self.register_buffer("token_type_ids", torch.zeros(positions.size(), dtype=torch.long))

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        batch_size, seq_length = input_ids.size(0), input_ids.size(1)
        position_ids = self.position_ids[:, 0:seq_length]
        token_type_ids = self.token_type_ids[:, :seq_length].expand(batch_size, seq_length)
        inputs_embeds = self.word_embeddings(input_ids)
        token_type_embeddings = self.token_type_embeddings(token_type_ids)
        embeddings = inputs_embeds + token_type_embeddings
        embeddings += self.position_embeddings(position_ids)
        embeddings = self.LayerNorm(embeddings)
        return self.dropout(embeddings)


class BertSelfAttention(nn.Module):

    def __init__(self, config: BertConfig, device=None):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.all_head_size = self.num_attention_heads * self.attention_head_size
        d = config.hidden_size
        self.query = nn.Linear(d, self.all_head_size, device=device)
        self.key = nn.Linear(d, self.all_head_size, device=device)
        self.value = nn.Linear(d, self.all_head_size, device=device)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)

    def transpose_for_scores(self, x: torch.Tensor) -> torch.Tensor:
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        return x.view(new_x_shape).permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask):
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        attention_scores = attention_scores + attention_mask
        attention_probs = F.softmax(attention_scores, dim=-1)
        attention_probs = self.dropout(attention_probs)
        context_layer = torch.matmul(attention_probs, value_layer)
        context_layer = context_layer.permute(0, 2, 1, 3).contiguous()
        new_context_layer_shape = context_layer.size()[:-2] + (self.all_head_size,)
        return context_layer.view(new_context_layer_shape)


class BertSelfOutput(nn.Module):

    def __init__(self, config: BertConfig, device=None):
        super().__init__()
        d = config.hidden_size
        self.dense = nn.Linear(d, d, device=device)
        self.LayerNorm = nn.LayerNorm(d, eps=config.layer_norm_eps, device=device)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states, input_tensor):
        hidden_states = self.dropout(self.dense(hidden_states))
        return self.LayerNorm(hidden_states + input_tensor)


class BertAttention(nn.Module):

    def __init__(self, config: BertConfig, device=None):
        super().__init__()
        self.self = BertSelfAttention(config, device=device)
        self.output = BertSelfOutput(config, device=device)

    def forward(self, hidden_states, attention_mask):
        return self.output(self.self(hidden_states, attention_mask), hidden_states)


class BertIntermediate(nn.Module):

    def __init__(self, config: BertConfig, device=None):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size, device=device)
        self.intermediate_act_fn = GELUActivation()

    def forward(self, hidden_states):
        return self.intermediate_act_fn(self.dense(hidden_states))


class BertOutput(nn.Module):

    def __init__(self, config: BertConfig, device=None):
        super().__init__()
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size, device=device)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps,
                                      device=device)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states, input_tensor):
        hidden_states = self.dropout(self.dense(hidden_states))
        return self.LayerNorm(hidden_states + input_tensor)


class BertLayer(nn.Module):

    def __init__(self, config: BertConfig, device=None):
        super().__init__()
        self.attention = BertAttention(config, device=device)
        self.intermediate = BertIntermediate(config, device=device)
        self.output = BertOutput(config, device=device)

    def forward(self, hidden_states, attention_mask):
        attention_output = self.attention(hidden_states, attention_mask)
        return self.output(self.intermediate(attention_output), attention_output)


class BertEncoder(nn.Module):

    def __init__(self, config: BertConfig, device=None):
        super().__init__()
        self.layer = nn.ModuleList(
            [BertLayer(config, device=device) for _ in range(config.num_hidden_layers)])

    def forward(self, hidden_states, attention_mask):
        for layer_module in self.layer:
            hidden_states = layer_module(hidden_states, attention_mask)
        return hidden_states


class BertModel(nn.Module):
    """BertModel(add_pooling_layer=False), the encoder BertForMaskedLM wraps."""

    def __init__(self, config: BertConfig, device=None):
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config, device=device)
        self.encoder = BertEncoder(config, device=device)

    def get_extended_attention_mask(self, attention_mask: torch.Tensor,
                                    dtype: torch.dtype) -> torch.Tensor:
        extended_attention_mask = attention_mask[:, None, None, :].to(dtype=dtype)
        return (1.0 - extended_attention_mask) * torch.finfo(dtype).min

    def forward(self, input_ids):
        batch_size, seq_length = input_ids.size(0), input_ids.size(1)
        attention_mask = torch.ones((batch_size, seq_length), device=input_ids.device)
        embedding_output = self.embeddings(input_ids)
        extended_attention_mask = self.get_extended_attention_mask(attention_mask,
                                                                   embedding_output.dtype)
        return self.encoder(embedding_output, extended_attention_mask)


class BertPredictionHeadTransform(nn.Module):

    def __init__(self, config: BertConfig, device=None):
        super().__init__()
        d = config.hidden_size
        self.dense = nn.Linear(d, d, device=device)
        self.transform_act_fn = GELUActivation()
        self.LayerNorm = nn.LayerNorm(d, eps=config.layer_norm_eps, device=device)

    def forward(self, hidden_states):
        return self.LayerNorm(self.transform_act_fn(self.dense(hidden_states)))


class BertLMPredictionHead(nn.Module):

    def __init__(self, config: BertConfig, device=None):
        super().__init__()
        self.transform = BertPredictionHeadTransform(config, device=device)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size, bias=False, device=device)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size, device=device))
        # As HF: the decoder's bias *is* cls.predictions.bias (one parameter, named by its
        # first path in named_parameters), so the bias is resized with the decoder.
        self.decoder.bias = self.bias

    def forward(self, hidden_states):
        return self.decoder(self.transform(hidden_states))


class BertOnlyMLMHead(nn.Module):

    def __init__(self, config: BertConfig, device=None):
        super().__init__()
        self.predictions = BertLMPredictionHead(config, device=device)

    def forward(self, sequence_output):
        return self.predictions(sequence_output)


class BertForMaskedLM(nn.Module):
    """forward(input_ids, labels) -> loss, or (loss, logits) when `output_logits` is set."""

    def __init__(self, config: BertConfig, device=None):
        super().__init__()
        self.config = config
        self.bert = BertModel(config, device=device)
        self.cls = BertOnlyMLMHead(config, device=device)
        if config.tie_word_embeddings:
            self.cls.predictions.decoder.weight = self.bert.embeddings.word_embeddings.weight
        self.output_logits = False

    def forward(self, input_ids, labels=None):
        prediction_scores = self.cls(self.bert(input_ids))
        if labels is None:
            return prediction_scores
        loss = F.cross_entropy(prediction_scores.view(-1, self.config.vocab_size),
                               labels.view(-1), ignore_index=-100)
        if self.output_logits:
            return loss, prediction_scores
        return loss


# Not nn.LayerNorm: it is one ONNX op anyway, and with it in the set torch 1.13's function
# extraction segfaulted in 3 of 60 bert_tiny exports (0 of 60 without).
FUNCTION_CLASSES = {BertLayer, BertAttention, BertSelfAttention, BertSelfOutput, BertIntermediate,
                    BertOutput}

MASK_FRACTION = 0.15
MIN_MASKED_PER_ROW = 3


def build_model(config: Dict[str, Any], device=None) -> BertForMaskedLM:
    return BertForMaskedLM(BertConfig(**config), device=device)


def make_inputs(config: Dict[str, Any], batch_size: int, seq_len: int,
                gen: torch.Generator) -> Tuple[torch.Tensor, torch.Tensor]:
    """Masked-LM inputs: random ids in [1, vocab) (0 is the padding id); about 15% of each row,
    at least MIN_MASKED_PER_ROW positions (all of a shorter row), replaced by the [MASK] id, with
    labels = the original id there and -100 elsewhere. The first row's last id is the padding id
    (unmasked), so the lookup would give word_embeddings' padding row a gradient that torch
    does not (foundry drops it through `foundry.padding_idx`)."""
    c = BertConfig(**config)
    ids = torch.randint(1, c.vocab_size, (batch_size, seq_len), generator=gen, dtype=torch.int64)
    ids[0, -1] = c.pad_token_id
    labels = torch.full_like(ids, -100)
    n_masked = min(seq_len, max(MIN_MASKED_PER_ROW, round(MASK_FRACTION * seq_len)))
    for row in range(batch_size):
        # The padding position stays visible (HF's collator never masks special tokens).
        candidates = seq_len - 1 if row == 0 and seq_len > n_masked else seq_len
        positions = torch.randperm(candidates, generator=gen)[:n_masked]
        labels[row, positions] = ids[row, positions]
        ids[row, positions] = c.mask_token_id
    return ids, labels
