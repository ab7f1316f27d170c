"""The run record: what a checkpoint records of the run that made it, read the one way that
evaluation (:mod:`train.eval.load`), export (:mod:`train.export`, :mod:`train.export_tokenizer`)
and initialisation (:mod:`train.init_hf`) all read it: the model family and config of a
checkpoint, the tokenizer the run trained with, and whether a tokenizer given later is that
one (its kind, size, special ids and checksums).
"""

from __future__ import annotations

import os

from train import checkpoint as ckpt
from train.model_check import ModelCheckError, config_from_fields
from train.models.registry import get_spec
from train.models.spec import ModelSpec


class LoadError(Exception):
    """A model or tokenizer that cannot be loaded; the message names the file and the fault."""


def model_config_of(trainer_state: dict) -> tuple[ModelSpec, object]:
    """The spec of the checkpoint's model family and its model config."""
    family = trainer_state["config"].get("model")
    fields = trainer_state.get("model_config")
    if not isinstance(family, str) or not isinstance(fields, dict):
        raise ckpt.CheckpointError("trainer.pt: no model family and model_config recorded")
    try:
        spec = get_spec(family)
    except KeyError as e:
        raise ckpt.CheckpointError(f"trainer.pt: {e.args[0]}") from None
    try:
        return spec, config_from_fields(spec, fields, "trainer.pt")
    except ModelCheckError as e:
        raise ckpt.CheckpointError(str(e)) from None


def run_tokenizer_path(config: dict) -> str | None:
    """The tokenizer the run trained with: its --tokenizer file, else the first shard set's
    (if it still exists)."""
    from dataset_format import FormatError, ShardSet
    from train.data import parse_data_spec

    if isinstance(config.get("tokenizer"), str) and os.path.isfile(config["tokenizer"]):
        return config["tokenizer"]
    try:
        sources = parse_data_spec(config.get("data") or [])
        return ShardSet(sources[0][1]).tokenizer_path if sources else None
    except (ValueError, FormatError, OSError):
        return None


def read_tokenizer(path: str | None):
    """The tokenizer at ``path`` in any format preprocess reads (a tokenizer.json, vocab.txt,
    encoder.json + vocab.bpe, vocab.json + merges.txt, *.tiktoken, or a directory holding one),
    by the one loader preprocess uses: a ``TextTokenizer``."""
    from dataset_format.tokenizer import load_tokenizer as load_text_tokenizer

    if path is None:
        raise LoadError(
            "no tokenizer: pass --tokenizer (tokenizer.json, vocab.txt, a directory...)"
        )
    try:
        return load_text_tokenizer(path)
    except (ValueError, OSError) as e:  # UnsafeInputError is a ValueError
        message = ckpt._one_line(e)
        raise LoadError(message if path in message else f"{path}: {message}") from None


def tokenizer_sha256s(tokenizer, path: str, record: dict, trained: str | None) -> set:
    """The checksums the TextTokenizer read from ``path`` goes by: its JSON's, its file's,
    and the ``record``ed one of the tokenizer a model trained with (at ``trained``) when the
    two map every token to the same id: another file of the same vocabulary (GPT-2's
    tiktoken ranks for a run's tokenizer.json) is the same tokenizer."""
    sha256s = {tokenizer.identity()["sha256"], tokenizer_file_sha256(path)}
    if record.get("sha256") not in sha256s and trained is not None and trained != path:
        if vocabulary_of(tokenizer) == vocabulary_of(read_tokenizer(trained)):
            sha256s.add(record["sha256"])
    return sha256s


def vocabulary_of(text_tokenizer) -> dict[str, int]:
    """Every token of a TextTokenizer (added tokens too) -> its id."""
    from tokenizers import Tokenizer

    return Tokenizer.from_str(text_tokenizer.to_json()).get_vocab(with_added_tokens=True)


def tokenizer_difference(trained: dict, given: dict, given_sha256s: set) -> str | None:
    """The first of kind, vocab_size, special ids and checksum in which tokenizer record
    ``given`` differs from ``trained`` (what a run records: TokenizerInfo.to_json() or
    TextTokenizer.identity()), as "field: given vs trained"; None when they agree. A field
    either record leaves empty is not compared (a --vocab-size run records no kind)."""

    def kind(record: dict) -> str:
        return str(record.get("kind") or "").replace("-", "_")

    pairs = [
        ("vocab_size", given.get("vocab_size"), trained.get("vocab_size")),
        ("kind", kind(given), kind(trained) if kind(trained) != "unknown" else ""),
        ("special ids", given.get("special_ids"), trained.get("special_ids")),
    ]
    for name, ours, theirs in pairs:
        if ours and theirs and ours != theirs:
            return f"{name}: {ours} vs {theirs}"
    sha = trained.get("sha256")
    # an export of ours writes the tokenizer.json its record also goes by (train/export.py)
    known = {sha, trained.get("exported_sha256")}
    if sha and not (given_sha256s - {"", None}) & known:
        return f"sha256: {min(given_sha256s - {'', None}, default='?')[:12]}... vs {sha[:12]}..."
    return None


def tokenizer_file_sha256(path: str) -> str:
    """The checksum of a tokenizer given as one file (a run given --tokenizer FILE records the
    file's own); "" for a directory or a file pair."""
    from dataset_format import file_sha256

    return file_sha256(path) if os.path.isfile(path) else ""
