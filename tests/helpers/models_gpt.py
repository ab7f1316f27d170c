"""What the unit and the integration tests of models_gpt share."""

from __future__ import annotations

import torch

from tests.model_fixtures import random_tokens, tiny_gpt_config
from train.models.gpt import GPTConfig

VOCAB = 97


def tiny_config(**overrides) -> GPTConfig:
    return tiny_gpt_config(**{"vocab_size": VOCAB, **overrides})


def tokens(batch: int = 3, seq_len: int = 16, seed: int = 1) -> torch.Tensor:
    return random_tokens(VOCAB, batch, seq_len, seed)
