"""Hugging Face's causal-LM loss as LlamaForCausalLM and GPTNeoXForCausalLM compute it."""

import torch
import torch.nn.functional as F


def shifted_lm_loss(logits: torch.Tensor, labels: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Mean cross-entropy of logits[:, :-1] against labels[:, 1:], ignoring label -100."""
    shift_logits = logits[:, :-1, :]
    shift_labels = labels[:, 1:]
    return F.cross_entropy(shift_logits.reshape(-1, vocab_size), shift_labels.reshape(-1),
                           ignore_index=-100)
