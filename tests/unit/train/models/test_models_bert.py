"""BERT model: shapes, padding mask, gathered MLM logits, losses, heads, tying, FLOPs."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from tests.model_fixtures import random_tokens, seeded_eval_model, tiny_bert_config
from train.models.bert import Bert, BertConfig, count_params, flops_per_token

VOCAB = 101


def tiny_config(**overrides) -> BertConfig:
    return tiny_bert_config(**{"vocab_size": VOCAB, "max_position_embeddings": 24, **overrides})


@pytest.fixture
def model() -> Bert:
    return seeded_eval_model(Bert, tiny_config())


def tokens(batch: int = 3, seq_len: int = 16, seed: int = 1) -> torch.Tensor:
    return random_tokens(VOCAB, batch, seq_len, seed)


def mlm_labels_for(x: torch.Tensor, positions: list[tuple[int, int]]) -> torch.Tensor:
    labels = torch.full_like(x, -100)
    for b, t in positions:
        labels[b, t] = (x[b, t] * 7 + 3) % VOCAB
    return labels


def test_shapes_without_labels(model: Bert) -> None:
    out = model(tokens(3, 10))
    assert out.mlm_logits.shape == (3, 10, VOCAB)
    assert out.nsp_logits.shape == (3, 2)
    assert out.loss is None and out.mlm_loss is None and out.nsp_loss is None


def test_mlm_logits_are_gathered_at_predicted_positions(model: Bert) -> None:
    x = tokens(2, 12)
    positions = [(0, 1), (0, 7), (1, 0), (1, 11)]
    labels = mlm_labels_for(x, positions)
    full = model(x).mlm_logits
    gathered = model(x, mlm_labels=labels).mlm_logits
    assert gathered.shape == (len(positions), VOCAB)
    expected = torch.stack([full[b, t] for b, t in positions])  # row-major order
    torch.testing.assert_close(gathered, expected, rtol=1e-5, atol=1e-6)


def test_losses_equal_manual_cross_entropy(model: Bert) -> None:
    x = tokens(2, 12, seed=2)
    positions = [(0, 2), (0, 3), (1, 5)]
    labels = mlm_labels_for(x, positions)
    nsp_labels = torch.tensor([1, 0])
    out = model(x, mlm_labels=labels, nsp_labels=nsp_labels)
    full = model(x).mlm_logits.double()
    mlm = -torch.stack(
        [torch.log_softmax(full[b, t], -1)[labels[b, t]] for b, t in positions]
    ).mean()
    nsp_log_probs = torch.log_softmax(out.nsp_logits.double(), -1)
    nsp = -nsp_log_probs[torch.arange(2), nsp_labels].mean()
    torch.testing.assert_close(out.mlm_loss.double(), mlm, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out.nsp_loss.double(), nsp, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out.loss, out.mlm_loss + out.nsp_loss)
    only_mlm = model(x, mlm_labels=labels)
    assert only_mlm.nsp_loss is None
    torch.testing.assert_close(only_mlm.loss, out.mlm_loss)


def test_padding_mask_makes_padded_batch_equal_unpadded_sequence(model: Bert) -> None:
    x = tokens(2, 16, seed=3)
    lengths = [9, 16]
    attention_mask = torch.zeros(2, 16, dtype=torch.long)
    for b, n in enumerate(lengths):
        attention_mask[b, :n] = 1
    out = model(x, attention_mask=attention_mask)
    alone = model(x[:1, :9])
    torch.testing.assert_close(out.mlm_logits[0, :9], alone.mlm_logits[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out.nsp_logits[0], alone.nsp_logits[0], rtol=1e-5, atol=1e-5)
    # the contents of padding do not leak into real positions
    other_padding = x.clone()
    other_padding[0, 9:] = (other_padding[0, 9:] + 5) % VOCAB
    out_other = model(other_padding, attention_mask=attention_mask)
    torch.testing.assert_close(out_other.mlm_logits[0, :9], out.mlm_logits[0, :9])
    # and without the mask they would
    unmasked = model(other_padding).mlm_logits[0, :9]
    assert not torch.allclose(unmasked, out.mlm_logits[0, :9], atol=1e-4)


def test_all_ones_mask_equals_no_mask_and_default_token_types_are_zero(model: Bert) -> None:
    x = tokens(2, 10, seed=4)
    plain = model(x).mlm_logits
    torch.testing.assert_close(model(x, attention_mask=torch.ones_like(x)).mlm_logits, plain)
    zeros = model(x, token_type_ids=torch.zeros_like(x)).mlm_logits
    torch.testing.assert_close(zeros, plain, rtol=0, atol=0)
    segment_b = torch.zeros_like(x)
    segment_b[:, 5:] = 1
    assert not torch.allclose(model(x, token_type_ids=segment_b).mlm_logits, plain)


def test_attention_is_bidirectional(model: Bert) -> None:
    x = tokens(1, 10, seed=5)
    changed = x.clone()
    changed[0, 8] = (changed[0, 8] + 1) % VOCAB
    assert not torch.allclose(model(x).mlm_logits[0, :8], model(changed).mlm_logits[0, :8])


def test_decoder_is_tied_with_its_own_bias(model: Bert) -> None:
    assert model.mlm_head.decoder.weight is model.wte.weight
    assert model.mlm_head.decoder.bias.shape == (VOCAB,)
    with torch.no_grad():
        model.mlm_head.decoder.bias[5] += 3.0
    logits = model(tokens(1, 4)).mlm_logits
    with torch.no_grad():
        model.mlm_head.decoder.bias[5] -= 3.0
    torch.testing.assert_close(
        logits[..., 5] - model(tokens(1, 4)).mlm_logits[..., 5], torch.full((1, 4), 3.0)
    )


def test_without_next_sentence_head() -> None:
    model = Bert(tiny_config(next_sentence=False)).eval()
    assert not hasattr(model, "pooler") and not hasattr(model, "nsp_head")
    x = tokens(2, 8)
    out = model(x, mlm_labels=mlm_labels_for(x, [(0, 1)]))
    assert out.nsp_logits is None and out.nsp_loss is None
    torch.testing.assert_close(out.loss, out.mlm_loss)
    with pytest.raises(ValueError, match="next_sentence=False"):
        model(x, nsp_labels=torch.tensor([0, 1]))


def test_no_predicted_positions_gives_zero_mlm_loss(model: Bert) -> None:
    x = tokens(2, 8)
    out = model(x, mlm_labels=torch.full_like(x, -100))
    assert out.mlm_logits.shape == (0, VOCAB)
    assert out.mlm_loss.item() == 0.0


def test_errors_name_the_problem(model: Bert) -> None:
    with pytest.raises(ValueError, match=r"sequence length 25 .*max_position_embeddings 24"):
        model(tokens(1, 25))
    x = tokens(2, 8)
    with pytest.raises(ValueError, match="attention_mask shape"):
        model(x, attention_mask=torch.ones(2, 7))
    with pytest.raises(ValueError, match="mlm_labels shape"):
        model(x, mlm_labels=torch.full((2, 9), -100))
    with pytest.raises(ValueError, match="nsp_labels holds 3 labels for a batch of 2"):
        model(x, nsp_labels=torch.tensor([0, 1, 0]))
    with pytest.raises(ValueError, match="divisible by n_head"):
        BertConfig(n_embd=30, n_head=4)
    positions = torch.zeros(2, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="mlm_positions needs mlm_labels of the same"):
        model(x, mlm_labels=torch.full((2, 4), -100), mlm_positions=positions)
    with pytest.raises(ValueError, match="mlm_positions needs mlm_labels of the same"):
        model(x, mlm_positions=positions)


def test_training_step_updates_all_parameters() -> None:
    torch.manual_seed(0)
    model = Bert(tiny_config(dropout=0.1)).train()
    x = tokens(2, 12, seed=6)
    mask = torch.ones_like(x)
    mask[1, 8:] = 0
    out = model(
        x,
        token_type_ids=torch.randint(0, 2, x.shape),
        attention_mask=mask,
        mlm_labels=mlm_labels_for(x, [(0, 0), (0, 4), (1, 3)]),
        nsp_labels=torch.tensor([0, 1]),
    )
    out.loss.backward()
    no_grad = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.any()]
    assert no_grad == []


def test_meta_device_build_then_init_weights() -> None:
    with torch.device("meta"):
        model = Bert(tiny_config())
    model.to_empty(device="cpu")
    model.init_weights()
    assert model.mlm_head.decoder.weight is model.wte.weight
    assert torch.count_nonzero(model.mlm_head.decoder.bias) == 0
    assert torch.isfinite(model(tokens(1, 6)).mlm_logits).all()


def test_bf16_autocast_forward(model: Bert) -> None:
    x = tokens(2, 12, seed=7)
    labels = mlm_labels_for(x, [(0, 3), (1, 6), (1, 7)])
    reference = model(x, mlm_labels=labels, nsp_labels=torch.tensor([0, 1]))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(
            x, attention_mask=torch.ones_like(x), mlm_labels=labels, nsp_labels=torch.tensor([0, 1])
        )
    assert out.mlm_logits.dtype == torch.bfloat16
    assert out.loss.dtype == torch.float32
    assert out.loss.item() == pytest.approx(reference.loss.item(), rel=2e-2)
    out.loss.backward()
    assert torch.isfinite(model.wte.weight.grad).all()


@pytest.mark.parametrize("next_sentence", [True, False])
def test_count_params_matches_the_module(next_sentence: bool) -> None:
    config = tiny_config(next_sentence=next_sentence, type_vocab_size=3)
    model = Bert(config)
    assert count_params(config) == model.num_params()
    assert count_params(config, exclude_embeddings=True) == model.num_params(True)


def test_flops_per_token_formula() -> None:
    config = tiny_config()  # d=32, inter=64, L=2, V=101
    d, inter, L, V, T = 32, 64, 2, 101, 16
    block = 4 * (d * d + d) + (d * inter + inter) + (inter * d + d) + 4 * d
    encoder = L * block + 2 * d
    head = (d * d + d) + 2 * d + (V * d + V)
    nsp = (d * d + d) + (2 * d + 2)
    attention = 12 * L * d * T
    assert flops_per_token(config, T) == pytest.approx(6 * (encoder + head + nsp / T) + attention)
    sparse = flops_per_token(config, T, mlm_fraction=0.15)
    assert sparse == pytest.approx(6 * (encoder + 0.15 * head + nsp / T) + attention)
    assert Bert(config).flops_per_token(T, 0.15) == sparse
    with pytest.raises(ValueError, match="mlm_fraction"):
        flops_per_token(config, T, mlm_fraction=1.5)


def test_gelu_is_the_exact_erf_form(model: Bert) -> None:
    """BERT uses erf GELU (unlike GPT-2's tanh form); check one MLP against it directly."""
    mlp = model.blocks[0].mlp
    h = torch.randn(3, 32, generator=torch.Generator().manual_seed(8)) * 3
    pre = mlp.fc_in(h)
    expected = mlp.fc_out(pre * 0.5 * (1 + torch.erf(pre / 2**0.5)))
    torch.testing.assert_close(mlp(h), expected, rtol=1e-6, atol=1e-6)
    assert not torch.allclose(mlp(h), mlp.fc_out(F.gelu(pre, approximate="tanh")), atol=1e-7)


def test_attention_runs_on_tensor_parallel_head_shards(model: Bert) -> None:
    """Emulate 2-way TP on one attention layer, keeping the Linear modules' global
    in/out_features as TP does: per-shard outputs (half the heads each) sum to the full one."""
    attn = model.blocks[0].attn
    x = torch.randn(2, 10, 32, generator=torch.Generator().manual_seed(9))
    key_mask = torch.ones(2, 1, 1, 10, dtype=torch.bool)
    key_mask[1, ..., 6:] = False
    full = attn(x, key_mask)
    partial_sum = torch.zeros_like(full)
    for rank in range(2):
        part = slice(rank * 16, (rank + 1) * 16)
        shard = copy.deepcopy(attn)
        with torch.no_grad():
            for name in ("q_proj", "k_proj", "v_proj"):
                linear = getattr(shard, name)
                linear.weight = torch.nn.Parameter(linear.weight[part].clone())
                linear.bias = torch.nn.Parameter(linear.bias[part].clone())
            shard.out_proj.weight = torch.nn.Parameter(shard.out_proj.weight[:, part].clone())
            if rank > 0:
                shard.out_proj.bias.zero_()  # RowwiseParallel adds the bias once
        partial_sum += shard(x, key_mask)
    torch.testing.assert_close(partial_sum, full, rtol=1e-5, atol=1e-6)
