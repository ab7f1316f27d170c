"""A model and its tokenizer for evaluation or generation: from one of our training runs, or
from a Hugging Face directory (``config.json`` + weights) of a registered family's counterpart,
converted by the family's spec (:mod:`train.models.registry`).

Weights load with ``weights_only=True`` (or from safetensors); nothing from the files is
unpickled as code.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import torch
from torch import nn

from common.safe_io import (
    MAX_JSON_DEPTH,
    UnsafeInputError,
    format_bytes,
    json_depth,
    read_text_capped,
)
from train import checkpoint as ckpt
from train.run_record import (
    LoadError,
    model_config_of,
    read_tokenizer,
    run_tokenizer_path,
    tokenizer_difference,
    tokenizer_sha256s,
)


@dataclass
class LoadedModel:
    model: nn.Module
    kind: str  # the model family (train.models.registry)
    tokenizer_path: str | None
    vocab_size: int | None  # the tokenizer's (unpadded) size when known
    special_ids: dict[str, int]
    source: str  # what was loaded, for the report
    # The tokenizer the weights were trained with, as the run recorded it (kind, vocab_size,
    # sha256, special_ids); None when nothing recorded one (an HF model from elsewhere).
    tokenizer_record: dict | None = None
    trained_tokenizer: str | None = None  # where that tokenizer's file is, if still there


def load_model(path: str, device: torch.device, tokenizer: str | None = None) -> LoadedModel:
    """A run directory (its latest checkpoint), one checkpoint directory, or an HF directory,
    with the tokenizer it is used with: ``tokenizer`` (any format preprocess reads), else the
    one it was trained with. LoadError (one line) when that tokenizer is not the model's."""
    loaded = load_weights_of(path, device, tokenizer)
    if loaded.tokenizer_path is not None:
        check_tokenizer_file(loaded, read_tokenizer(loaded.tokenizer_path), loaded.tokenizer_path)
    return loaded


def load_weights_of(path: str, device: torch.device, tokenizer: str | None = None) -> LoadedModel:
    """:func:`load_model` without the tokenizer check (--init-from reads only the weights)."""
    if not os.path.isdir(path):
        raise LoadError(f"{path}: not a directory (a training run, a checkpoint or an HF model)")
    if os.path.exists(os.path.join(path, "config.json")):
        loaded = _load_hf(path, tokenizer)
    else:
        loaded = _load_run(path, tokenizer)
    loaded.model.to(device).eval()
    return loaded


def _load_run(path: str, tokenizer: str | None) -> LoadedModel:
    """The model of a checkpoint (or of a run's latest), read from its DCP shards: only the
    model's entries, whatever layout it was saved in (the optimizer state is never read)."""
    from train.model_check import ModelCheckError, check_fits, checkpoint_model_shapes

    is_checkpoint = os.path.exists(os.path.join(path, "meta.json"))
    checkpoint = path if is_checkpoint else ckpt.latest_checkpoint(path)
    if checkpoint is None:
        raise LoadError(f"{path}: no checkpoint (and no config.json of an HF model)")
    try:
        ckpt.verify_checkpoint(checkpoint)
        trainer_state = ckpt.read_trainer_state(checkpoint)
        spec, config = model_config_of(trainer_state)
        check_fits(spec, config, checkpoint_model_shapes(checkpoint), checkpoint)
    except (ckpt.CheckpointError, ModelCheckError) as e:
        raise LoadError(f"{checkpoint}: {e}" if checkpoint not in str(e) else str(e)) from None
    model = spec.build(config)
    state = {"model": model.state_dict()}
    try:
        ckpt.load_dcp(checkpoint, state)
        model.load_state_dict(state["model"])
    except ckpt.CheckpointError as e:
        raise LoadError(str(e)) from None
    except (RuntimeError, KeyError, ValueError) as e:
        raise LoadError(f"{checkpoint}: model state does not fit its own config ({e})") from None
    info = trainer_state.get("tokenizer") or {}
    return LoadedModel(
        model=model,
        kind=spec.name,
        tokenizer_path=tokenizer or run_tokenizer_path(trainer_state["config"]),
        trained_tokenizer=run_tokenizer_path(trainer_state["config"]),
        vocab_size=info.get("vocab_size"),
        special_ids=dict(info.get("special_ids") or {}),
        source=checkpoint,
        tokenizer_record=trainer_state.get("tokenizer") or None,
    )


