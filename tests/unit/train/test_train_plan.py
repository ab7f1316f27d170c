"""train.plan: Megatron-LM's parameter counts, and the activation formula against what autograd
really keeps for a small GPT on CPU (fp32, torch's scaled_dot_product_attention)."""

from __future__ import annotations

import pytest
import torch

from tests.measure import saved_activation_bytes
from train.models.gpt import GPT, GPTConfig
from train.models.presets import get_preset
from train.parallel import apply_activation_checkpointing
from train.plan import GPUS, Layout, activation_bytes, main, plan, suggest_micro_batch


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


def test_cli_reports_fit_and_time(capsys):
    argv = ["--preset", "megatron-8.3b", "--tp", "8", "--dp", "64", "--seq-len", "1024",
            "--micro-batch", "8", "--gpu", "h100-80gb"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "8.317B parameters" in out and "h100-80gb: fits" in out and "time for" in out
    assert main([*argv[:-2], "--micro-batch", "64", "--gpu", "v100-32gb"]) == 0
    assert "v100-32gb: does NOT fit" in capsys.readouterr().out
    assert main(["--preset", "no-such-preset"]) == 1


def test_suggested_micro_batch_is_the_largest_power_of_two_that_fits(capsys):
    config = get_preset("gpt2-124m").config
    layout = Layout(seq_len=1024)
    for gpu in ("a100-40gb", "h100-80gb", "h200-141gb"):
        micro = suggest_micro_batch(config, layout, gpu)
        fits = plan(config, Layout(seq_len=1024, micro_batch=micro)).total
        too_many = plan(config, Layout(seq_len=1024, micro_batch=2 * micro)).total
        memory = GPUS[gpu][0]
        assert micro & (micro - 1) == 0 and fits <= 0.9 * memory < too_many, gpu
    assert suggest_micro_batch(config, layout, "h200-141gb", largest=64) == 64
    # a layout that shards the model fits more sequences than one GPU holding it whole
    big = get_preset("gpt2-1.5b").config
    alone = suggest_micro_batch(big, layout, "a100-40gb")
    sharded = suggest_micro_batch(big, Layout(seq_len=1024, tp=2, dp=4), "a100-40gb")
    assert sharded > alone
    argv = ["--preset", "gpt2-355m", "--gpu", "h200-141gb", "--suggest-micro-batch"]
    assert main(argv) == 0
    assert capsys.readouterr().out.strip() == str(suggest_micro_batch(
        get_preset("gpt2-355m").config, layout, "h200-141gb"))  # fmt: skip
    assert main(argv[:-3] + ["--suggest-micro-batch"]) == 1  # needs --gpu


def test_shape_flags_resize_the_preset_in_the_plan(capsys):
    """gpt2-124m grown by flags to GPT-2 medium's shape plans as the gpt2-355m preset does."""
    assert main(["--preset", "gpt2-355m"]) == 0
    medium = capsys.readouterr().out.splitlines()
    flags = ["--num-layers", "24", "--hidden-size", "1024", "--num-attention-heads", "16"]
    assert main(["--preset", "gpt2-124m", *flags]) == 0
    resized = capsys.readouterr().out.splitlines()
    assert resized[0] == medium[0].replace("gpt2-355m", f"gpt2-124m with {' '.join(flags)}")
    assert resized[1:] == medium[1:]  # memory and time follow the shape
    assert main(["--preset", "gpt2-124m", "--ffn-hidden-size", "4096"]) == 1
    assert "--ffn-hidden-size: the gpt family has an MLP of 4 x --hidden-size" in (
        capsys.readouterr().err
    )
