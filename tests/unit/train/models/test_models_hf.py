"""Hugging Face parity: our GPT/Bert <-> transformers GPT2LMHeadModel / BertForPreTraining.

Every HF model is built from a config (nothing is downloaded). HF runs with eager attention,
an explicit softmax, so the comparison is against an independent attention implementation.
"""

from __future__ import annotations

import pytest
import torch
import transformers

from tests.model_fixtures import random_tokens as tokens
from tests.model_fixtures import seeded_eval_model, tiny_bert_config, tiny_gpt_config
from train.eval.load import LoadError, load_weights_of
from train.models import bert_spec, gpt_spec
from train.models.bert import Bert, BertConfig
from train.models.gpt import GPT, GPTConfig
from train.models.presets import pad_vocab_size

EAGER = dict(attn_implementation="eager")
TOL = dict(rtol=1e-5, atol=1e-5)


def gpt_config(**overrides) -> GPTConfig:
    # vocab 100 padded to 128: checks that the padded table is exported as is
    return tiny_gpt_config(**{"vocab_size": pad_vocab_size(100), **overrides})


def bert_config(**overrides) -> BertConfig:
    return tiny_bert_config(**{"vocab_size": 128, "max_position_embeddings": 20, **overrides})


def gpt_to_hf(model: GPT, **overrides) -> transformers.GPT2LMHeadModel:
    """The HF model an export of ``model`` is: its spec's config and tensors."""
    hf = transformers.GPT2LMHeadModel(gpt_spec.config_to_hf(model.config, **overrides))
    hf.load_state_dict(gpt_spec.state_dict_to_hf(model.state_dict(), model.config))
    return hf.train(model.training)


def bert_to_hf(model: Bert, **overrides):
    """The HF model an export of ``model`` is: the class its spec's config names, its tensors."""
    hf_config = bert_spec.config_to_hf(model.config, **overrides)
    hf = getattr(transformers, hf_config.architectures[0])(hf_config)
    hf.load_state_dict(bert_spec.state_dict_to_hf(model.state_dict(), model.config))
    return hf.train(model.training)


def from_hf(hf_model, folder):
    """Ours, as evaluation and --init-from load the HF folder ``hf_model`` saves."""
    hf_model.save_pretrained(folder)
    return load_weights_of(str(folder), torch.device("cpu")).model


def randomise_(model: torch.nn.Module) -> None:
    """Non-trivial values everywhere (fresh init has zero biases and unit LayerNorms, which
    would hide a swapped or dropped bias)."""
    generator = torch.Generator().manual_seed(123)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.1 + (p == 1).float())


# ------------------------------------------------------------------------------------- GPT


@pytest.fixture
def gpt() -> GPT:
    model = seeded_eval_model(GPT, gpt_config())
    randomise_(model)
    return model


def test_gpt_to_hf_gives_the_same_logits_and_loss(gpt: GPT) -> None:
    hf = gpt_to_hf(gpt, **EAGER)
    assert isinstance(hf, transformers.GPT2LMHeadModel)
    assert hf.config.vocab_size == 128 and not hf.training
    assert hf.lm_head.weight is hf.transformer.wte.weight
    x = tokens(128)
    ours, _ = gpt(x)
    with torch.no_grad():
        theirs = hf(x, labels=x)
    torch.testing.assert_close(theirs.logits, ours, **TOL)
    # HF shifts labels itself; ours takes pre-shifted targets
    _, loss = gpt(x[:, :-1], x[:, 1:])
    torch.testing.assert_close(theirs.loss, loss, **TOL)


def test_gpt_round_trip_through_hf_is_exact(gpt: GPT, tmp_path) -> None:
    back = from_hf(gpt_to_hf(gpt), tmp_path)
    assert back.config == gpt.config
    assert back.lm_head.weight is back.wte.weight
    for (name, ours), theirs in zip(gpt.state_dict().items(), back.state_dict().values()):
        assert torch.equal(ours, theirs), name