def _load_hf(path: str, tokenizer: str | None) -> LoadedModel:
    try:
        import transformers  # noqa: F401 - checked here: its absence is one clear error
    except ImportError:
        raise LoadError(
            f"{path}: an HF model directory needs the transformers package (pip install "
            "transformers)"
        ) from None
    spec, config = hf_model_config(path)
    model = _load_hf_weights(path, spec, config)
    own = hf_dir_tokenizer(path)
    record = _export_record(path)
    if record is None and own is not None and tokenizer is not None:
        record = read_tokenizer(own).identity()  # the directory's own: --tokenizer must match
    return LoadedModel(
        model, spec.name, tokenizer or own,
        vocab_size=record.get("vocab_size") if record else None,
        special_ids=dict(record.get("special_ids") or {}) if record else {},
        source=path,
        tokenizer_record=record,
        trained_tokenizer=own,
    )  # fmt: skip


def hf_model_config(path: str):
    """The family's spec and our config for HF folder ``path``'s config.json (read bounded,
    every field carried over by the family's own mapping), or one LoadError line."""
    hf_config = read_hf_config(path)
    spec = hf_spec_of(path, hf_config)
    try:
        return spec, spec.hf.config_from_hf(hf_config)
    except (TypeError, ValueError, ZeroDivisionError) as e:
        raise LoadError(f"{path}/config.json: {ckpt._one_line(e)}") from None


def _load_hf_weights(path: str, spec, config) -> nn.Module:
    """``spec.build(config)`` holding the folder's weights, checked like a checkpoint's
    (:mod:`train.model_check`): the memory first, then the weights files' headers, then every
    tensor the model has, under our names, with its shape; none left over."""
    from train.hf_weights import read_weights
    from train.model_check import ModelCheckError, check_fits, check_memory

    what = f"{path}/config.json"
    try:
        check_memory(spec, config, what)
        weights = read_weights(path)
        check_memory(spec, config, what, weights.bytes)  # the model and the weights read
        tensors = spec.hf.state_dict_from_hf(weights.tensors(), config)
        offered = {name: (t.shape, t.dtype) for name, t in tensors.items()}
        check_fits(spec, config, offered, f"{path}: the weights")
    except (UnsafeInputError, ModelCheckError) as e:
        raise LoadError(str(e)) from None
    except (ValueError, RuntimeError) as e:  # the family's mapping: a missing or unused name
        raise LoadError(f"{path}: the weights do not fit config.json ({ckpt._one_line(e)})") from None
    model = spec.build(config)
    model.load_state_dict(tensors)
    return model


# The names preprocess's tokenizer loader looks for in a directory
# (dataset_format.tokenizer.load_tokenizer).
_TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "encoder.json", "vocab.txt")
# shardsmith.json of an export of ours (a step and a tokenizer record) is a few hundred bytes
_EXPORT_RECORD_CAP = 1 << 20


def hf_dir_tokenizer(path: str) -> str | None:
    """The tokenizer an HF directory holds: its tokenizer.json, or the directory when it holds
    another format preprocess reads; None when it holds none."""
    names = os.listdir(path)
    if "tokenizer.json" in names:
        return os.path.join(path, "tokenizer.json")
    if any(name in names for name in _TOKENIZER_FILES) or any(
        name.endswith(".tiktoken") for name in names
    ):
        return path
    return None


def _export_record(path: str) -> dict | None:
    """The tokenizer record an export of ours keeps in shardsmith.json (train/export.py)."""
    file = os.path.join(path, "shardsmith.json")
    if not os.path.exists(file):
        return None
    try:
        record = json.loads(read_text_capped(file, "export record", _EXPORT_RECORD_CAP))
    except (UnsafeInputError, OSError, ValueError) as e:
        raise LoadError(f"{file}: unreadable ({ckpt._one_line(e)})") from None
    tokenizer = record.get("tokenizer") if isinstance(record, dict) else None
    return tokenizer if isinstance(tokenizer, dict) else None


def check_vocabulary(loaded: LoadedModel, given: dict, sha256s: set, what: str) -> None:
    """LoadError (one line) unless the tokenizer ``given`` (its identity record; ``sha256s``:
    the checksums it goes by) that ``what`` names is the model's: no more ids than its
    embedding has rows, and, where the model records the tokenizer it was trained with, the
    same one (kind, size, special ids, checksum), as resuming a run demands."""
    rows = getattr(loaded.model.config, "vocab_size", None)
    size = given.get("vocab_size")
    if isinstance(rows, int) and isinstance(size, int) and size > rows:
        raise LoadError(
            f"{what}: a tokenizer of {size:,} tokens, more than the {rows:,} embedding rows of "
            f"{loaded.source}; it is not this model's tokenizer"
        )
    if loaded.tokenizer_record:
        fault = tokenizer_difference(loaded.tokenizer_record, given, sha256s)
        if fault is not None:
            raise LoadError(
                f"{what}: not the tokenizer {loaded.source} was trained with ({fault}, "
                "given vs trained)"
            )


