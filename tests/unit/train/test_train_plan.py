"""train.plan: Megatron-LM's parameter counts, and the activation formula against what autograd
really keeps for a small GPT on CPU (fp32, torch's scaled_dot_product_attention)."""

from __future__ import annotations

import pytest
import torch

from tests.measure import saved_activation_bytes
from train.models.gpt import GPT, GPTConfig
from train.models.presets import get_preset
from train.parallel import apply_activation_checkpointing
from train.plan import Layout, activation_bytes, plan


@pytest.mark.parametrize(
    "preset, billions",
    [("megatron-1.2b", 1.2), ("megatron-2.5b", 2.5), ("megatron-4.2b", 4.2),
     ("megatron-8.3b", 8.3)],
)  # fmt: skip
def test_megatron_configs_give_the_papers_parameter_counts(preset, billions):
    """Shoeybi et al. 2019, table 1 (vocabulary 51,200, 1,024 positions)."""
    params = plan(get_preset(preset).config, Layout()).params
    assert round(params / 1e9, 1) == billions


def measured_activation_bytes(config: GPTConfig, mode: str, batch: int) -> int:
    """What autograd saves for backward in one forward pass of a GPT (`saved_activation_bytes`)."""
    torch.manual_seed(0)
    model = GPT(config)
    apply_activation_checkpointing(model, mode)
    ids = torch.randint(0, config.vocab_size, (batch, config.block_size))
    return saved_activation_bytes(model, lambda: model(ids, ids))


@pytest.mark.parametrize("mode", ["none", "selective", "full"])
def test_activation_formula_agrees_with_the_measured_peak(mode):
    config = GPTConfig(vocab_size=128, n_layer=4, n_head=4, n_embd=256, block_size=256,
                       dropout=0.0)  # fmt: skip
    layout = Layout(seq_len=256, micro_batch=2, activation_bytes=4, activation_checkpointing=mode)
    predicted = activation_bytes(config, layout, recomputing=False)
    measured = measured_activation_bytes(config, mode, batch=2)
    assert abs(measured - predicted) / measured < 0.15, (mode, measured, predicted)


def test_sequence_parallel_and_checkpointing_shrink_activations():
    config = get_preset("megatron-8.3b").config
    base = Layout(tp=8, dp=64, seq_len=1024, micro_batch=8)
    tp_only = plan(config, base).activations
    with_sp = plan(config, Layout(**{**base.__dict__, "sequence_parallel": True})).activations
    full = plan(config, Layout(**{**base.__dict__, "activation_checkpointing": "full"}))
    assert with_sp < tp_only and full.activations < with_sp
    assert full.activations_without_checkpointing == tp_only
