"""GPT model: shapes, causality, loss semantics, tying, init, TP-style head sharding, FLOPs."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from tests.helpers.models_gpt import VOCAB, tiny_config, tokens
from tests.model_fixtures import seeded_eval_model
from train.models.gpt import GPT, GPTConfig, count_params, flops_per_token
from train.models.layers import masked_cross_entropy


@pytest.fixture
def model() -> GPT:
    return seeded_eval_model(GPT, tiny_config())


def manual_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-position -log p(target), written out with log_softmax + gather."""
    log_probs = torch.log_softmax(logits.double(), dim=-1)
    return -log_probs.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)


def test_logits_shape_and_no_loss_without_targets(model: GPT) -> None:
    logits, loss = model(tokens(3, 10))
    assert logits.shape == (3, 10, VOCAB)
    assert loss is None


def test_future_tokens_do_not_change_past_logits(model: GPT) -> None:
    x = tokens(2, 16)
    changed = x.clone()
    changed[:, 9] = (changed[:, 9] + 1) % VOCAB
    before, _ = model(x)
    after, _ = model(changed)
    torch.testing.assert_close(after[:, :9], before[:, :9], rtol=0, atol=1e-6)
    assert not torch.allclose(after[:, 9:], before[:, 9:], atol=1e-4)


def test_lm_head_is_tied_to_token_embedding(model: GPT) -> None:
    assert model.lm_head.weight is model.wte.weight
    sd = model.state_dict()
    assert sd["lm_head.weight"].data_ptr() == sd["wte.weight"].data_ptr()
    x = tokens(2, 8)
    _, loss = model(x, x)
    loss.backward()
    # a single gradient holds both uses: rows of tokens never input still get LM-head gradient
    unused = sorted(set(range(VOCAB)) - set(x.flatten().tolist()))
    assert model.wte.weight.grad[unused].abs().sum() > 0


def test_loss_equals_manual_cross_entropy(model: GPT) -> None:
    x, y = tokens(3, 12, seed=2), tokens(3, 12, seed=3)
    logits, loss = model(x, y)
    expected = manual_cross_entropy(logits, y).mean()
    torch.testing.assert_close(loss.double(), expected, rtol=1e-6, atol=1e-6)


def test_loss_mask_restricts_the_mean(model: GPT) -> None:
    x, y = tokens(2, 12, seed=4), tokens(2, 12, seed=5)
    loss_mask = torch.zeros(2, 12)
    loss_mask[0, 3:7] = 1
    loss_mask[1, 10:] = 1
    logits, loss = model(x, y, loss_mask)
    per_position = manual_cross_entropy(logits, y)
    expected = per_position[loss_mask.bool()].mean()
    torch.testing.assert_close(loss.double(), expected, rtol=1e-6, atol=1e-6)
    # targets outside the mask do not matter
    other_targets = torch.where(loss_mask.bool(), y, (y + 7) % VOCAB)
    _, loss_other = model(x, other_targets, loss_mask)
    assert loss_other.item() == pytest.approx(loss.item(), abs=1e-6)


def test_ignored_targets_match_an_equivalent_loss_mask(model: GPT) -> None:
    x, y = tokens(2, 12, seed=6), tokens(2, 12, seed=7)
    keep = torch.rand(2, 12, generator=torch.Generator().manual_seed(8)) > 0.4
    _, loss_ignored = model(x, torch.where(keep, y, -100))
    _, loss_masked = model(x, y, keep.float())
    assert loss_ignored.item() == pytest.approx(loss_masked.item(), abs=1e-6)
    # -100 and loss_mask combine: a position counts only if both allow it
    half = torch.zeros(2, 12)
    half[:, :6] = 1
    logits, loss_both = model(x, torch.where(keep, y, -100), half)
    counted = keep & half.bool()
    expected = manual_cross_entropy(logits, y)[counted].mean()
    torch.testing.assert_close(loss_both.double(), expected, rtol=1e-6, atol=1e-6)


def test_nothing_to_predict_gives_zero_loss_and_zero_gradient(model: GPT) -> None:
    x = tokens(2, 8)
    _, loss = model(x, x, torch.zeros(2, 8))
    assert loss.item() == 0.0
    loss.backward()
    assert all(p.grad is None or p.grad.abs().sum() == 0 for p in model.parameters())


