"""The LLaMA family's spec: the decoder of ``train.models.llama``, causal LM batches, and its
Hugging Face counterpart ``LlamaForCausalLM`` both ways.

Names map one to one (``model.layers.i.self_attn.q_proj`` is ``blocks.i.attn.q_proj``...) and
every weight keeps its layout: both sides store ``nn.Linear`` weights and rotate the halves of
each head. HF's rotary ``inv_freq`` is a buffer computed from the config, not a weight; older
checkpoints that saved it have it dropped. Only what ``Llama`` computes is accepted: SiLU,
no biases, default RoPE (no scaling), head size ``hidden_size / num_attention_heads``.
"""

from __future__ import annotations

from typing import Any

import torch

from train.models import llama
from train.models.hf import (
    StateDict,
    check_keys,
    hf_fields,
    layer_names,
    our_fields,
    transformers_config,
)
from train.models.llama import Llama, LlamaConfig
from train.models.spec import (
    CAUSAL_LM,
    INTERMEDIATE_SIZE_SHAPE_FIELDS,
    TRANSFORMERS_SIZE_KEYS,
    HFMapping,
    ModelSpec,
    ParallelPlan,
    PlanCounts,
    Preset,
)

PRESETS: dict[str, Preset] = {
    "llama-tiny": Preset(
        "llama",
        LlamaConfig(
            n_layer=2, n_head=4, n_kv_head=2, n_embd=64, intermediate_size=176, block_size=128
        ),
        "CPU test model: 2 layers, d=64, 4 query / 2 key-value heads, SwiGLU 176, context 128",
    ),
    "llama-small-cpu": Preset(
        "llama",
        LlamaConfig(
            n_layer=6, n_head=6, n_kv_head=2, n_embd=384, intermediate_size=1024, block_size=256
        ),
        "CPU smoke-run model: 6 layers, d=384, 6 query / 2 key-value heads, context 256",
    ),
}


# (ours, HF) names of the config fields that carry over unchanged both ways.
_CONFIG_FIELDS = (
    ("vocab_size", "vocab_size"),
    ("n_layer", "num_hidden_layers"),
    ("n_head", "num_attention_heads"),
    ("n_embd", "hidden_size"),
    ("intermediate_size", "intermediate_size"),
    ("block_size", "max_position_embeddings"),
    ("init_std", "initializer_range"),
)


def config_to_hf(config: LlamaConfig) -> Any:
    """HF ``LlamaConfig`` for ``config`` (token ids None: the model does not know the
    tokenizer)."""
    import transformers

    return transformers.LlamaConfig(
        **hf_fields(config, _CONFIG_FIELDS),
        num_key_value_heads=config.n_kv_head,
        head_dim=config.n_embd // config.n_head,
        rms_norm_eps=config.norm_eps,
        rope_theta=config.rope_theta,
        tie_word_embeddings=config.tie_embeddings,
        attention_dropout=config.dropout,
        hidden_act="silu",
        attention_bias=False,
        mlp_bias=False,
        bos_token_id=None,
        eos_token_id=None,
        architectures=["LlamaForCausalLM"],
    )


def _rope_theta(hf_config: Any) -> tuple[float, list[str]]:
    """The RoPE base, and what in the config's rotary settings ``Llama`` cannot compute
    (transformers 5 keeps them in ``rope_parameters``, earlier versions in ``rope_theta`` and
    ``rope_scaling``)."""
    parameters = getattr(hf_config, "rope_parameters", None)
    if isinstance(parameters, dict):
        kind = parameters.get("rope_type", "default")
        unsupported = [] if kind == "default" else [f"rope_type={kind!r}"]
        return float(parameters.get("rope_theta", 10000.0)), unsupported
    scaling = getattr(hf_config, "rope_scaling", None)
    unsupported = [] if scaling is None else [f"rope_scaling={scaling!r}"]
    return float(hf_config.rope_theta), unsupported


