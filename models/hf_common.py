"""Pieces Hugging Face's Llama and GPT-NeoX share, written once: the shifted causal-LM loss and
the rotary-embedding tables and rotation."""

import torch
import torch.nn.functional as F


def shifted_lm_loss(logits: torch.Tensor, labels: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Mean cross-entropy of logits[:, :-1] against labels[:, 1:], ignoring label -100."""
    shift_logits = logits[:, :-1, :]
    shift_labels = labels[:, 1:]
    return F.cross_entropy(shift_logits.reshape(-1, vocab_size), shift_labels.reshape(-1),
                           ignore_index=-100)


def rope_tables(inv_freq: torch.Tensor, seq_len):
    """cos/sin tables (S, 2 * len(inv_freq)) computed in the graph from the traced S."""
    t = torch.arange(seq_len, device=inv_freq.device).to(inv_freq.dtype)
    freqs = t.unsqueeze(1) * inv_freq.unsqueeze(0)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x: torch.Tensor, half: int) -> torch.Tensor:
    x1 = x[..., :half]
    x2 = x[..., half:]
    return torch.cat([-x2, x1], dim=-1)