def check_tokenizer_file(loaded: LoadedModel, tokenizer, path: str) -> None:
    """:func:`check_vocabulary` of the TextTokenizer read from ``path``."""
    sha256s = tokenizer_sha256s(
        tokenizer, path, loaded.tokenizer_record or {}, loaded.trained_tokenizer
    )
    check_vocabulary(loaded, tokenizer.identity(), sha256s, f"--tokenizer {path}")


def read_hf_config(path: str) -> dict:
    """The config.json of HF directory ``path``, checked to describe a model its weights files
    can hold (:func:`check_hf_config_size`)."""
    try:
        text = read_text_capped(os.path.join(path, "config.json"), "HF config", HF_CONFIG_CAP)
        if json_depth(text) > MAX_JSON_DEPTH:
            raise UnsafeInputError(f"{path}/config.json: JSON nested deeper than {MAX_JSON_DEPTH}")
        hf_config = json.loads(text)
        if not isinstance(hf_config, dict):
            raise ValueError("not a JSON object")
    except UnsafeInputError as e:
        raise LoadError(str(e)) from None
    except (OSError, ValueError) as e:
        raise LoadError(f"{path}/config.json: unreadable ({ckpt._one_line(e)})") from None
    check_hf_config_size(path, hf_config)
    return hf_config


def hf_spec_of(path: str, hf_config: dict):
    """The spec of the registered family whose HF counterpart ``hf_config`` describes."""
    from train.models.registry import spec_of_hf

    try:
        return spec_of_hf(hf_config.get("model_type"))
    except KeyError as e:
        raise LoadError(f"{path}/config.json: {e.args[0]}") from None


# config.json of GPT-2 or BERT is ~1 kB; a tokenizer's vocabulary is never in it
HF_CONFIG_CAP = 1 << 20
# The weights files transformers reads from an HF directory (one, or the shards of one)
_WEIGHTS_SUFFIXES = (".safetensors", ".bin")
# The fewest bytes a parameter takes in a weights file we load (float16 / bfloat16)
_MIN_PARAMETER_BYTES = 2
def check_hf_config_size(path: str, hf_config: dict) -> None:
    """LoadError (one line) unless the model `hf_config` describes fits in the weights files
    beside it: layers, width, heads, vocabulary and positions are positive integers, the heads
    divide the width, and the parameters they imply (a lower bound: embeddings and four of each
    layer's matrices) take no more bytes than the weights files hold at 2 bytes a parameter.
    Checked before transformers builds anything: a config asking for 100,000 layers would
    otherwise allocate them for minutes."""
    from train.models.registry import spec_of_hf

    try:
        keys = spec_of_hf(hf_config.get("model_type")).hf.size_keys
    except KeyError:
        return  # not a model type we load: _load_hf says so
    layers, width, heads, vocab, positions, inner = (hf_config.get(key) for key in keys)
    if inner is None:  # an unset inner width is 4x the width (GPT-2's n_inner default)
        inner = 4 * width if isinstance(width, int) else None
    for key, value in zip(keys, (layers, width, heads, vocab, positions, inner)):
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise LoadError(f"{path}/config.json: {key} is {repr(value)[:40]}, not a positive "
                            "integer")
    if width % heads:
        raise LoadError(f"{path}/config.json: {keys[2]} {heads} does not divide {keys[1]} {width}")
    weights = _weights_bytes(path)
    # query and output projections and two MLP matrices: fewer than any of our families has
    # (grouped-query attention shares keys and values, so those are left out)
    per_layer = 2 * width * width + 2 * width * inner
    parameters = (vocab + positions) * width + layers * per_layer
    if parameters * _MIN_PARAMETER_BYTES > weights:
        raise LoadError(
            f"{path}/config.json: {keys[0]}={layers:,}, {keys[1]}={width:,}, {keys[3]}={vocab:,}, "
            f"{keys[4]}={positions:,} make at least {parameters:,} parameters, more than the "
            f"weights files' {format_bytes(weights)} can hold"
        )


def _weights_bytes(path: str) -> int:
    """Bytes of the weights files in HF directory `path` (regular files, or links to them as
    the HF hub's cache makes)."""
    return sum(os.path.getsize(os.path.join(path, name)) for name in os.listdir(path)
               if name.endswith(_WEIGHTS_SUFFIXES) and os.path.isfile(os.path.join(path, name)))


def load_tokenizer(path: str | None):
    """The HF ``tokenizers.Tokenizer`` of :func:`read_tokenizer` (no padding or truncation:
    scores see every token)."""
    from tokenizers import Tokenizer

    return Tokenizer.from_str(read_tokenizer(path).to_json())
