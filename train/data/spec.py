"""What to train on: the `--data-path` spec, tokenizer agreement across sets, document splits."""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np

from dataset_format import ShardSet, TokenizerInfo

DataSource = tuple[float, str]  # (weight, path of a shard-set dir or a bare .bin/.idx prefix)
SPLIT_NAMES = ("train", "valid", "test")


class Dataset(Protocol):
    """Map-style dataset of numpy samples (what torch's DataLoader needs, without torch)."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> dict[str, np.ndarray]: ...


def _as_weight(token: str) -> float | None:
    try:
        value = float(token)
    except ValueError:
        return None
    return value


def parse_data_spec(tokens: list[str]) -> list[DataSource]:
    """Megatron's `--data-path`: one path, or `W1 PATH1 W2 PATH2 ...`; weights normalised to 1.

    ["shards/"] -> [(1.0, "shards/")]; ["3", "wiki/", "7", "web/"] -> [(0.3, "wiki/"), (0.7, "web/")].
    """
    tokens = [str(t) for t in tokens]
    if not tokens:
        raise ValueError("data spec is empty: give a shard-set path, or 'W1 PATH1 W2 PATH2 ...'")
    if len(tokens) == 1:
        if _as_weight(tokens[0]) is not None:
            raise ValueError(f"data spec {tokens}: a weight without a path")
        return [(1.0, tokens[0])]
    if len(tokens) % 2:
        raise ValueError(
            f"data spec {tokens}: {len(tokens)} items; several sets need 'W1 PATH1 W2 PATH2 ...' "
            "(an even number of items)"
        )
    sources: list[tuple[float, str]] = []
    for weight_token, path in zip(tokens[0::2], tokens[1::2]):
        weight = _as_weight(weight_token)
        if weight is None:
            raise ValueError(
                f"data spec {tokens}: expected a weight before {path!r}, got {weight_token!r} "
                "(several sets need 'W1 PATH1 W2 PATH2 ...')"
            )
        if not math.isfinite(weight) or weight <= 0:
            raise ValueError(
                f"data spec {tokens}: weight of {path!r} must be positive, got {weight}"
            )
        if _as_weight(path) is not None:
            raise ValueError(
                f"data spec {tokens}: expected a path after {weight_token!r}, got {path!r}"
            )
        sources.append((weight, path))
    total = sum(w for w, _ in sources)
    return [(w / total, p) for w, p in sources]


def check_tokenizers(sources: list[DataSource]) -> TokenizerInfo | None:
    """The one tokenizer every set was made with; ValueError naming two sets that disagree.

    Sets without tokenizer info (bare Megatron prefixes, imports without flags) cannot be
    checked and are left out; None when no set records one.
    """
    known: list[tuple[str, TokenizerInfo]] = []
    for _, path in sources:
        manifest = ShardSet(path).manifest
        if manifest is not None and manifest.tokenizer is not None:
            known.append((path, manifest.tokenizer))
    if not known:
        return None
    first_path, first = known[0]
    for path, info in known[1:]:
        differences = [
            f"{field}: {getattr(first, field)!r} vs {getattr(info, field)!r}"
            for field in ("kind", "vocab_size", "sha256")
            if getattr(first, field) != getattr(info, field)
            and not (field == "sha256" and not (first.sha256 and info.sha256))
        ]
        if differences:
            raise ValueError(
                f"shard sets {first_path} and {path} were made with different tokenizers "
                f"({'; '.join(differences)}); one model needs one tokenizer"
            )
    return first


def _parse_split(split: str) -> list[float]:
    separator = "/" if "/" in split else ","
    try:
        parts = [float(p) for p in split.split(separator)]
    except ValueError:
        raise ValueError(f"split {split!r}: expected up to 3 numbers like '969,30,1'") from None
    if len(parts) > 3:
        raise ValueError(f"split {split!r}: at most 3 parts (train, valid, test)")
    if any(not math.isfinite(p) or p < 0 for p in parts):
        raise ValueError(f"split {split!r}: parts must be non-negative numbers")
    if sum(parts) <= 0:
        raise ValueError(f"split {split!r}: parts sum to zero")
    return parts + [0.0] * (3 - len(parts))


def split_documents(num_documents: int, split: str = "969,30,1") -> dict[str, tuple[int, int]]:
    """Megatron's train/valid/test document ranges: round each share, give the rest to train.

    Same arithmetic as Megatron-LM's `get_train_valid_test_split_`, so the same data and split
    string give the same documents in each split as there; where that would leave train a
    negative size (a tiny train share rounded against it), the shortfall is taken from the
    next splits instead.
    """
    if num_documents < 0:
        raise ValueError(f"num_documents must be >= 0, got {num_documents}")
    parts = _parse_split(split)
    total = sum(parts)
    sizes = [int(round(part / total * float(num_documents))) for part in parts]
    sizes[0] -= sum(sizes) - num_documents
    for i in range(len(sizes) - 1):
        if sizes[i] < 0:
            sizes[i + 1] += sizes[i]
            sizes[i] = 0
    bounds = [0]
    for size in sizes:
        bounds.append(bounds[-1] + size)
    return {name: (bounds[i], bounds[i + 1]) for i, name in enumerate(SPLIT_NAMES)}
