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
    TOKENIZER_CAP,
    UnsafeInputError,
    format_bytes,
    json_depth,
    read_text_capped,
    require_regular_file,
)
from train import checkpoint as ckpt


class LoadError(Exception):
    """A model or tokenizer that cannot be loaded; the message names the file and the fault."""


@dataclass
class LoadedModel:
    model: nn.Module
    kind: str  # the model family (train.models.registry)
    tokenizer_path: str | None
    vocab_size: int | None  # the tokenizer's (unpadded) size when known
    special_ids: dict[str, int]
    source: str  # what was loaded, for the report


def load_model(path: str, device: torch.device, tokenizer: str | None = None) -> LoadedModel:
    """A run directory (its latest checkpoint), one checkpoint directory, or an HF directory."""
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
    from train.export import model_config_of

    is_checkpoint = os.path.exists(os.path.join(path, "meta.json"))
    checkpoint = path if is_checkpoint else ckpt.latest_checkpoint(path)
    if checkpoint is None:
        raise LoadError(f"{path}: no checkpoint (and no config.json of an HF model)")
    try:
        ckpt.verify_checkpoint(checkpoint)
        trainer_state = ckpt.read_trainer_state(checkpoint)
        spec, config = model_config_of(trainer_state)
    except ckpt.CheckpointError as e:
        raise LoadError(str(e)) from None
    except (TypeError, ValueError) as e:
        raise LoadError(f"{checkpoint}/trainer.pt: bad model_config ({e})") from None
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
        vocab_size=info.get("vocab_size"),
        special_ids=dict(info.get("special_ids") or {}),
        source=checkpoint,
    )


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


def _load_hf(path: str, tokenizer: str | None) -> LoadedModel:
    try:
        import transformers  # noqa: F401 - checked here: its absence is one clear error
    except ImportError:
        raise LoadError(
            f"{path}: an HF model directory needs the transformers package (pip install "
            "transformers)"
        ) from None
    from train.models.registry import spec_of_hf

    try:
        text = read_text_capped(os.path.join(path, "config.json"), "HF config", HF_CONFIG_CAP)
        if json_depth(text) > MAX_JSON_DEPTH:
            raise UnsafeInputError(f"{path}/config.json: JSON nested deeper than {MAX_JSON_DEPTH}")
        hf_config = json.loads(text)
        model_type = hf_config.get("model_type")
        architectures = hf_config.get("architectures") or []
    except UnsafeInputError as e:
        raise LoadError(str(e)) from None
    except (OSError, ValueError, AttributeError) as e:
        raise LoadError(f"{path}/config.json: unreadable ({ckpt._one_line(e)})") from None
    check_hf_config_size(path, hf_config)
    # use_safetensors=None: safetensors when present, else pytorch_model.bin, which
    # transformers loads with weights_only=True.
    try:
        spec = spec_of_hf(model_type)
    except KeyError as e:
        raise LoadError(f"{path}/config.json: {e.args[0]}") from None
    try:
        model = spec.hf.load(path, architectures)
    except (OSError, ValueError) as e:
        raise LoadError(f"{path}: cannot load the HF model ({e})") from None
    tokenizer_path = tokenizer
    if tokenizer_path is None and os.path.exists(os.path.join(path, "tokenizer.json")):
        tokenizer_path = os.path.join(path, "tokenizer.json")
    elif tokenizer_path is None and os.path.exists(os.path.join(path, "merges.txt")):
        tokenizer_path = path  # GPT-2's vocab.json + merges.txt
    return LoadedModel(model, spec.name, tokenizer_path, None, {}, path)


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
    """An HF ``tokenizers.Tokenizer`` without padding or truncation (scores see every token):
    a ``tokenizer.json``, or a directory with GPT-2's ``vocab.json`` + ``merges.txt``."""
    if path is None:
        raise LoadError("no tokenizer: pass --tokenizer FILE (tokenizer.json)")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    try:
        if os.path.isdir(path):
            files = [os.path.join(path, name) for name in ("vocab.json", "merges.txt")]
            for file in files:  # read by the Rust library: checked here, before it opens them
                if require_regular_file(file, "tokenizer file").st_size > TOKENIZER_CAP:
                    raise UnsafeInputError(
                        f"tokenizer file {file} is larger than its cap of "
                        f"{format_bytes(TOKENIZER_CAP)}"
                    )
            tokenizer = Tokenizer(models.BPE.from_file(*files))
            tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
            tokenizer.decoder = decoders.ByteLevel()
            return tokenizer
        text = read_text_capped(path, "tokenizer", TOKENIZER_CAP)
        if json_depth(text) > MAX_JSON_DEPTH:
            raise UnsafeInputError(f"tokenizer {path}: JSON nested deeper than {MAX_JSON_DEPTH}")
        tokenizer = Tokenizer.from_str(text)
    except UnsafeInputError as e:
        raise LoadError(str(e)) from None
    except Exception as e:  # noqa: BLE001 - tokenizers raises plain Exception on a bad file
        raise LoadError(f"{path}: not a tokenizer.json ({ckpt._one_line(e)})") from None
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer
