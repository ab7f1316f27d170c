"""What every family's Hugging Face mapping shares (each family's own mapping is its spec's
:class:`~train.models.spec.HFMapping`, next to the spec: ``gpt_spec``, ``bert_spec``...):
reading a config.json's fields through ``transformers``, carrying config fields over by
(ours, HF) name pairs, naming each layer's tensors, and checking a state dict's keys.

``transformers`` is imported inside :func:`transformers_config` only; the rest is pure tensor
and name handling.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

StateDict = dict[str, torch.Tensor]


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