def config_from_hf(hf_config: Any) -> LlamaConfig:
    """``LlamaConfig`` for an HF ``LlamaConfig``; ValueError for variants Llama cannot express."""
    theta, unsupported = _rope_theta(hf_config)
    if hf_config.hidden_act != "silu":
        unsupported.append(f"hidden_act={hf_config.hidden_act!r} (Llama uses SiLU)")
    if getattr(hf_config, "attention_bias", False) or getattr(hf_config, "mlp_bias", False):
        unsupported.append("biases")
    head_dim = getattr(hf_config, "head_dim", None)
    if head_dim not in (None, hf_config.hidden_size // hf_config.num_attention_heads):
        unsupported.append(f"head_dim={head_dim} (Llama uses hidden_size / heads)")
    if getattr(hf_config, "pretraining_tp", 1) != 1:
        unsupported.append(f"pretraining_tp={hf_config.pretraining_tp}")
    if unsupported:
        raise ValueError(f"Llama config not supported by Llama: {', '.join(unsupported)}")
    kv_heads = getattr(hf_config, "num_key_value_heads", None)
    return LlamaConfig(
        **our_fields(hf_config, _CONFIG_FIELDS),
        # None (left out) is multi-head attention; 0 is no model: LlamaConfig refuses it
        n_kv_head=hf_config.num_attention_heads if kv_heads is None else kv_heads,
        norm_eps=float(hf_config.rms_norm_eps),
        rope_theta=theta,
        tie_embeddings=bool(hf_config.tie_word_embeddings),
        dropout=float(hf_config.attention_dropout),
    )


# (ours, HF) names of a LLaMA layer's tensors.
_LAYER_NAMES = (
    ("ln_1.weight", "input_layernorm.weight"),
    ("ln_2.weight", "post_attention_layernorm.weight"),
    ("attn.out_proj.weight", "self_attn.o_proj.weight"),
    *((f"attn.{p}_proj.weight", f"self_attn.{p}_proj.weight") for p in "qkv"),
    *((f"mlp.{p}_proj.weight", f"mlp.{p}_proj.weight") for p in ("gate", "up", "down")),
)


def _names(config: LlamaConfig) -> list[tuple[str, str]]:
    """(ours, HF) names of every tensor but the head's."""
    names = [("wte.weight", "model.embed_tokens.weight"), ("ln_f.weight", "model.norm.weight")]
    return names + layer_names(config.n_layer, "model.layers.{}", _LAYER_NAMES)


def state_dict_to_hf(state_dict: StateDict, config: LlamaConfig) -> StateDict:
    """Map a ``Llama`` state dict to ``LlamaForCausalLM`` keys; a tied head is the same tensor
    as the token embedding."""
    names = _names(config)
    sd = check_keys(
        state_dict, {ours for ours, _ in names} | {"lm_head.weight"}, "Llama state dict"
    )
    out = {theirs: sd[ours] for ours, theirs in names}
    out["lm_head.weight"] = sd["lm_head.weight"]
    return out


def state_dict_from_hf(state_dict: StateDict, config: LlamaConfig) -> StateDict:
    """Map a ``LlamaForCausalLM`` state dict to ``Llama`` keys. A tied config takes the head
    from the embedding (an explicit ``lm_head.weight`` must then equal it)."""
    sd = {k: v for k, v in state_dict.items() if not k.endswith("rotary_emb.inv_freq")}
    head = sd.pop("lm_head.weight", None)
    names = _names(config)
    sd = check_keys(sd, {theirs for _, theirs in names}, "LLaMA state dict")
    out = {ours: sd[theirs] for ours, theirs in names}
    if config.tie_embeddings:
        if head is not None and not torch.equal(head, out["wte.weight"]):
            raise ValueError("LLaMA state dict: tie_word_embeddings but lm_head.weight differs")
        head = out["wte.weight"]
    elif head is None:
        raise ValueError("LLaMA state dict has no lm_head.weight and its embeddings are untied")
    out["lm_head.weight"] = head
    return out


def config_from_fields(fields: dict) -> LlamaConfig:
    """``LlamaConfig`` for the fields of a LLaMA config.json."""
    return config_from_hf(transformers_config("llama", fields))


def plan_counts(config: LlamaConfig, mask_prob: float) -> PlanCounts:
    """Per block: both RMSNorms' inputs, the q/k/v and MLP inputs (4) whole; Q, K and V (K and
    V repeated to every query head: what the kernel is given and keeps), the output
    projection's input (4) and SwiGLU's gate, SiLU, up and product (4 x the inner width)
    split; no hidden dropout. Outside: the final RMSNorm's input and output."""
    h = config.n_embd
    return PlanCounts(
        layers=config.n_layer, width=h, heads=config.n_head, vocab=config.vocab_size,
        block_params=llama.block_params(config), whole=4 * h,
        split=4 * h + 4 * config.intermediate_size, attention=4 * h, mask_bytes=0,
        score_dropout=config.dropout > 0, outside=2 * h, logits=config.vocab_size,
    )  # fmt: skip


SPEC = ModelSpec(
    name="llama",
    config_class=LlamaConfig,
    model_class=Llama,
    batch=CAUSAL_LM,
    default_preset="llama-tiny",
    presets=PRESETS,
    count_params=llama.count_params,
    flops_per_token=lambda config, seq_len, mask_prob: llama.flops_per_token(config, seq_len),
    positions=lambda config: config.block_size,
    parallel=ParallelPlan(
        colwise=("attn.q_proj", "attn.k_proj", "attn.v_proj", "mlp.gate_proj", "mlp.up_proj"),
        rowwise=("attn.out_proj", "mlp.down_proj"),
        divisible=("n_head", "n_kv_head"),
        head="lm_head",
        tied=lambda config: config.tie_embeddings,
        sequence_parallel=True,
        norms=("ln_1", "ln_2"),
        sublayers=("attn", "mlp"),
        final_norm="ln_f",
        parallel_loss=True,
    ),
    hf=HFMapping(
        model_type="llama",
        config_to_hf=config_to_hf,
        state_dict_to_hf=state_dict_to_hf,
        config_from_hf=config_from_fields,
        state_dict_from_hf=state_dict_from_hf,
        size_keys=TRANSFORMERS_SIZE_KEYS,
    ),
    shape_fields=INTERMEDIATE_SIZE_SHAPE_FIELDS,
    shape_fixed={"bias": "never has biases (LLaMA's layers)"},
    plan_counts=plan_counts,
)
