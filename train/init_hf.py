"""``--init-from HF_DIR``: a new run started from the weights of a Hugging Face GPT-2, BERT or
LLaMA directory on local disk (what nanoGPT's ``init_from='gpt2'`` does from the hub), checked
against this run's model and data before any weight is read.

The run trains the folder's model: its config.json sets the family and every field (layers,
width, heads, key-value heads, MLP width, norm epsilon, RoPE base, tied embeddings, positions,
vocabulary), carried over by the family's own mapping (``spec.hf.config_from_hf``). A shape
flag given as well must agree with it (``--dropout`` alone is applied: it is how the run
trains, not what the model computes); a --preset or --model only has to name its family.
The model takes the HF model's vocabulary size (50,257 rows for GPT-2) instead of padding the
data's tokenizer to a multiple: rows a model would add would join the softmax with logits the
HF model never had, and the run would not continue the HF model's loss. The weights are then
read by :func:`train.resume.init_weights` like another run's.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

from train.config import TrainConfig, fail
from train.data.loader import Data
from train.models.spec import shape_flag


def is_hf_directory(path: str) -> bool:
    """An HF model directory (its config.json), not one of our runs or checkpoints."""
    return os.path.isfile(os.path.join(path, "config.json")) and not os.path.exists(
        os.path.join(path, "meta.json")
    )


def hf_init_model(config: TrainConfig) -> tuple[TrainConfig, Any]:
    """(``config`` with the folder's family as its --model, the model config of the folder
    --init-from names) when it names an HF folder, else (``config``, None). One-line SystemExit
    for a config.json we cannot build, a --preset / --model of another family, or shape flags
    that disagree with the folder (each named)."""
    if config.init_from is None or not is_hf_directory(config.init_from):
        return config, None
    from train.eval.load import LoadError, hf_model_config
    from train.models.presets import get_preset

    path = config.init_from
    try:
        spec, model_config = hf_model_config(path)
    except LoadError as e:
        fail(f"--init-from: {e}")
    given = [(f"--model {config.model}", config.model)] if config.model else []
    if config.preset:
        try:
            given.append((f"--preset {config.preset}", get_preset(config.preset).model))
        except KeyError as e:
            fail(str(e.args[0]))
    for flag, family in given:
        if family != spec.name:
            fail(f"--init-from {path}: an HF {spec.hf.model_type} model ({spec.name}); this run "
                 f"trains {family} ({flag}): leave it out, the folder sets the model")  # fmt: skip
    disagree = shape_disagreements(spec, model_config, config.shape())
    if disagree:
        fail(f"--init-from {path}: its config.json builds another model than "
             f"{'; '.join(disagree)}: leave these flags out, the folder sets the model")  # fmt: skip
    if config.dropout is not None:
        model_config = dataclasses.replace(model_config, dropout=config.dropout)
    return dataclasses.replace(config, model=spec.name), model_config


def shape_disagreements(spec, model_config, shape: dict) -> list[str]:
    """Each shape flag given (not None; ``dropout`` aside) that ``model_config`` has another
    value for, as "--num-attention-heads 2 (config.json: n_head 4)"."""
    out = []
    for name, value in shape.items():
        if value is None or name == "dropout":
            continue
        field = spec.shape_fields.get(name)
        if field is None:
            out.append(f"{shape_flag(name)} {value} (the {spec.name} family "
                       f"{spec.shape_fixed.get(name, 'has no such setting')})")  # fmt: skip
        elif getattr(model_config, field) != value:
            out.append(f"{shape_flag(name)} {value} (config.json: {field} "
                       f"{getattr(model_config, field)})")  # fmt: skip
    return out


def read_hf_init_state(
    config: TrainConfig, data: Data, say: Callable[[str], None] = print
) -> tuple[str, dict]:
    """(the directory, the part of a trainer state the model is built from: its family and
    vocabulary rows), or a one-line SystemExit for too few vocabulary rows for the data's ids,
    another tokenizer than the data's, or rows that --tp tensor-parallel ranks cannot share.
    ``say``: where the line saying the folder holds no tokenizer goes."""
    from train.eval.load import LoadError, hf_model_config

    path = config.init_from
    try:
        spec, model_config = hf_model_config(path)
    except LoadError as e:
        fail(f"--init-from: {e}")
    family = spec.name
    rows = model_config.vocab_size
    if data.vocab_size > rows:
        fail(
            f"--init-from {path}: its vocabulary has {rows:,} rows, fewer than the "
            f"{data.vocab_size:,} ids of --data {' '.join(config.data)}"
        )
    tp = config.tp if config.parallel == "tp" else 1
    if rows % tp:
        fail(f"--init-from {path}: its {rows:,} vocabulary rows cannot be split over --tp {tp}")
    if not check_same_tokenizer(path, config):
        say(f"--init-from {path}: the folder holds no tokenizer (tokenizer.json, vocab.txt...), "
            f"so its vocabulary is not checked against --data's beyond its {rows:,} rows covering "
            f"the data's {data.vocab_size:,} ids")  # fmt: skip
    return path, {"config": {"model": family}, "model_config": {"vocab_size": rows}}


def check_same_tokenizer(path: str, config: TrainConfig) -> bool:
    """One-line SystemExit when the HF directory's tokenizer and the data's map any token to
    another id; whether the directory holds a tokenizer (it may hold none)."""
    from train.eval.load import LoadError, hf_dir_tokenizer
    from train.run_record import read_tokenizer, run_tokenizer_path, vocabulary_of

    theirs, ours = hf_dir_tokenizer(path), run_tokenizer_path(config.to_dict())
    if theirs is None or ours is None:
        return theirs is not None
    try:
        hf_vocab, data_vocab = (vocabulary_of(read_tokenizer(p)) for p in (theirs, ours))
    except LoadError as e:
        fail(f"--init-from: {e}")
    moved = sum(1 for token, token_id in data_vocab.items() if hf_vocab.get(token) != token_id)
    if moved or len(hf_vocab) != len(data_vocab):
        fail(
            f"--init-from {path}: its tokenizer is not the one --data was made with ({moved:,} "
            f"of the data's {len(data_vocab):,} tokens have another id or none; "
            f"{len(hf_vocab):,} vs {len(data_vocab):,} tokens)"
        )
    return True
