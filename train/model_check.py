"""A model config from a file, checked against the tensors offered for it before the model is
built: the one validator of every place a model is loaded (our checkpoints' ``model_config``
over their DCP files, a Hugging Face folder's ``config.json`` over its weights files).

A config is untrusted like the weights it describes: its fields must make a model of its family
(the config class's own checks: positive ints, heads dividing the width...), that model must
fit the memory there is, its parameters must be no more than the weights hold (a config of
100,000 layers over two layers' weights is refused before anything is built), and then every
tensor the model has must be offered with its shape and a floating dtype, none left over.
Every refusal is one ``ModelCheckError`` line.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from typing import Any

import torch

from common.safe_io import format_bytes

# The model is built in fp32 (4 bytes a parameter) before the weights are copied in.
BUILD_BYTES_PER_PARAMETER = 4
WEIGHT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


class ModelCheckError(ValueError):
    """A model config that does not describe the weights offered, or no model that fits."""


def config_from_fields(spec: Any, fields: object, what: str) -> Any:
    """``spec``'s config class from a recorded dict of its fields (unknown keys ignored, as an
    older run's), or a one-line ModelCheckError naming the field at fault."""
    if not isinstance(fields, Mapping):
        raise ModelCheckError(f"{what}: model_config is a {type(fields).__name__}, not a dict")
    known = {f.name: f for f in dataclasses.fields(spec.config_class)}
    for name, value in fields.items():
        field = known.get(name)
        if field is None:
            continue
        expected = type(field.default)
        fault = _type_fault(value, expected)
        if fault:
            raise ModelCheckError(f"{what}: model_config {name} is {repr(value)[:40]}, {fault}")
    try:
        return spec.config_class(**{k: v for k, v in fields.items() if k in known})
    except (TypeError, ValueError) as e:
        raise ModelCheckError(f"{what}: not a {spec.name} model ({_one_line(e)})") from None


def _type_fault(value: object, expected: type) -> str | None:
    if expected is bool:
        return None if isinstance(value, bool) else "not true or false"
    if isinstance(value, bool):
        return f"not a {expected.__name__}"
    if expected is float:
        return None if isinstance(value, (int, float)) else "not a number"
    if expected is int:
        return None if isinstance(value, int) else "not an integer"
    return None


def available_memory() -> int | None:
    """Bytes of memory this machine can still give (MemAvailable), None where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def check_memory(spec: Any, config: Any, what: str, extra_bytes: int = 0) -> int:
    """The config's parameter count; one-line ModelCheckError when building it (plus
    ``extra_bytes`` held beside it: the weights read) needs more memory than is available."""
    parameters = spec.count_params(config, False)
    needed = parameters * BUILD_BYTES_PER_PARAMETER + extra_bytes
    free = available_memory()
    if free is not None and needed > free:
        raise ModelCheckError(
            f"{what}: {_shape(config)} make a model of {parameters:,} parameters, "
            f"{format_bytes(needed)} to build, more than the {format_bytes(free)} of memory "
            "available"
        )
    return parameters


def check_size(
    spec: Any, config: Any, offered: Mapping[str, tuple[torch.Size, torch.dtype]], what: str,
    extra_bytes: int = 0,
) -> None:
    """One-line ModelCheckError when the model of ``config`` does not fit the memory (beside
    ``extra_bytes``) or has more parameters than ``offered`` holds (a tied head offered twice
    over-counts them, never under)."""
    parameters = check_memory(spec, config, what, extra_bytes)
    held = sum(math.prod(shape) for shape, _ in offered.values())
    if parameters > held:
        raise ModelCheckError(
            f"{what}: {_shape(config)} make {parameters:,} parameters; the weights hold "
            f"{held:,}"
        )


def check_fits(
    spec: Any, config: Any, offered: Mapping[str, tuple[torch.Size, torch.dtype]], what: str
) -> None:
    """One-line ModelCheckError unless ``offered`` (our tensor names -> shape and dtype) holds
    exactly the tensors ``spec.build(config)`` has, each with its shape and a floating dtype.
    The memory and the parameter count are checked first, so a config far larger than the
    weights is refused before even a meta-device model is built."""
    check_size(spec, config, offered, what)
    with torch.device("meta"):
        expected = {name: t.shape for name, t in spec.build(config).state_dict().items()}
    missing = sorted(expected.keys() - offered.keys())
    unused = sorted(offered.keys() - expected.keys())
    shapes = [
        f"{name} {tuple(offered[name][0])} (the config makes {tuple(shape)})"
        for name, shape in expected.items()
        if name in offered and tuple(offered[name][0]) != tuple(shape)
    ]
    dtypes = [f"{n} {offered[n][1]}" for n in expected if n in offered
              and offered[n][1] not in WEIGHT_DTYPES]  # fmt: skip
    faults = [
        _listed("missing", missing),
        _listed("not used by the model", unused),
        _listed("of another shape", shapes),
        _listed("not floating point", dtypes),
    ]
    faults = [f for f in faults if f]
    if faults:
        raise ModelCheckError(f"{what}: tensors do not fit {_shape(config)}: {'; '.join(faults)}")


def _listed(label: str, items: list[str], shown: int = 3) -> str:
    if not items:
        return ""
    more = f" and {len(items) - shown:,} more" if len(items) > shown else ""
    return f"{len(items):,} {label} ({', '.join(items[:shown])}{more})"


def _shape(config: Any) -> str:
    """The config's integer fields, as "n_layer=2, n_head=4, ..." (what a refusal names)."""
    return ", ".join(
        f"{f.name}={getattr(config, f.name)}"
        for f in dataclasses.fields(config)
        if isinstance(getattr(config, f.name), int) and not isinstance(getattr(config, f.name), bool)
    )


def _one_line(error: BaseException, limit: int = 300) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def checkpoint_model_shapes(path: str) -> dict[str, tuple[torch.Size, torch.dtype]]:
    """The model tensors of verified checkpoint ``path`` (our names, their whole shapes and
    dtypes), from its DCP metadata read through the checked reader; no tensor data read."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    from common.safe_io import UnsafeInputError
    from train import checkpoint as ckpt
    from train.checkpoint_io import read_checked_metadata

    sizes = {name: record["bytes"] for name, record in ckpt.read_meta(path)["files"].items()}
    try:
        entries = read_checked_metadata(path, sizes).state_dict_metadata
    except UnsafeInputError as e:
        raise ckpt.CheckpointError(str(e)) from None
    return {
        key[len("model."):]: (entry.size, entry.properties.dtype)
        for key, entry in entries.items()
        if key.startswith("model.") and isinstance(entry, TensorStorageMetadata)
    }