def test_hf_gpt2_built_from_config_converts_to_ours(tmp_path) -> None:
    torch.manual_seed(0)
    hf_config = transformers.GPT2Config(
        vocab_size=120, n_positions=24, n_embd=48, n_layer=3, n_head=6,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        bos_token_id=None, eos_token_id=None, **EAGER,
    )  # fmt: skip
    hf = transformers.GPT2LMHeadModel(hf_config).eval()
    randomise_(hf)
    ours = from_hf(hf, tmp_path)
    assert (ours.config.n_layer, ours.config.n_head, ours.config.block_size) == (3, 6, 24)
    x = tokens(120, seq_len=24, seed=2)
    with torch.no_grad():
        expected = hf(x).logits
    torch.testing.assert_close(ours(x)[0], expected, **TOL)


def test_gpt_without_bias_exports_zero_biases() -> None:
    torch.manual_seed(0)
    model = GPT(gpt_config(bias=False)).eval()
    randomise_(model)
    hf = gpt_to_hf(model, **EAGER)
    assert torch.count_nonzero(hf.transformer.h[0].attn.c_attn.bias) == 0
    assert torch.count_nonzero(hf.transformer.ln_f.bias) == 0
    x = tokens(128, seed=3)
    with torch.no_grad():
        torch.testing.assert_close(hf(x).logits, model(x)[0], **TOL)
    back = GPT(model.config)
    back.load_state_dict(gpt_spec.state_dict_from_hf(hf.state_dict(), model.config))
    torch.testing.assert_close(back(x)[0], model(x)[0], rtol=0, atol=0)
    # a bias-free config cannot take an HF model whose biases matter
    with torch.no_grad():
        hf.transformer.h[1].mlp.c_fc.bias[3] = 0.5
    with pytest.raises(ValueError, match=r"non-zero biases: transformer\.h\.1\.mlp\.c_fc\.bias"):
        gpt_spec.state_dict_from_hf(hf.state_dict(), model.config)


def test_gpt_state_dict_functions_layouts(gpt: GPT) -> None:
    config = gpt.config
    sd = gpt_spec.state_dict_to_hf(gpt.state_dict(), config)
    d = config.n_embd
    assert sd["transformer.h.0.attn.c_attn.weight"].shape == (d, 3 * d)  # Conv1D: [in, out]
    assert torch.equal(
        sd["transformer.h.0.attn.c_attn.weight"][:, d : 2 * d],
        gpt.blocks[0].attn.k_proj.weight.t(),
    )
    assert torch.equal(sd["transformer.h.1.mlp.c_fc.weight"], gpt.blocks[1].mlp.fc_in.weight.t())
    assert sd["lm_head.weight"] is sd["transformer.wte.weight"]
    hf_keys = set(transformers.GPT2LMHeadModel(gpt_spec.config_to_hf(config)).state_dict())
    assert set(sd) == hf_keys


def test_gpt_from_legacy_bare_gpt2model_state_dict(gpt: GPT) -> None:
    """Checkpoints of a bare GPT2Model (as the released GPT-2 files) have no "transformer."
    prefix and, from older transformers, causal-mask buffers; both are accepted."""
    sd = gpt_spec.state_dict_to_hf(gpt.state_dict(), gpt.config)
    legacy = {k.removeprefix("transformer."): v for k, v in sd.items() if k != "lm_head.weight"}
    legacy["h.0.attn.bias"] = torch.tril(torch.ones(1, 1, 16, 16))
    legacy["h.0.attn.masked_bias"] = torch.tensor(-1e4)
    back = GPT(gpt.config).eval()
    back.load_state_dict(gpt_spec.state_dict_from_hf(legacy, gpt.config))
    x = tokens(128, seed=4)
    torch.testing.assert_close(back(x)[0], gpt(x)[0], rtol=0, atol=0)


