"""What the unit and the integration tests of hf_folder_trust share."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")


def gpt2(directory, vocab: int = 128):
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=vocab, n_layer=2, n_head=2, n_embd=32,
                                     n_positions=64)  # fmt: skip
    transformers.GPT2LMHeadModel(config).save_pretrained(directory)
    return directory


def tensors_of(directory) -> dict:
    return safetensors_torch.load_file(str(directory / "model.safetensors"))


def resave(directory, tensors: dict) -> None:
    safetensors_torch.save_file(tensors, str(directory / "model.safetensors"),
                                metadata={"format": "pt"})  # fmt: skip
