"""The BERT family's spec: encoder with MLM + NSP heads, masked-LM batches, BERT on Hugging
Face. Preset sizes from Devlin et al. 2019; the tiny preset is for CPU tests.

Hugging Face: names map one to one. ``next_sentence=False`` models have no pooler/NSP head and
export to ``BertForMaskedLM``; NSP models export to ``BertForPreTraining``. State dicts of
older checkpoints are accepted: the ``position_ids`` buffer and the TF-era
``LayerNorm.gamma``/``beta`` names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from train.models import bert
from train.models.bert import Bert, BertConfig
from train.models.hf import (
    StateDict,
    check_keys,
    hf_fields,
    layer_names,
    our_fields,
    transformers_config,
)
from train.models.spec import (
    INTERMEDIATE_SIZE_SHAPE_FIELDS,
    MASKED_LM,
    TRANSFORMERS_SIZE_KEYS,
    HFMapping,
    ModelSpec,
    ParallelPlan,
    PlanCounts,
    Preset,
)

if TYPE_CHECKING:
    import transformers

BERT_VOCAB_PADDED = 30592  # 30522 bert-base-uncased WordPiece tokens padded to 128

PRESETS: dict[str, Preset] = {
    "bert-base": Preset(
        "bert",
        BertConfig(vocab_size=BERT_VOCAB_PADDED),
        "BERT-base: 12 layers, d=768, 12 heads, FFN 3072, 512 positions, MLM + NSP",
    ),
    "bert-large": Preset(
        "bert",
        BertConfig(
            vocab_size=BERT_VOCAB_PADDED,
            n_layer=24,
            n_head=16,
            n_embd=1024,
            intermediate_size=4096,
        ),
        "BERT-large: 24 layers, d=1024, 16 heads, FFN 4096, 512 positions, MLM + NSP",
    ),
    "bert-tiny": Preset(
        "bert",
        BertConfig(
            n_layer=2, n_head=2, n_embd=64, intermediate_size=256, max_position_embeddings=128
        ),
        "CPU test model: 2 layers, d=64, 2 heads, FFN 256, 128 positions",
    ),
}

# (ours, HF) names of the BERT config fields that carry over unchanged both ways.
_CONFIG_FIELDS = (
    ("vocab_size", "vocab_size"),
    ("n_layer", "num_hidden_layers"),
    ("n_head", "num_attention_heads"),
    ("n_embd", "hidden_size"),
    ("intermediate_size", "intermediate_size"),
    ("max_position_embeddings", "max_position_embeddings"),
    ("type_vocab_size", "type_vocab_size"),
    ("layer_norm_eps", "layer_norm_eps"),
    ("init_std", "initializer_range"),
)


def config_to_hf(config: BertConfig, **overrides: Any) -> transformers.BertConfig:
    """HF ``BertConfig`` for ``config``, naming the HF class the weights load into: the NSP
    head makes it ``BertForPreTraining``, its absence ``BertForMaskedLM``. ``overrides`` (e.g.
    ``attn_implementation``) go to BertConfig."""
    import transformers

    fields: dict[str, Any] = dict(
        hf_fields(config, _CONFIG_FIELDS),
        hidden_act="gelu",
        hidden_dropout_prob=config.dropout,
        attention_probs_dropout_prob=config.dropout,
        tie_word_embeddings=True,
        architectures=["BertForPreTraining" if config.next_sentence else "BertForMaskedLM"],
    )
    fields.update(overrides)
    return transformers.BertConfig(**fields)


def config_from_hf(hf_config: Any, next_sentence: bool = True) -> BertConfig:
    """``BertConfig`` for an HF ``BertConfig``; ValueError for variants Bert cannot express."""
    unsupported = []
    if hf_config.hidden_act != "gelu":
        unsupported.append(f"hidden_act={hf_config.hidden_act!r} (Bert uses erf GELU)")
    if getattr(hf_config, "position_embedding_type", "absolute") != "absolute":
        unsupported.append(f"position_embedding_type={hf_config.position_embedding_type!r}")
    if getattr(hf_config, "is_decoder", False):
        unsupported.append("is_decoder=True")
    if not getattr(hf_config, "tie_word_embeddings", True):
        unsupported.append("untied MLM decoder")
    if unsupported:
        raise ValueError(f"BERT config not supported by Bert: {', '.join(unsupported)}")
    return BertConfig(
        **our_fields(hf_config, _CONFIG_FIELDS),
        dropout=float(hf_config.hidden_dropout_prob),
        next_sentence=next_sentence,
    )


# (ours, HF) names of a BERT layer's Linear and LayerNorm modules.
_LAYER_NAMES = (
    ("attn.q_proj", "attention.self.query"),
    ("attn.k_proj", "attention.self.key"),
    ("attn.v_proj", "attention.self.value"),
    ("attn.out_proj", "attention.output.dense"),
    ("ln_1", "attention.output.LayerNorm"),
    ("mlp.fc_in", "intermediate.dense"),
    ("mlp.fc_out", "output.dense"),
    ("ln_2", "output.LayerNorm"),
)


def _names(config: BertConfig) -> list[tuple[str, str]]:
    """(ours, HF) names of every tensor except the tied decoder weight and its bias."""
    prefixes = [
        ("wte", "bert.embeddings.word_embeddings"),
        ("wpe", "bert.embeddings.position_embeddings"),
        ("wtt", "bert.embeddings.token_type_embeddings"),
    ]
    names = [(f"{ours}.weight", f"{theirs}.weight") for ours, theirs in prefixes]
    with_bias = [("ln_emb", "bert.embeddings.LayerNorm")]
    with_bias += layer_names(config.n_layer, "bert.encoder.layer.{}", _LAYER_NAMES)
    with_bias += [
        ("mlm_head.dense", "cls.predictions.transform.dense"),
        ("mlm_head.ln", "cls.predictions.transform.LayerNorm"),
    ]
    if config.next_sentence:
        with_bias += [("pooler", "bert.pooler.dense"), ("nsp_head", "cls.seq_relationship")]
    for ours, theirs in with_bias:
        names += [(f"{ours}.weight", f"{theirs}.weight"), (f"{ours}.bias", f"{theirs}.bias")]
    return names


def state_dict_to_hf(state_dict: StateDict, config: BertConfig) -> StateDict:
    """Map a ``Bert`` state dict to ``BertForPreTraining`` keys (``BertForMaskedLM`` keys when
    ``next_sentence`` is False). Tied entries are the same tensor objects."""
    names = _names(config)
    expected = {ours for ours, _ in names} | {"mlm_head.decoder.weight", "mlm_head.decoder.bias"}
    sd = check_keys(state_dict, expected, "Bert state dict")
    out = {theirs: sd[ours] for ours, theirs in names}
    out["cls.predictions.decoder.weight"] = out["bert.embeddings.word_embeddings.weight"]
    out["cls.predictions.bias"] = sd["mlm_head.decoder.bias"]
    out["cls.predictions.decoder.bias"] = out["cls.predictions.bias"]
    return out


def state_dict_from_hf(state_dict: StateDict, config: BertConfig) -> StateDict:
    """Map a ``BertForPreTraining`` / ``BertForMaskedLM`` state dict to ``Bert`` keys.

    With ``config.next_sentence`` False, pooler and NSP weights in the input are dropped.
    """
    sd: StateDict = {}
    for key, tensor in state_dict.items():
        if key.endswith((".position_ids", ".token_type_ids")):
            continue  # index buffers, not weights
        # TF-converted checkpoints name LayerNorm parameters gamma/beta.
        key = key.replace("LayerNorm.gamma", "LayerNorm.weight")
        key = key.replace("LayerNorm.beta", "LayerNorm.bias")
        sd[key] = tensor
    decoder_weight = sd.pop("cls.predictions.decoder.weight", None)
    decoder_bias = sd.pop("cls.predictions.decoder.bias", None)
    if not config.next_sentence:
        for key in (
            "bert.pooler.dense.weight",
            "bert.pooler.dense.bias",
            "cls.seq_relationship.weight",
            "cls.seq_relationship.bias",
        ):
            sd.pop(key, None)
    names = _names(config)
    expected = {theirs for _, theirs in names} | {"cls.predictions.bias"}
    sd = check_keys(sd, expected, "BERT state dict")
    word_embeddings = sd["bert.embeddings.word_embeddings.weight"]
    if decoder_weight is not None and not torch.equal(decoder_weight, word_embeddings):
        raise ValueError("BERT state dict has an untied MLM decoder weight; Bert ties it")
    if decoder_bias is not None and not torch.equal(decoder_bias, sd["cls.predictions.bias"]):
        raise ValueError("BERT state dict: cls.predictions.decoder.bias != cls.predictions.bias")
    out = {ours: sd[theirs] for ours, theirs in names}
    out["mlm_head.decoder.weight"] = out["wte.weight"]
    out["mlm_head.decoder.bias"] = sd["cls.predictions.bias"]
    return out


def config_from_fields(fields: dict) -> BertConfig:
    """``BertConfig`` for the fields of a BERT config.json: a masked-LM-only BERT
    (``BertForMaskedLM`` in ``architectures``) has no NSP head."""
    architectures = fields.get("architectures") or []
    next_sentence = not (isinstance(architectures, list) and "BertForMaskedLM" in architectures)
    return config_from_hf(transformers_config("bert", fields), next_sentence)


def plan_counts(config: BertConfig, mask_prob: float) -> PlanCounts:
    """Per post-LN block: the attention input, both LayerNorms' inputs and the MLP input (4)
    whole; Q, K, V, the output projection's input (4) and GELU's input and output (2 x the
    inner width) split; two hidden dropouts' masks. Outside: the embedding LayerNorm's input,
    and the MLM head at the predicted share of positions (its dense, GELU, LayerNorm and
    decoder inputs: 5) with its logits."""
    h, share = config.n_embd, mask_prob
    return PlanCounts(
        layers=config.n_layer, width=h, heads=config.n_head, vocab=config.vocab_size,
        block_params=bert.block_params(config), whole=4 * h,
        split=4 * h + 2 * config.intermediate_size, attention=4 * h,
        mask_bytes=2 * h if config.dropout > 0 else 0, score_dropout=config.dropout > 0,
        outside=h + 5 * h * share, logits=config.vocab_size * share,
    )  # fmt: skip


SPEC = ModelSpec(
    name="bert",
    config_class=BertConfig,
    model_class=Bert,
    batch=MASKED_LM,
    default_preset="bert-tiny",
    presets=PRESETS,
    count_params=bert.count_params,
    flops_per_token=lambda config, seq_len, mask_prob: bert.flops_per_token(
        config, seq_len, mlm_fraction=mask_prob
    ),
    positions=lambda config: config.max_position_embeddings,
    # Plain tensor parallelism only: the post-LN blocks and padding masks have no
    # sequence-parallel plan, and the MLM logits are gathered for the head's own loss.
    parallel=ParallelPlan(
        colwise=("attn.q_proj", "attn.k_proj", "attn.v_proj", "mlp.fc_in"),
        rowwise=("attn.out_proj", "mlp.fc_out"),
        divisible=("n_head",),
        head="mlm_head.decoder",
        tied=lambda config: True,
    ),
    hf=HFMapping(
        model_type="bert",
        config_to_hf=config_to_hf,
        state_dict_to_hf=state_dict_to_hf,
        config_from_hf=config_from_fields,
        state_dict_from_hf=state_dict_from_hf,
        size_keys=TRANSFORMERS_SIZE_KEYS,
    ),
    shape_fields=INTERMEDIATE_SIZE_SHAPE_FIELDS,
    shape_fixed={"bias": "always has biases (BERT's layers)"},
    plan_counts=plan_counts,
)
