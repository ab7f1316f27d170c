"""The registry of model families: every family's :class:`~train.models.spec.ModelSpec`, by
name. Adding a family is one line here (its spec module); every question about a family goes
through :func:`get_spec`, :func:`spec_of_model`, :func:`spec_of_config` or
:func:`spec_of_hf`, and a name none
registered is an error."""

from __future__ import annotations

from typing import TypeVar

from torch import nn

from train.models import bert_spec, gpt_spec, llama_spec
from train.models.spec import ModelSpec

SPECS: dict[str, ModelSpec] = {
    spec.name: spec for spec in (gpt_spec.SPEC, bert_spec.SPEC, llama_spec.SPEC)
}

FAMILIES: tuple[str, ...] = tuple(SPECS)

Entry = TypeVar("Entry")


def look_up(table: dict[str, Entry], name: str, what: str, known: str) -> Entry:
    """``table[name]``; else a one-line KeyError: ``unknown {what} 'name'; {known}``."""
    try:
        return table[name]
    except KeyError:
        raise KeyError(f"unknown {what} {name!r}; {known}") from None


def get_spec(name: str) -> ModelSpec:
    """The spec of the family ``name``; KeyError naming the registered ones."""
    return look_up(SPECS, name, "model family", f"registered: {', '.join(FAMILIES)}")


def spec_of_model(model: nn.Module) -> ModelSpec:
    """The spec of the family ``model`` (a plain module of one) belongs to; ValueError for a
    module of no registered family."""
    for spec in SPECS.values():
        if isinstance(model, spec.model_class):
            return spec
    raise ValueError(
        f"{type(model).__name__} is no registered model family's module ({', '.join(FAMILIES)})"
    )


def spec_of_config(config: object) -> ModelSpec:
    """The spec of the family whose config class ``config`` is an instance of; ValueError for
    a config of no registered family."""
    for spec in SPECS.values():
        if isinstance(config, spec.config_class):
            return spec
    raise ValueError(
        f"{type(config).__name__} is no registered model family's config ({', '.join(FAMILIES)})"
    )


def spec_of_hf(model_type: object) -> ModelSpec:
    """The spec whose Hugging Face ``model_type`` (config.json) is ``model_type``; KeyError
    naming the ones known."""
    for spec in SPECS.values():
        if spec.hf.model_type == model_type:
            return spec
    known = ", ".join(spec.hf.model_type for spec in SPECS.values())
    raise KeyError(f"model_type {model_type!r}; known: {known}")
