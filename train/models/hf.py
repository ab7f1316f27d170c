"""Conversion between our GPT/Bert and Hugging Face ``transformers`` models.

``transformers`` is needed only to build HF modules (``gpt_to_hf`` and friends) and is imported
inside those functions; the state-dict functions are pure tensor re-mapping and need only torch.

GPT-2: HF keeps q/k/v fused in ``c_attn`` and stores every projection as ``Conv1D``, whose
weight is the transpose of ``nn.Linear``'s ([in, out]). A model trained with a padded vocabulary
(50304) is exported with that padded size as is: the extra rows are never produced by the
tokenizer, the logits simply have a few more (untrained) columns. A ``bias=False`` model is
exported with zero biases, which computes the same function.

BERT: names map one to one. ``next_sentence=False`` models have no pooler/NSP head and
export to ``BertForMaskedLM``; NSP models export to ``BertForPreTraining``.

State dicts from older HF checkpoints are accepted: GPT-2 keys with or without the
``transformer.`` prefix, the causal-mask buffers ``attn.bias``/``attn.masked_bias``, BERT's
``position_ids`` buffer and the TF-era ``LayerNorm.gamma``/``beta`` names.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from train.models.bert import Bert, BertConfig
from train.models.gpt import GPT, GPTConfig

if TYPE_CHECKING:
    import transformers

StateDict = dict[str, torch.Tensor]
Module = TypeVar("Module", bound=torch.nn.Module)

_GPT_LAYER_NORM_EPS = 1e-5  # torch's LayerNorm default, used by GPT


# --------------------------------------------------------------------------------------------
# GPT-2


# (ours, HF) names of the GPT config fields that carry over unchanged both ways.
_GPT_CONFIG_FIELDS = (
    ("vocab_size", "vocab_size"),
    ("n_layer", "n_layer"),
    ("n_head", "n_head"),
    ("n_embd", "n_embd"),
    ("block_size", "n_positions"),
    ("init_std", "initializer_range"),
)


def gpt_config_to_hf(config: GPTConfig, **overrides: Any) -> transformers.GPT2Config:
    """HF ``GPT2Config`` for ``config``. ``overrides`` (e.g. ``eos_token_id``) go to GPT2Config;
    token ids default to None because the model does not know the tokenizer."""
    import transformers

    fields: dict[str, Any] = dict(
        hf_fields(config, _GPT_CONFIG_FIELDS),
        n_inner=None,
        activation_function="gelu_new",
        resid_pdrop=config.dropout,
        embd_pdrop=config.dropout,
        attn_pdrop=config.dropout,
        layer_norm_epsilon=_GPT_LAYER_NORM_EPS,
        bos_token_id=None,
        eos_token_id=None,
        tie_word_embeddings=True,
    )
    fields.update(overrides)
    return transformers.GPT2Config(**fields)


def gpt_config_from_hf(hf_config: Any) -> GPTConfig:
    """``GPTConfig`` for an HF ``GPT2Config``; ValueError for variants GPT cannot express."""
    unsupported = []
    if hf_config.activation_function not in ("gelu_new", "gelu_pytorch_tanh"):
        unsupported.append(f"activation_function={hf_config.activation_function!r}")
    if hf_config.n_inner not in (None, 4 * hf_config.n_embd):
        unsupported.append(f"n_inner={hf_config.n_inner} (GPT uses 4 * n_embd)")
    if abs(hf_config.layer_norm_epsilon - _GPT_LAYER_NORM_EPS) > 1e-12:
        unsupported.append(f"layer_norm_epsilon={hf_config.layer_norm_epsilon}")
    if not hf_config.scale_attn_weights or hf_config.scale_attn_by_inverse_layer_idx:
        unsupported.append("non-standard attention scaling")
    if getattr(hf_config, "add_cross_attention", False):
        unsupported.append("cross attention")
    if not getattr(hf_config, "tie_word_embeddings", True):
        unsupported.append("untied LM head")
    if unsupported:
        raise ValueError(f"GPT2 config not supported by GPT: {', '.join(unsupported)}")
    return GPTConfig(
        **our_fields(hf_config, _GPT_CONFIG_FIELDS),
        dropout=float(hf_config.resid_pdrop),
        bias=True,
    )


def _gpt_plain_names(config: GPTConfig) -> list[tuple[str, str]]:
    """(ours, HF) names of tensors copied unchanged."""
    names = [("wte.weight", "transformer.wte.weight"), ("wpe.weight", "transformer.wpe.weight")]
    norms = [("ln_f", "transformer.ln_f")]
    for i in range(config.n_layer):
        norms += [
            (f"blocks.{i}.ln_1", f"transformer.h.{i}.ln_1"),
            (f"blocks.{i}.ln_2", f"transformer.h.{i}.ln_2"),
        ]
    for ours, theirs in norms:
        names.append((f"{ours}.weight", f"{theirs}.weight"))
        if config.bias:
            names.append((f"{ours}.bias", f"{theirs}.bias"))
    return names


def _gpt_linear_names(config: GPTConfig, i: int) -> list[tuple[str, str]]:
    """(ours, HF) prefixes of the non-fused Linear <-> Conv1D pairs of layer ``i``."""
    return [
        (f"blocks.{i}.attn.out_proj", f"transformer.h.{i}.attn.c_proj"),
        (f"blocks.{i}.mlp.fc_in", f"transformer.h.{i}.mlp.c_fc"),
        (f"blocks.{i}.mlp.fc_out", f"transformer.h.{i}.mlp.c_proj"),
    ]


def gpt_state_dict_to_hf(state_dict: StateDict, config: GPTConfig) -> StateDict:
    """Map a ``GPT`` state dict to ``GPT2LMHeadModel`` keys and layouts.

    ``lm_head.weight`` is included and is the same tensor as ``transformer.wte.weight``
    (tied); drop it before writing formats that reject shared tensors.
    """
    sd = check_keys(state_dict, _gpt_expected_keys(config), "GPT state dict")
    out: StateDict = {}
    for ours, theirs in _gpt_plain_names(config):
        out[theirs] = sd[ours]
    d = config.n_embd
    for i in range(config.n_layer):
        attn = f"blocks.{i}.attn"
        # Conv1D stores [in, out]; fusing q, k, v along "out" gives c_attn's [d, 3d].
        out[f"transformer.h.{i}.attn.c_attn.weight"] = (
            torch.cat([sd[f"{attn}.{p}_proj.weight"] for p in "qkv"], dim=0).t().contiguous()
        )
        for ours, theirs in _gpt_linear_names(config, i):
            out[f"{theirs}.weight"] = sd[f"{ours}.weight"].t().contiguous()
        if config.bias:
            out[f"transformer.h.{i}.attn.c_attn.bias"] = torch.cat(
                [sd[f"{attn}.{p}_proj.bias"] for p in "qkv"]
            )
            for ours, theirs in _gpt_linear_names(config, i):
                out[f"{theirs}.bias"] = sd[f"{ours}.bias"]
        else:
            # HF GPT-2 always has biases; zeros make it compute the same function.
            like = sd["wte.weight"]
            for name, size in _gpt_bias_sizes(i, d):
                out[name] = like.new_zeros(size)
    if not config.bias:
        like = sd["wte.weight"]
        for i in range(config.n_layer):
            for norm in ("ln_1", "ln_2"):
                out[f"transformer.h.{i}.{norm}.bias"] = like.new_zeros(d)
        out["transformer.ln_f.bias"] = like.new_zeros(d)
    out["lm_head.weight"] = out["transformer.wte.weight"]
    return out


def _gpt_bias_sizes(i: int, d: int) -> list[tuple[str, int]]:
    h = f"transformer.h.{i}"
    return [
        (f"{h}.attn.c_attn.bias", 3 * d),
        (f"{h}.attn.c_proj.bias", d),
        (f"{h}.mlp.c_fc.bias", 4 * d),
        (f"{h}.mlp.c_proj.bias", d),
    ]


def gpt_state_dict_from_hf(state_dict: StateDict, config: GPTConfig) -> StateDict:
    """Map a ``GPT2LMHeadModel`` (or bare ``GPT2Model``) state dict to ``GPT`` keys.

    With ``config.bias=False`` the HF biases must all be zero (else ValueError), since GPT
    would silently compute a different function without them.
    """
    sd: StateDict = {}
    for key, tensor in state_dict.items():
        if key.endswith((".attn.bias", ".attn.masked_bias")):
            continue  # causal-mask buffers of older transformers versions, not weights
        if key != "lm_head.weight" and not key.startswith("transformer."):
            key = "transformer." + key  # saved from a bare GPT2Model
        sd[key] = tensor
    lm_head = sd.pop("lm_head.weight", None)
    expected = _hf_gpt_expected_keys(config)
    sd = check_keys(sd, expected, "GPT-2 state dict")
    if lm_head is not None and not torch.equal(lm_head, sd["transformer.wte.weight"]):
        raise ValueError("GPT-2 state dict has an untied lm_head.weight; GPT ties it to wte")

    out: StateDict = {}
    for ours, theirs in _gpt_plain_names(config):
        out[ours] = sd[theirs]
    for i in range(config.n_layer):
        attn = f"blocks.{i}.attn"
        c_attn = f"transformer.h.{i}.attn.c_attn"
        q, k, v = sd[f"{c_attn}.weight"].t().chunk(3, dim=0)
        for p, weight in zip("qkv", (q, k, v)):
            out[f"{attn}.{p}_proj.weight"] = weight.contiguous()
        for ours, theirs in _gpt_linear_names(config, i):
            out[f"{ours}.weight"] = sd[f"{theirs}.weight"].t().contiguous()
        if config.bias:
            for p, bias in zip("qkv", sd[f"{c_attn}.bias"].chunk(3)):
                out[f"{attn}.{p}_proj.bias"] = bias.contiguous()
            for ours, theirs in _gpt_linear_names(config, i):
                out[f"{ours}.bias"] = sd[f"{theirs}.bias"]
    if not config.bias:
        nonzero = [
            k
            for k in expected - set(_theirs(_gpt_plain_names(config)))
            if k.endswith(".bias") and torch.count_nonzero(sd[k]) > 0
        ]
        if nonzero:
            raise ValueError(
                "config.bias is False but the GPT-2 state dict has non-zero biases: "
                + ", ".join(sorted(nonzero)[:5])
            )
    out["lm_head.weight"] = out["wte.weight"]
    return out


def _theirs(pairs: list[tuple[str, str]]) -> list[str]:
    return [theirs for _, theirs in pairs]


def _gpt_expected_keys(config: GPTConfig) -> set[str]:
    keys = {ours for ours, _ in _gpt_plain_names(config)} | {"lm_head.weight"}
    for i in range(config.n_layer):
        for module in (
            "attn.q_proj",
            "attn.k_proj",
            "attn.v_proj",
            "attn.out_proj",
            "mlp.fc_in",
            "mlp.fc_out",
        ):
            keys.add(f"blocks.{i}.{module}.weight")
            if config.bias:
                keys.add(f"blocks.{i}.{module}.bias")
    return keys


def _hf_gpt_expected_keys(config: GPTConfig) -> set[str]:
    """HF keys (without lm_head) that a GPT-2 of this shape always has, biases included."""
    keys = {
        "transformer.wte.weight",
        "transformer.wpe.weight",
        "transformer.ln_f.weight",
        "transformer.ln_f.bias",
    }
    for i in range(config.n_layer):
        h = f"transformer.h.{i}"
        for module in ("ln_1", "ln_2", "attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"):
            keys |= {f"{h}.{module}.weight", f"{h}.{module}.bias"}
    return keys


def gpt_to_hf(model: GPT, **config_overrides: Any) -> transformers.GPT2LMHeadModel:
    """A ``GPT2LMHeadModel`` computing the same function as ``model`` (same dtype, device and
    train/eval mode). ``config_overrides`` go to ``GPT2Config`` (e.g. ``eos_token_id``)."""
    import transformers

    hf_model = transformers.GPT2LMHeadModel(gpt_config_to_hf(model.config, **config_overrides))
    state_dict = gpt_state_dict_to_hf(model.state_dict(), model.config)
    return load_weights(hf_model, model.wte.weight, state_dict, model.training)


def gpt_from_hf(hf_model: Any) -> GPT:
    """A ``GPT`` with the weights of an HF ``GPT2LMHeadModel`` (same dtype, device and mode)."""
    config = gpt_config_from_hf(hf_model.config)
    return model_from_hf(GPT, config, hf_model, gpt_state_dict_from_hf)


def gpt_config_from_fields(fields: dict) -> GPTConfig:
    """``GPTConfig`` for the fields of a GPT-2 config.json."""
    return gpt_config_from_hf(transformers_config("gpt2", fields))


# --------------------------------------------------------------------------------------------
# BERT


# (ours, HF) names of the BERT config fields that carry over unchanged both ways.
_BERT_CONFIG_FIELDS = (
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


def bert_config_to_hf(config: BertConfig, **overrides: Any) -> transformers.BertConfig:
    import transformers

    fields: dict[str, Any] = dict(
        hf_fields(config, _BERT_CONFIG_FIELDS),
        hidden_act="gelu",
        hidden_dropout_prob=config.dropout,
        attention_probs_dropout_prob=config.dropout,
        tie_word_embeddings=True,
    )
    fields.update(overrides)
    return transformers.BertConfig(**fields)


def bert_config_with_architecture(config: BertConfig) -> transformers.BertConfig:
    """``bert_config_to_hf`` naming the HF class the weights load into: the NSP head makes it
    ``BertForPreTraining``, its absence ``BertForMaskedLM``."""
    hf_config = bert_config_to_hf(config)
    hf_config.architectures = ["BertForPreTraining" if config.next_sentence else "BertForMaskedLM"]
    return hf_config


def bert_config_from_hf(hf_config: Any, next_sentence: bool = True) -> BertConfig:
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
        **our_fields(hf_config, _BERT_CONFIG_FIELDS),
        dropout=float(hf_config.hidden_dropout_prob),
        next_sentence=next_sentence,
    )


# (ours, HF) names of a BERT layer's Linear and LayerNorm modules.
_BERT_LAYER_NAMES = (
    ("attn.q_proj", "attention.self.query"),
    ("attn.k_proj", "attention.self.key"),
    ("attn.v_proj", "attention.self.value"),
    ("attn.out_proj", "attention.output.dense"),
    ("ln_1", "attention.output.LayerNorm"),
    ("mlp.fc_in", "intermediate.dense"),
    ("mlp.fc_out", "output.dense"),
    ("ln_2", "output.LayerNorm"),
)


def _bert_names(config: BertConfig) -> list[tuple[str, str]]:
    """(ours, HF) names of every tensor except the tied decoder weight and its bias."""
    prefixes = [
        ("wte", "bert.embeddings.word_embeddings"),
        ("wpe", "bert.embeddings.position_embeddings"),
        ("wtt", "bert.embeddings.token_type_embeddings"),
    ]
    names = [(f"{ours}.weight", f"{theirs}.weight") for ours, theirs in prefixes]
    with_bias = [("ln_emb", "bert.embeddings.LayerNorm")]
    with_bias += layer_names(config.n_layer, "bert.encoder.layer.{}", _BERT_LAYER_NAMES)
    with_bias += [
        ("mlm_head.dense", "cls.predictions.transform.dense"),
        ("mlm_head.ln", "cls.predictions.transform.LayerNorm"),
    ]
    if config.next_sentence:
        with_bias += [("pooler", "bert.pooler.dense"), ("nsp_head", "cls.seq_relationship")]
    for ours, theirs in with_bias:
        names += [(f"{ours}.weight", f"{theirs}.weight"), (f"{ours}.bias", f"{theirs}.bias")]
    return names


def bert_state_dict_to_hf(state_dict: StateDict, config: BertConfig) -> StateDict:
    """Map a ``Bert`` state dict to ``BertForPreTraining`` keys (``BertForMaskedLM`` keys when
    ``next_sentence`` is False). Tied entries are the same tensor objects."""
    names = _bert_names(config)
    expected = {ours for ours, _ in names} | {"mlm_head.decoder.weight", "mlm_head.decoder.bias"}
    sd = check_keys(state_dict, expected, "Bert state dict")
    out = {theirs: sd[ours] for ours, theirs in names}
    out["cls.predictions.decoder.weight"] = out["bert.embeddings.word_embeddings.weight"]
    out["cls.predictions.bias"] = sd["mlm_head.decoder.bias"]
    out["cls.predictions.decoder.bias"] = out["cls.predictions.bias"]
    return out


def bert_state_dict_from_hf(state_dict: StateDict, config: BertConfig) -> StateDict:
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
    names = _bert_names(config)
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


def bert_to_hf(model: Bert, **config_overrides: Any) -> Any:
    """``transformers.BertForPreTraining`` computing the same function as ``model`` (or
    ``BertForMaskedLM`` when ``next_sentence`` is False); same dtype, device and mode."""
    import transformers

    hf_config = bert_config_to_hf(model.config, **config_overrides)
    cls = (
        transformers.BertForPreTraining
        if model.config.next_sentence
        else transformers.BertForMaskedLM
    )
    state_dict = bert_state_dict_to_hf(model.state_dict(), model.config)
    return load_weights(cls(hf_config), model.wte.weight, state_dict, model.training)


def bert_from_hf(hf_model: Any) -> Bert:
    """A ``Bert`` with the weights of an HF ``BertForPreTraining`` (NSP head kept) or
    ``BertForMaskedLM`` (``next_sentence=False``)."""
    import transformers

    if isinstance(hf_model, transformers.BertForPreTraining):
        next_sentence = True
    elif isinstance(hf_model, transformers.BertForMaskedLM):
        next_sentence = False
    else:
        raise TypeError(
            "expected transformers.BertForPreTraining or BertForMaskedLM, "
            f"got {type(hf_model).__name__}"
        )
    config = bert_config_from_hf(hf_model.config, next_sentence=next_sentence)
    return model_from_hf(Bert, config, hf_model, bert_state_dict_from_hf)


def bert_config_from_fields(fields: dict) -> BertConfig:
    """``BertConfig`` for the fields of a BERT config.json: a masked-LM-only BERT
    (``BertForMaskedLM`` in ``architectures``) has no NSP head."""
    architectures = fields.get("architectures") or []
    next_sentence = not (isinstance(architectures, list) and "BertForMaskedLM" in architectures)
    return bert_config_from_hf(transformers_config("bert", fields), next_sentence)


# --------------------------------------------------------------------------------------------


def load_weights(
    model: Module, like: torch.Tensor, state_dict: StateDict, training: bool
) -> Module:
    """``model`` moved to ``like``'s device and dtype (the source model's), loaded with
    ``state_dict`` (already mapped to its names) and set to the source's train/eval mode."""
    model.to(device=like.device, dtype=like.dtype)
    model.load_state_dict(state_dict)
    return model.train(training)