def test_gpt_state_dict_errors(gpt: GPT) -> None:
    sd = gpt_spec.state_dict_to_hf(gpt.state_dict(), gpt.config)
    missing = {k: v for k, v in sd.items() if k != "transformer.h.1.mlp.c_proj.weight"}
    with pytest.raises(ValueError, match=r"missing 1 key.*h\.1\.mlp\.c_proj\.weight"):
        gpt_spec.state_dict_from_hf(missing, gpt.config)
    untied = dict(sd, **{"lm_head.weight": sd["lm_head.weight"] + 1})
    with pytest.raises(ValueError, match="untied lm_head"):
        gpt_spec.state_dict_from_hf(untied, gpt.config)
    with pytest.raises(ValueError, match=r"unexpected 2 key"):
        gpt_spec.state_dict_to_hf(
            dict(gpt.state_dict(), extra=torch.zeros(1), other=torch.zeros(1)), gpt.config
        )


def test_unsupported_hf_gpt2_variants_are_rejected() -> None:
    base = dict(vocab_size=64, n_positions=8, n_embd=16, n_layer=1, n_head=2)
    for overrides, message in (
        (dict(activation_function="relu"), "activation_function='relu'"),
        (dict(n_inner=24), "n_inner=24"),
        (dict(scale_attn_by_inverse_layer_idx=True), "attention scaling"),
        (dict(layer_norm_epsilon=1e-6), "layer_norm_epsilon"),
    ):
        config = transformers.GPT2Config(**base, **overrides)
        with pytest.raises(ValueError, match=message):
            gpt_spec.config_from_hf(config)


# ------------------------------------------------------------------------------------ BERT


@pytest.fixture
def bert() -> Bert:
    model = seeded_eval_model(Bert, bert_config())
    randomise_(model)
    return model


