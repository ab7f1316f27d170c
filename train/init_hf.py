"""``--init-from HF_DIR``: a new run started from the weights of a Hugging Face GPT-2, BERT or
LLaMA directory on local disk (what nanoGPT's ``init_from='gpt2'`` does from the hub), checked
against this run's model and data before any weight is read.

The model takes the HF model's vocabulary size (50,257 rows for GPT-2) instead of padding the
data's tokenizer to a multiple: rows a model would add would join the softmax with logits the
HF model never had, and the run would not continue the HF model's loss. The weights are then
read by :func:`train.resume.init_weights` like another run's.
"""

from __future__ import annotations

import os

from train.config import TrainConfig, fail
from train.data.loader import Data


def is_hf_directory(path: str) -> bool:
    """An HF model directory (its config.json), not one of our runs or checkpoints."""
    return os.path.isfile(os.path.join(path, "config.json")) and not os.path.exists(
        os.path.join(path, "meta.json")
    )


def read_hf_init_state(config: TrainConfig, data: Data) -> tuple[str, dict]:
    """(the directory, the part of a trainer state the model is built from: its family and
    vocabulary rows), or a one-line SystemExit for a model of another family, too few
    vocabulary rows for the data's ids, another tokenizer than the data's, or rows that
    --tp tensor-parallel ranks cannot share."""
    from train.eval.load import LoadError, hf_spec_of, read_hf_config

    path = config.init_from
    try:
        hf_config = read_hf_config(path)
        family = hf_spec_of(path, hf_config).name
    except LoadError as e:
        fail(f"--init-from: {e}")
    if family != config.model:
        fail(
            f"--init-from {path}: an HF {hf_config.get('model_type')} model ({family}); this run "
            f"trains {config.model} (--preset)"
        )
    rows = hf_config.get("vocab_size")  # a positive int: read_hf_config checked it
    if data.vocab_size > rows:
        fail(
            f"--init-from {path}: its vocabulary has {rows:,} rows, fewer than the "
            f"{data.vocab_size:,} ids of --data {' '.join(config.data)}"
        )
    tp = config.tp if config.parallel == "tp" else 1
    if rows % tp:
        fail(f"--init-from {path}: its {rows:,} vocabulary rows cannot be split over --tp {tp}")
    check_same_tokenizer(path, config)
    return path, {"config": {"model": family}, "model_config": {"vocab_size": rows}}


def check_same_tokenizer(path: str, config: TrainConfig) -> None:
    """One-line SystemExit when the HF directory's tokenizer and the data's map any token to
    another id (when both are at hand: an HF directory may hold no tokenizer)."""
    from train.eval.load import (
        LoadError,
        hf_dir_tokenizer,
        read_tokenizer,
        run_tokenizer_path,
        vocabulary_of,
    )

    theirs, ours = hf_dir_tokenizer(path), run_tokenizer_path(config.to_dict())
    if theirs is None or ours is None:
        return
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