def test_sequence_longer_than_block_size_is_a_clear_error(model: GPT) -> None:
    with pytest.raises(ValueError, match=r"sequence length 17 .*block_size 16"):
        model(tokens(1, 17))


def test_bad_shapes_and_arguments_are_errors(model: GPT) -> None:
    x = tokens(2, 8)
    with pytest.raises(ValueError, match="targets shape"):
        model(x, x[:, :7])
    with pytest.raises(ValueError, match="loss_mask shape"):
        model(x, x, torch.ones(2, 7))
    with pytest.raises(ValueError, match="without targets"):
        model(x, loss_mask=torch.ones(2, 8))
    with pytest.raises(ValueError, match="divisible by n_head"):
        GPTConfig(n_embd=30, n_head=4)
    with pytest.raises(ValueError, match="vocab_size"):
        GPTConfig(vocab_size=0)


def test_dropout_is_active_only_in_training_mode() -> None:
    torch.manual_seed(0)
    model = GPT(tiny_config(dropout=0.2))
    x = tokens(2, 8)
    model.train()
    first, _ = model(x)
    second, _ = model(x)
    assert not torch.allclose(first, second)
    model.eval()
    torch.testing.assert_close(model(x)[0], model(x)[0], rtol=0, atol=0)


def test_gpt2_initialisation_scales_residual_projections() -> None:
    torch.manual_seed(0)
    config = tiny_config(n_layer=8, n_head=4, n_embd=256, vocab_size=512, init_std=0.02)
    model = GPT(config)
    residual_std = 0.02 / math.sqrt(2 * 8)
    for block in model.blocks:
        for linear in (block.attn.out_proj, block.mlp.fc_out):
            assert linear.weight.std().item() == pytest.approx(residual_std, rel=0.05)
            assert torch.count_nonzero(linear.bias) == 0
        for linear in (block.attn.q_proj, block.mlp.fc_in):
            assert linear.weight.std().item() == pytest.approx(0.02, rel=0.05)
        assert torch.equal(block.ln_1.weight, torch.ones(256))
    assert model.wte.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert model.wpe.weight.std().item() == pytest.approx(0.02, rel=0.05)


def test_meta_device_build_then_init_weights() -> None:
    """The torchtitan flow: build on meta, (shard,) allocate with to_empty, then initialise."""
    with torch.device("meta"):
        model = GPT(tiny_config())
    assert model.wte.weight.is_meta
    model.to_empty(device="cpu")
    torch.manual_seed(0)
    model.init_weights()
    assert model.lm_head.weight is model.wte.weight
    assert all(torch.isfinite(p).all() for p in model.parameters())
    reference = GPT(tiny_config())
    torch.manual_seed(0)
    reference.init_weights()  # same draws in the same order as the meta-built model
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0, msg=name)


def test_no_bias_variant_has_no_bias_parameters() -> None:
    model = GPT(tiny_config(bias=False))
    assert not [name for name, _ in model.named_parameters() if name.endswith("bias")]
    x = tokens(2, 8)
    _, loss = model(x, x)
    assert torch.isfinite(loss)


def _shard_rows(linear: torch.nn.Linear, rows: slice) -> torch.nn.Linear:
    """What ColwiseParallel leaves on one rank: a slice of output features. Like TP, it keeps
    the module's global in/out_features attributes, so code must not size heads from them."""
    shard = copy.deepcopy(linear)
    shard.weight = torch.nn.Parameter(linear.weight.detach()[rows].clone())
    shard.bias = torch.nn.Parameter(linear.bias.detach()[rows].clone())
    return shard


def _shard_cols(linear: torch.nn.Linear, cols: slice, keep_bias: bool) -> torch.nn.Linear:
    """What RowwiseParallel leaves on one rank: a slice of input features (bias added once)."""
    shard = copy.deepcopy(linear)
    shard.weight = torch.nn.Parameter(linear.weight.detach()[:, cols].clone())
    if not keep_bias:
        shard.bias = torch.nn.Parameter(torch.zeros_like(linear.bias))
    return shard