def bert_batch(vocab: int = 128, seq_len: int = 20):
    x = tokens(vocab, batch=3, seq_len=seq_len, seed=5)
    token_type_ids = torch.zeros_like(x)
    token_type_ids[:, seq_len // 2 :] = 1
    attention_mask = torch.ones_like(x)
    attention_mask[0, 13:] = 0
    attention_mask[2, 7:] = 0
    labels = torch.full_like(x, -100)
    labels[0, [1, 5]] = x[0, [1, 5]]
    labels[1, [0, 19]] = x[1, [0, 19]]
    labels[2, 3] = x[2, 3]
    return x, token_type_ids, attention_mask, labels, torch.tensor([0, 1, 1])


def test_bert_to_hf_gives_the_same_outputs_with_padding(bert: Bert) -> None:
    hf = bert_to_hf(bert, **EAGER)
    assert isinstance(hf, transformers.BertForPreTraining)
    assert hf.cls.predictions.decoder.weight is hf.bert.embeddings.word_embeddings.weight
    x, types, mask, labels, nsp = bert_batch()
    ours = bert(x, token_type_ids=types, attention_mask=mask)
    with torch.no_grad():
        theirs = hf(
            input_ids=x, token_type_ids=types, attention_mask=mask,
            labels=labels, next_sentence_label=nsp,
        )  # fmt: skip
    real = mask.bool()
    torch.testing.assert_close(ours.mlm_logits[real], theirs.prediction_logits[real], **TOL)
    torch.testing.assert_close(ours.nsp_logits, theirs.seq_relationship_logits, **TOL)
    with_labels = bert(
        x, token_type_ids=types, attention_mask=mask, mlm_labels=labels, nsp_labels=nsp
    )
    torch.testing.assert_close(
        with_labels.mlm_logits, theirs.prediction_logits[labels != -100], **TOL
    )
    torch.testing.assert_close(with_labels.loss, theirs.loss, **TOL)


def test_hf_bert_built_from_config_converts_to_ours(tmp_path) -> None:
    torch.manual_seed(0)
    hf_config = transformers.BertConfig(
        vocab_size=96, hidden_size=48, num_hidden_layers=3, num_attention_heads=6,
        intermediate_size=80, max_position_embeddings=20, type_vocab_size=2,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **EAGER,
    )  # fmt: skip
    hf = transformers.BertForPreTraining(hf_config).eval()
    randomise_(hf)
    ours = from_hf(hf, tmp_path)
    assert ours.config.next_sentence and ours.config.n_head == 6
    x, types, mask, _, _ = bert_batch(vocab=96)
    out = ours(x, token_type_ids=types, attention_mask=mask)
    with torch.no_grad():
        theirs = hf(input_ids=x, token_type_ids=types, attention_mask=mask)
    real = mask.bool()
    torch.testing.assert_close(out.mlm_logits[real], theirs.prediction_logits[real], **TOL)
    torch.testing.assert_close(out.nsp_logits, theirs.seq_relationship_logits, **TOL)


def test_bert_round_trip_through_hf_is_exact(bert: Bert, tmp_path) -> None:
    back = from_hf(bert_to_hf(bert), tmp_path)
    assert back.config == bert.config
    for (name, ours), theirs in zip(bert.state_dict().items(), back.state_dict().values()):
        assert torch.equal(ours, theirs), name


def test_bert_without_nsp_exports_to_masked_lm(tmp_path) -> None:
    torch.manual_seed(0)
    model = Bert(bert_config(next_sentence=False)).eval()
    randomise_(model)
    hf = bert_to_hf(model, **EAGER)
    assert isinstance(hf, transformers.BertForMaskedLM)
    x, types, mask, _, _ = bert_batch()
    with torch.no_grad():
        theirs = hf(input_ids=x, token_type_ids=types, attention_mask=mask).logits
    ours = model(x, token_type_ids=types, attention_mask=mask).mlm_logits
    torch.testing.assert_close(ours[mask.bool()], theirs[mask.bool()], **TOL)
    back = from_hf(hf, tmp_path)
    assert not back.config.next_sentence
    torch.testing.assert_close(back(x).mlm_logits, model(x).mlm_logits, rtol=0, atol=0)


def test_bert_from_legacy_state_dict_names(bert: Bert) -> None:
    """TF-converted checkpoints (bert-base-uncased's own files) say LayerNorm.gamma/beta and
    carry a position_ids buffer."""
    sd = bert_spec.state_dict_to_hf(bert.state_dict(), bert.config)
    legacy = {
        k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
        for k, v in sd.items()
        if k not in ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias")
    }  # fmt: skip
    legacy["bert.embeddings.position_ids"] = torch.arange(20).unsqueeze(0)
    assert "bert.encoder.layer.0.output.LayerNorm.gamma" in legacy
    back = Bert(bert.config).eval()
    back.load_state_dict(bert_spec.state_dict_from_hf(legacy, bert.config))
    x = tokens(128, seed=6)
    torch.testing.assert_close(back(x).mlm_logits, bert(x).mlm_logits, rtol=0, atol=0)


def test_bert_state_dict_errors(bert: Bert, tmp_path) -> None:
    sd = bert_spec.state_dict_to_hf(bert.state_dict(), bert.config)
    untied = dict(sd)
    untied["cls.predictions.decoder.weight"] = sd["cls.predictions.decoder.weight"] * 2
    with pytest.raises(ValueError, match="untied MLM decoder"):
        bert_spec.state_dict_from_hf(untied, bert.config)
    no_pooler = {k: v for k, v in sd.items() if not k.startswith("bert.pooler")}
    with pytest.raises(ValueError, match=r"missing 2 key.*bert\.pooler\.dense"):
        bert_spec.state_dict_from_hf(no_pooler, bert.config)
    # a bare BertModel (no MLM head) is no model of ours
    with pytest.raises(LoadError, match=r"do not fit config\.json.*missing"):
        from_hf(transformers.BertModel(transformers.BertConfig(
            vocab_size=16, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
            intermediate_size=16)), tmp_path)  # fmt: skip
