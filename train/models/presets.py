"""Named model configurations and the helpers that turn them into modules.

Sizes come from their papers: GPT-2 (Radford et al. 2019, the four released models),
Megatron-LM (Shoeybi et al. 2019, table 1 scaling study; vocab 50257 padded to 51200 =
multiple of 128 x 8-way tensor parallelism; the 8.3B model they trained used 24 heads), BERT
(Devlin et al. 2019). The tiny presets are for CPU tests and smoke runs.

Parameter counts are computed from the config (``count_params``), so a preset can be sized
without allocating it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from torch import nn

from train.models import bert, gpt
from train.models.bert import Bert, BertConfig
from train.models.gpt import GPT, GPTConfig

GPT2_VOCAB_PADDED = 50304  # 50257 GPT-2 BPE tokens padded to a multiple of 128
MEGATRON_VOCAB_PADDED = 51200  # 50257 padded to a multiple of 128 * 8 (8-way TP)
BERT_VOCAB_PADDED = 30592  # 30522 bert-base-uncased WordPiece tokens padded to 128


@dataclass(frozen=True)
class Preset:
    model: Literal["gpt", "bert"]
    config: GPTConfig | BertConfig
    description: str


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
    "bert-tiny": Preset(
        "bert",
        BertConfig(
            n_layer=2, n_head=2, n_embd=64, intermediate_size=256, max_position_embeddings=128
        ),
        "CPU test model: 2 layers, d=64, 2 heads, FFN 256, 128 positions",
    ),
}


def get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise KeyError(
            f"unknown model preset {name!r}; known presets: {', '.join(sorted(PRESETS))}"
        ) from None


def pad_vocab_size(vocab_size: int, multiple: int = 128, tensor_parallel: int = 1) -> int:
    """Round ``vocab_size`` up to a multiple of ``multiple * tensor_parallel`` (Megatron-LM's
    ``make-vocab-size-divisible-by`` x TP): every TP rank gets an equal, kernel-friendly slice
    of the embedding and LM head."""
    for name, value in (
        ("vocab_size", vocab_size),
        ("multiple", multiple),
        ("tensor_parallel", tensor_parallel),
    ):
        if not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    step = multiple * tensor_parallel
    return -(-vocab_size // step) * step


def count_params(config: GPTConfig | BertConfig, exclude_embeddings: bool = False) -> int:
    """Parameter count of the model ``config`` describes, computed without building it."""
    if isinstance(config, GPTConfig):
        return gpt.count_params(config, exclude_embeddings)
    if isinstance(config, BertConfig):
        return bert.count_params(config, exclude_embeddings)
    raise TypeError(f"expected GPTConfig or BertConfig, got {type(config).__name__}")


def build_model(
    preset_or_config: str | Preset | GPTConfig | BertConfig, vocab_size: int | None = None
) -> nn.Module:
    """Build a freshly initialised GPT or Bert.

    ``preset_or_config`` is a preset name, a ``Preset`` or a config. ``vocab_size``, when given,
    replaces the config's and is used as is: pass the tokenizer's size through
    ``pad_vocab_size(n, tensor_parallel=tp)`` first. The preset itself is never modified.
    Build under ``torch.device("meta")`` to defer allocation, then ``to_empty()`` +
    ``init_weights()``.
    """
    if isinstance(preset_or_config, str):
        preset_or_config = get_preset(preset_or_config)
    config = preset_or_config.config if isinstance(preset_or_config, Preset) else preset_or_config
    if not isinstance(config, (GPTConfig, BertConfig)):
        raise TypeError(
            f"expected a preset name, Preset, GPTConfig or BertConfig, got {type(config).__name__}"
        )
    # a copy either way: the module keeps a reference to its config
    if vocab_size is None:
        config = dataclasses.replace(config)
    else:
        config = dataclasses.replace(config, vocab_size=vocab_size)
    return GPT(config) if isinstance(config, GPTConfig) else Bert(config)
