"""Tiny GPT and BERT models for the model tests: two layers, four heads, width 32, so a forward
pass takes milliseconds on the CPU."""

from __future__ import annotations

import torch

from train.models.bert import BertConfig
from train.models.gpt import GPTConfig


def tiny_gpt_config(**fields) -> GPTConfig:
    """A tiny GPTConfig; `fields` (vocab_size at least) set or replace its defaults."""
    return GPTConfig(**{**dict(n_layer=2, n_head=4, n_embd=32, block_size=16), **fields})


def tiny_bert_config(**fields) -> BertConfig:
    """A tiny BertConfig without dropout; `fields` (vocab_size and max_position_embeddings at
    least) set or replace its defaults."""
    defaults = dict(n_layer=2, n_head=4, n_embd=32, intermediate_size=64, dropout=0.0)
    return BertConfig(**{**defaults, **fields})


def seeded_eval_model(model_class, config) -> torch.nn.Module:
    """`model_class(config)` in eval mode, initialised under seed 0: the same weights each call."""
    torch.manual_seed(0)
    return model_class(config).eval()


def random_tokens(vocab: int, batch: int = 3, seq_len: int = 16, seed: int = 1) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, seq_len), generator=generator)
