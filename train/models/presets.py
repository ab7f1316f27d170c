"""Named model configurations, gathered from the registered families' specs, and the helpers
that turn them into modules.

Each family declares its own presets (``train/models/*_spec.py``); this is the one table of
all of them, so a name means one model whatever its family. Parameter counts are computed
from the config (``count_params``), so a preset can be sized without allocating it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from torch import nn

from train.models.registry import SPECS, look_up
from train.models.spec import ModelSpec, Preset


def _all_presets() -> dict[str, Preset]:
    presets: dict[str, Preset] = {}
    for spec in SPECS.values():
        for name, preset in spec.presets.items():
            if name in presets:
                raise ValueError(f"preset {name} is declared by two model families")
            presets[name] = preset
    return presets


PRESETS: dict[str, Preset] = _all_presets()


def get_preset(name: str) -> Preset:
    """The preset ``name``; KeyError naming the known ones."""
    return look_up(PRESETS, name, "model preset", f"known presets: {', '.join(sorted(PRESETS))}")


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


def spec_of_config(config: Any) -> ModelSpec:
    """The family whose config class ``config`` is; TypeError naming the known ones."""
    for spec in SPECS.values():
        if isinstance(config, spec.config_class):
            return spec
    known = ", ".join(spec.config_class.__name__ for spec in SPECS.values())
    raise TypeError(f"expected a model config ({known}), got {type(config).__name__}")


def count_params(config: Any, exclude_embeddings: bool = False) -> int:
    """Parameter count of the model ``config`` describes, computed without building it."""
    return spec_of_config(config).count_params(config, exclude_embeddings)


def build_model(preset_or_config: str | Preset | Any, vocab_size: int | None = None) -> nn.Module:
    """Build a freshly initialised model of the family its config belongs to.

    ``preset_or_config`` is a preset name, a ``Preset`` or a config. ``vocab_size``, when given,
    replaces the config's and is used as is: pass the tokenizer's size through
    ``pad_vocab_size(n, tensor_parallel=tp)`` first. The preset itself is never modified.
    Build under ``torch.device("meta")`` to defer allocation, then ``to_empty()`` +
    ``init_weights()``.
    """
    if isinstance(preset_or_config, str):
        preset_or_config = get_preset(preset_or_config)
    config = preset_or_config.config if isinstance(preset_or_config, Preset) else preset_or_config
    spec = spec_of_config(config)
    # a copy either way: the module keeps a reference to its config
    if vocab_size is None:
        config = dataclasses.replace(config)
    else:
        config = dataclasses.replace(config, vocab_size=vocab_size)
    return spec.build(config)
