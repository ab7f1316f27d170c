"""What to train on: the `--data-path` spec, tokenizer agreement across sets, document splits."""

from __future__ import annotations

import hashlib
import math
from typing import Protocol

import numpy as np

from common.safe_io import TOKENIZER_CAP, read_bytes_capped
from dataset_format import SPECIAL_TOKEN_NAMES, ShardSet, TokenizerInfo
from dataset_format.tokenizer_files import token_ids_of_file

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


def tokenizer_info_from_file(path: str) -> TokenizerInfo:
    """What `--tokenizer FILE` says of data that records no tokenizer: vocab size, special ids.

    FILE is a `tokenizers` JSON (the pipeline's tokenizer.json, a Hugging Face tokenizer.json),
    a GPT-2 vocab.json (token -> id; Megatron's --vocab-file for GPT-2), a tiktoken ranks file
    or a WordPiece vocab.txt (a token a line; BERT's), read and checked by the pipeline's own
    readers (dataset_format.tokenizer_files). The vocabulary size is one more than the largest
    id, as the pipeline records it; the checksum is of FILE itself.
    """
    # a regular file under the cap: --tokenizer /dev/zero read 3.4 GB before a MemoryError
    raw = read_bytes_capped(path, "--tokenizer", TOKENIZER_CAP)
    try:
        token_ids, kind = token_ids_of_file(raw, path)
    except ValueError as e:  # one line naming the file, the line or token, and the cap
        raise ValueError(f"--tokenizer {e}") from None
    if not token_ids:
        raise ValueError(f"--tokenizer {path}: no vocabulary of token ids in it")
    ids = token_ids.values()
    special_ids = {}
    for name, candidates in SPECIAL_TOKEN_NAMES.items():
        found = [token_ids[token] for token in candidates if token in token_ids]
        if found:
            special_ids[name] = found[0]
    return TokenizerInfo(
        file=None,
        kind=kind,
        vocab_size=max(ids) + 1,
        sha256=hashlib.sha256(raw).hexdigest(),
        special_ids=special_ids,
    )


def resolve_tokenizer(
    sources: list[DataSource], *, tokenizer_file: str | None = None, vocab_size: int | None = None
) -> TokenizerInfo:
    """The tokenizer to train with: the sets' own, else `--tokenizer` or `--vocab-size`.

    Bare Megatron/NeMo/datatrove pairs record none; the flag supplies it. Where a set does
    record one, a flag that contradicts it (another vocabulary size or special id) is an error.
    """
    recorded = check_tokenizers(sources)
    given, flag = None, ""
    if tokenizer_file is not None:
        given, flag = tokenizer_info_from_file(tokenizer_file), f"--tokenizer {tokenizer_file}"
    elif vocab_size is not None:
        if vocab_size <= 0:
            raise ValueError(f"--vocab-size must be positive, got {vocab_size}")
        given = TokenizerInfo(file=None, kind="unknown", vocab_size=vocab_size)
        flag = f"--vocab-size {vocab_size}"
    if recorded is None:
        if given is None:
            raise ValueError(
                "no shard set records its tokenizer, so nothing sizes the model's vocabulary; "
                "for bare .bin/.idx pairs (Megatron, NeMo, datatrove) pass --tokenizer FILE or "
                "--vocab-size N"
            )
        return given
    if given is not None:
        conflicts = [
            f"{name} id {given.special_ids[name]} vs {recorded.special_ids[name]}"
            for name in sorted(set(given.special_ids) & set(recorded.special_ids))
            if given.special_ids[name] != recorded.special_ids[name]
        ]
        if given.vocab_size != recorded.vocab_size:
            conflicts.insert(0, f"vocab_size {given.vocab_size} vs {recorded.vocab_size}")
        if conflicts:
            raise ValueError(
                f"{flag} contradicts the tokenizer the shard sets record ({'; '.join(conflicts)})"
            )
    return recorded


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
    """megatron-core's train/valid/test document ranges: the shares are normalised, summed into
    book-ends [0, s0, s0 + s1, 1], and each book-end times the document count is rounded
    (Python's round, half to even), so the same data and split string give the same documents
    in each split as megatron-core's BlendedMegatronDatasetBuilder. (Megatron-LM's older
    `get_train_valid_test_split_` rounded each share and moved the difference onto every
    boundary; its ranges can differ by a document.)
    """
    if num_documents < 0:
        raise ValueError(f"num_documents must be >= 0, got {num_documents}")
    parts = _parse_split(split)
    total = float(sum(parts))
    ends = [0.0]
    for part in parts:
        ends.append(ends[-1] + part / total)
    bounds = [int(round(end * float(num_documents))) for end in ends]
    return {name: (bounds[i], bounds[i + 1]) for i, name in enumerate(SPLIT_NAMES)}