def test_attention_and_mlp_run_on_tensor_parallel_head_shards(model: GPT) -> None:
    """Emulate 2-way TP by hand: each shard holds half of the heads (or MLP columns); the
    partial outputs must sum to the unsharded output, which needs heads counted from shape."""
    block = model.blocks[0]
    x = torch.randn(2, 10, 32, generator=torch.Generator().manual_seed(9))
    tp = 2
    for module, colwise, rowwise, width in (
        (block.attn, ("q_proj", "k_proj", "v_proj"), "out_proj", 32),
        (block.mlp, ("fc_in",), "fc_out", 128),
    ):
        full = module(x)
        partial_sum = torch.zeros_like(full)
        for rank in range(tp):
            part = slice(rank * width // tp, (rank + 1) * width // tp)
            shard = copy.deepcopy(module)
            for name in colwise:
                setattr(shard, name, _shard_rows(getattr(module, name), part))
            setattr(shard, rowwise, _shard_cols(getattr(module, rowwise), part, rank == 0))
            partial_sum += shard(x)
        torch.testing.assert_close(partial_sum, full, rtol=1e-5, atol=1e-6)


def test_bf16_autocast_forward_and_backward(model: GPT) -> None:
    x, y = tokens(2, 16, seed=10), tokens(2, 16, seed=11)
    _, loss_fp32 = model(x, y)
    model.train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits, loss = model(x, y)
    assert logits.dtype == torch.bfloat16
    assert loss.dtype == torch.float32  # the loss is computed in fp32
    assert loss.item() == pytest.approx(loss_fp32.item(), rel=2e-2)
    loss.backward()
    assert model.blocks[0].attn.q_proj.weight.grad.dtype == torch.float32
    assert torch.isfinite(model.wte.weight.grad).all()


@pytest.mark.parametrize(
    "config",
    [
        tiny_config(),
        tiny_config(bias=False),
        tiny_config(n_layer=3, n_head=3, n_embd=48, block_size=40, vocab_size=131),
    ],
)
def test_count_params_matches_the_module(config: GPTConfig) -> None:
    model = GPT(config)
    assert count_params(config) == model.num_params()
    assert count_params(config, exclude_embeddings=True) == model.num_params(True)
    assert model.num_params() == sum(p.numel() for p in set(model.parameters()))


def test_flops_per_token_formula() -> None:
    config = tiny_config()  # d=32, L=2, V=97, block 16
    d, L, V = 32, 2, 97
    block = 2 * 2 * d + 4 * (d * d + d) + (4 * d * d + 4 * d) + (4 * d * d + d)
    matmul_params = V * d + L * block + 2 * d  # no position table, tied head counted once
    seq_len = 12
    assert flops_per_token(config, seq_len) == 6 * matmul_params + 12 * L * d * seq_len
    assert GPT(config).flops_per_token(seq_len) == flops_per_token(config, seq_len)
    with pytest.raises(ValueError, match="seq_len"):
        flops_per_token(config, 0)


def test_flops_agree_with_megatron_closed_form() -> None:
    """Narayanan et al. 2021: 72 l h^2 (1 + s/6h + V/12hl) per token, which drops biases and
    LayerNorms; for GPT-2 small the two agree to 0.2%."""
    config = GPTConfig(vocab_size=50304, n_layer=12, n_head=12, n_embd=768, block_size=1024)
    layers, h, s, V = 12, 768, 1024, 50304
    megatron = 72 * layers * h * h * (1 + s / (6 * h) + V / (12 * h * layers))
    assert flops_per_token(config, s) == pytest.approx(megatron, rel=2e-3)


def test_masked_cross_entropy_is_usable_on_its_own() -> None:
    logits = torch.randn(2, 5, 11, generator=torch.Generator().manual_seed(12))
    targets = torch.tensor([[1, 2, -100, 4, 5], [6, -100, -100, 9, 10]])
    expected = F.cross_entropy(logits.view(-1, 11), targets.view(-1), ignore_index=-100)
    torch.testing.assert_close(masked_cross_entropy(logits, targets, None), expected)