def transformers_config(model_type: str, fields: dict) -> Any:
    """The transformers config of ``model_type`` for a config.json's ``fields`` (its defaults
    for the fields left out); ValueError, one line, for fields it refuses."""
    import transformers

    # its warnings (token ids past a small vocabulary...) would add lines to a one-line report
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        return transformers.AutoConfig.for_model(
            model_type, **{k: v for k, v in fields.items() if k != "model_type"}
        )
    except Exception as e:  # noqa: BLE001 - transformers' validators raise their own classes
        raise ValueError(" ".join(str(e).split())[:300] or type(e).__name__) from None
    finally:
        transformers.logging.set_verbosity(verbosity)


def hf_fields(config: Any, fields: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """HF config keyword arguments from our ``config``, by (ours, HF) name pairs."""
    return {theirs: getattr(config, ours) for ours, theirs in fields}


def our_fields(hf_config: Any, fields: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """Our config's keyword arguments from an HF config, by (ours, HF) name pairs."""
    return {ours: getattr(hf_config, theirs) for ours, theirs in fields}


def layer_names(
    n_layer: int, theirs: str, names: Sequence[tuple[str, str]]
) -> list[tuple[str, str]]:
    """(ours, HF) names of every layer's tensors, layer by layer: ours ``blocks.{i}.`` + the
    first of each pair in ``names``, HF's ``theirs.format(i)`` + ``.`` + the second."""
    return [
        (f"blocks.{i}.{ours}", f"{theirs.format(i)}.{hf}")
        for i in range(n_layer)
        for ours, hf in names
    ]


def model_from_hf(
    model_class: Callable[[Any], Module],
    config: Any,
    hf_model: Any,
    state_dict_from_hf: Callable[[StateDict, Any], StateDict],
) -> Module:
    """``model_class(config)`` with ``hf_model``'s weights, mapped to our names by
    ``state_dict_from_hf``, on its device and dtype and in its train/eval mode."""
    state_dict = state_dict_from_hf(hf_model.state_dict(), config)
    like = hf_model.get_input_embeddings().weight
    return load_weights(model_class(config), like, state_dict, hf_model.training)


def check_keys(state_dict: StateDict, expected: set[str], what: str) -> StateDict:
    """Return ``state_dict`` if its keys are exactly ``expected``, else a clear error."""
    missing = sorted(expected - state_dict.keys())
    unexpected = sorted(state_dict.keys() - expected)
    if missing or unexpected:
        problems = []
        if missing:
            problems.append(f"missing {len(missing)} key(s), e.g. {missing[:5]}")
        if unexpected:
            problems.append(f"unexpected {len(unexpected)} key(s), e.g. {unexpected[:5]}")
        raise ValueError(f"{what} does not match the config: {'; '.join(problems)}")
    return state_dict
