"""The GPT family's spec: GPT-2 style decoder, causal LM batches, GPT-2 on Hugging Face.

Preset sizes come from their papers: GPT-2 (Radford et al. 2019, the four released models)
and Megatron-LM (Shoeybi et al. 2019, table 1 scaling study; vocab 50257 padded to 51200 =
multiple of 128 x 8-way tensor parallelism; the 8.3B model they trained used 24 heads). The
tiny presets are for CPU tests and smoke runs.

Hugging Face: GPT-2 keeps q/k/v fused in ``c_attn`` and stores every projection as ``Conv1D``,
whose weight is the transpose of ``nn.Linear``'s ([in, out]). A model trained with a padded
vocabulary (50304) is exported with that padded size as is: the extra rows are never produced
by the tokenizer, the logits simply have a few more (untrained) columns. A ``bias=False``
model is exported with zero biases, which computes the same function. State dicts of older
checkpoints are accepted: keys with or without the ``transformer.`` prefix, and the
causal-mask buffers ``attn.bias``/``attn.masked_bias``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from train.models import gpt
from train.models.gpt import GPT, GPTConfig
from train.models.hf import StateDict, check_keys, hf_fields, our_fields, transformers_config
from train.models.spec import CAUSAL_LM, HFMapping, ModelSpec, ParallelPlan, PlanCounts, Preset

if TYPE_CHECKING:
    import transformers

GPT2_VOCAB_PADDED = 50304  # 50257 GPT-2 BPE tokens padded to a multiple of 128
MEGATRON_VOCAB_PADDED = 51200  # 50257 padded to a multiple of 128 * 8 (8-way TP)


def _gpt2(n_layer: int, n_head: int, n_embd: int, description: str) -> Preset:
    config = GPTConfig(vocab_size=GPT2_VOCAB_PADDED, n_layer=n_layer, n_head=n_head, n_embd=n_embd)
    return Preset("gpt", config, description)


def _megatron(n_embd: int, n_layer: int, n_head: int, description: str) -> Preset:
    # Megatron-LM trains with 0.1 hidden and attention dropout (its default arguments).
    config = GPTConfig(
        vocab_size=MEGATRON_VOCAB_PADDED,
        n_layer=n_layer,
        n_head=n_head,
        n_embd=n_embd,
        block_size=1024,
        dropout=0.1,
    )
    return Preset("gpt", config, description)


PRESETS: dict[str, Preset] = {
    "gpt2-124m": _gpt2(12, 12, 768, "GPT-2 small: 12 layers, d=768, 12 heads, context 1024"),
    "gpt2-355m": _gpt2(24, 16, 1024, "GPT-2 medium: 24 layers, d=1024, 16 heads, context 1024"),
    "gpt2-774m": _gpt2(36, 20, 1280, "GPT-2 large: 36 layers, d=1280, 20 heads, context 1024"),
    "gpt2-1.5b": _gpt2(48, 25, 1600, "GPT-2 XL: 48 layers, d=1600, 25 heads, context 1024"),
    "megatron-1.2b": _megatron(1536, 40, 16, "Megatron-LM 1.2B: d=1536, 40 layers, 16 heads"),
    "megatron-2.5b": _megatron(1920, 54, 20, "Megatron-LM 2.5B: d=1920, 54 layers, 20 heads"),
    "megatron-4.2b": _megatron(2304, 64, 24, "Megatron-LM 4.2B: d=2304, 64 layers, 24 heads"),
    "megatron-8.3b": _megatron(
        3072, 72, 32, "Megatron-LM 8.3B as in the scaling table: d=3072, 72 layers, 32 heads"
    ),
    "megatron-8.3b-24h": _megatron(
        3072, 72, 24, "Megatron-LM 8.3B as trained: d=3072, 72 layers, 24 heads"
    ),
    "gpt-tiny": Preset(
        "gpt",
        GPTConfig(n_layer=2, n_head=2, n_embd=64, block_size=128),
        "CPU test model: 2 layers, d=64, 2 heads, context 128",
    ),
    "gpt-small-cpu": Preset(
        "gpt",
        GPTConfig(n_layer=6, n_head=6, n_embd=384, block_size=256),
        "CPU smoke-run model: 6 layers, d=384, 6 heads, context 256",
    ),
}

_LAYER_NORM_EPS = 1e-5  # torch's LayerNorm default, used by GPT

# (ours, HF) names of the GPT config fields that carry over unchanged both ways.
_CONFIG_FIELDS = (
    ("vocab_size", "vocab_size"),
    ("n_layer", "n_layer"),
    ("n_head", "n_head"),
    ("n_embd", "n_embd"),
    ("block_size", "n_positions"),
    ("init_std", "initializer_range"),
)


def config_to_hf(config: GPTConfig, **overrides: Any) -> transformers.GPT2Config:
    """HF ``GPT2Config`` for ``config``. ``overrides`` (e.g. ``eos_token_id``) go to GPT2Config;
    token ids default to None because the model does not know the tokenizer."""
    import transformers

    fields: dict[str, Any] = dict(
        hf_fields(config, _CONFIG_FIELDS),
        n_inner=None,
        activation_function="gelu_new",
        resid_pdrop=config.dropout,
        embd_pdrop=config.dropout,
        attn_pdrop=config.dropout,
        layer_norm_epsilon=_LAYER_NORM_EPS,
        bos_token_id=None,
        eos_token_id=None,
        tie_word_embeddings=True,
    )
    fields.update(overrides)
    return transformers.GPT2Config(**fields)


def config_from_hf(hf_config: Any) -> GPTConfig:
    """``GPTConfig`` for an HF ``GPT2Config``; ValueError for variants GPT cannot express."""
    unsupported = []
    if hf_config.activation_function not in ("gelu_new", "gelu_pytorch_tanh"):
        unsupported.append(f"activation_function={hf_config.activation_function!r}")
    if hf_config.n_inner not in (None, 4 * hf_config.n_embd):
        unsupported.append(f"n_inner={hf_config.n_inner} (GPT uses 4 * n_embd)")
    if abs(hf_config.layer_norm_epsilon - _LAYER_NORM_EPS) > 1e-12:
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
        **our_fields(hf_config, _CONFIG_FIELDS),
        dropout=float(hf_config.resid_pdrop),
        bias=True,
    )


def _plain_names(config: GPTConfig) -> list[tuple[str, str]]:
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


def _linear_names(config: GPTConfig, i: int) -> list[tuple[str, str]]:
    """(ours, HF) prefixes of the non-fused Linear <-> Conv1D pairs of layer ``i``."""
    return [
        (f"blocks.{i}.attn.out_proj", f"transformer.h.{i}.attn.c_proj"),
        (f"blocks.{i}.mlp.fc_in", f"transformer.h.{i}.mlp.c_fc"),
        (f"blocks.{i}.mlp.fc_out", f"transformer.h.{i}.mlp.c_proj"),
    ]


def state_dict_to_hf(state_dict: StateDict, config: GPTConfig) -> StateDict:
    """Map a ``GPT`` state dict to ``GPT2LMHeadModel`` keys and layouts.

    ``lm_head.weight`` is included and is the same tensor as ``transformer.wte.weight``
    (tied); drop it before writing formats that reject shared tensors.
    """
    sd = check_keys(state_dict, _expected_keys(config), "GPT state dict")
    out: StateDict = {}
    for ours, theirs in _plain_names(config):
        out[theirs] = sd[ours]
    d = config.n_embd
    for i in range(config.n_layer):
        attn = f"blocks.{i}.attn"
        # Conv1D stores [in, out]; fusing q, k, v along "out" gives c_attn's [d, 3d].
        out[f"transformer.h.{i}.attn.c_attn.weight"] = (
            torch.cat([sd[f"{attn}.{p}_proj.weight"] for p in "qkv"], dim=0).t().contiguous()
        )
        for ours, theirs in _linear_names(config, i):
            out[f"{theirs}.weight"] = sd[f"{ours}.weight"].t().contiguous()
        if config.bias:
            out[f"transformer.h.{i}.attn.c_attn.bias"] = torch.cat(
                [sd[f"{attn}.{p}_proj.bias"] for p in "qkv"]
            )
            for ours, theirs in _linear_names(config, i):
                out[f"{theirs}.bias"] = sd[f"{ours}.bias"]
        else:
            # HF GPT-2 always has biases; zeros make it compute the same function.
            like = sd["wte.weight"]
            for name, size in _bias_sizes(i, d):
                out[name] = like.new_zeros(size)
    if not config.bias:
        like = sd["wte.weight"]
        for i in range(config.n_layer):
            for norm in ("ln_1", "ln_2"):
                out[f"transformer.h.{i}.{norm}.bias"] = like.new_zeros(d)
        out["transformer.ln_f.bias"] = like.new_zeros(d)
    out["lm_head.weight"] = out["transformer.wte.weight"]
    return out


def _bias_sizes(i: int, d: int) -> list[tuple[str, int]]:
    h = f"transformer.h.{i}"
    return [
        (f"{h}.attn.c_attn.bias", 3 * d),
        (f"{h}.attn.c_proj.bias", d),
        (f"{h}.mlp.c_fc.bias", 4 * d),
        (f"{h}.mlp.c_proj.bias", d),
    ]


def state_dict_from_hf(state_dict: StateDict, config: GPTConfig) -> StateDict:
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
    expected = _hf_expected_keys(config)
    sd = check_keys(sd, expected, "GPT-2 state dict")
    if lm_head is not None and not torch.equal(lm_head, sd["transformer.wte.weight"]):
        raise ValueError("GPT-2 state dict has an untied lm_head.weight; GPT ties it to wte")

    out: StateDict = {}
    for ours, theirs in _plain_names(config):
        out[ours] = sd[theirs]
    for i in range(config.n_layer):
        attn = f"blocks.{i}.attn"
        c_attn = f"transformer.h.{i}.attn.c_attn"
        q, k, v = sd[f"{c_attn}.weight"].t().chunk(3, dim=0)
        for p, weight in zip("qkv", (q, k, v)):
            out[f"{attn}.{p}_proj.weight"] = weight.contiguous()
        for ours, theirs in _linear_names(config, i):
            out[f"{ours}.weight"] = sd[f"{theirs}.weight"].t().contiguous()
        if config.bias:
            for p, bias in zip("qkv", sd[f"{c_attn}.bias"].chunk(3)):
                out[f"{attn}.{p}_proj.bias"] = bias.contiguous()
            for ours, theirs in _linear_names(config, i):
                out[f"{ours}.bias"] = sd[f"{theirs}.bias"]
    if not config.bias:
        nonzero = [
            k
            for k in expected - set(_theirs(_plain_names(config)))
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


def _expected_keys(config: GPTConfig) -> set[str]:
    keys = {ours for ours, _ in _plain_names(config)} | {"lm_head.weight"}
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


def _hf_expected_keys(config: GPTConfig) -> set[str]:
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


def config_from_fields(fields: dict) -> GPTConfig:
    """``GPTConfig`` for the fields of a GPT-2 config.json."""
    return config_from_hf(transformers_config("gpt2", fields))


def plan_counts(config: GPTConfig, mask_prob: float) -> PlanCounts:
    """Korthikanti et al.'s own GPT: per block, LayerNorm inputs (2), the q/k/v and MLP inputs
    (2) whole; Q, K, V, the output projection's input (4) and GELU's input and output (2 x 4)
    split; two hidden dropouts' masks. Outside: the final LayerNorm's input and output."""
    h = config.n_embd
    return PlanCounts(
        layers=config.n_layer, width=h, heads=config.n_head, vocab=config.vocab_size,
        block_params=gpt.block_params(config), whole=4 * h, split=12 * h, attention=4 * h,
        mask_bytes=2 * h if config.dropout > 0 else 0, score_dropout=config.dropout > 0,
        outside=2 * h, logits=config.vocab_size,
    )  # fmt: skip


SPEC = ModelSpec(
    name="gpt",
    config_class=GPTConfig,
    model_class=GPT,
    batch=CAUSAL_LM,
    default_preset="gpt-tiny",
    presets=PRESETS,
    count_params=gpt.count_params,
    flops_per_token=lambda config, seq_len, mask_prob: gpt.flops_per_token(config, seq_len),
    positions=lambda config: config.block_size,
    parallel=ParallelPlan(
        colwise=("attn.q_proj", "attn.k_proj", "attn.v_proj", "mlp.fc_in"),
        rowwise=("attn.out_proj", "mlp.fc_out"),
        divisible=("n_head",),
        head="lm_head",
        tied=lambda config: True,
        sequence_parallel=True,
        norms=("ln_1", "ln_2"),
        sublayers=("attn", "mlp"),
        final_norm="ln_f",
        position_table="wpe",
        parallel_loss=True,
    ),
    hf=HFMapping(
        model_type="gpt2",
        config_to_hf=config_to_hf,
        state_dict_to_hf=state_dict_to_hf,
        config_from_hf=config_from_fields,
        state_dict_from_hf=state_dict_from_hf,
        size_keys=("n_layer", "n_embd", "n_head", "vocab_size", "n_positions", "n_inner"),
    ),
    shape_fields={
        "num_layers": "n_layer",
        "hidden_size": "n_embd",
        "num_attention_heads": "n_head",
        "bias": "bias",
        "dropout": "dropout",
    },
    shape_fixed={"ffn_hidden_size": "has an MLP of 4 x --hidden-size (GPT-2's)"},
    plan_counts=plan_counts,
)
