"""Where a run starts from: its own latest checkpoint (``--resume``, or a torchrun restart of
the same job), or the weights of another run's (``--init-from``), checked against this run's
data and model before any weight is read."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

from common.output_dir import OutputError, OutputFolder, claim_output_folder
from train import checkpoint as ckpt
from train.config import TrainConfig, fail, run_identity_fields
from train.data.loader import Data
from train.init_hf import is_hf_directory, read_hf_init_state
from train.models.spec import SHAPE_SETTINGS, shape_flag


def data_identity(specs: list[str]) -> list[str]:
    """--data with local paths made absolute: the same sets named from another directory
    compare equal."""
    return [os.path.abspath(s) if os.path.exists(s) else s for s in specs]


RESUME_MODEL = ("model", "preset", "optimizer")  # --init-from keeps only the weights: no optimizer


def check_same_model(
    state: dict, config: TrainConfig, data: Data, what: str, keys: tuple[str, ...]
) -> None:
    """One clear error (``what``: "cannot resume from PATH") for a checkpoint of another
    model (the config ``keys`` differ) or of data made with another tokenizer."""
    saved = state["config"]
    for key in keys:
        if saved.get(key) != getattr(config, key):
            fail(
                f"{what}: it was saved with --{key} {saved.get(key)}, "
                f"this run has --{key} {getattr(config, key)}"
            )
    saved_tok, tok = state.get("tokenizer"), data.tokenizer
    if saved_tok and tok:
        for key in ("kind", "vocab_size", "sha256", "special_ids"):
            if saved_tok.get(key) != tok.get(key):
                fail(
                    f"{what}: --data {' '.join(config.data)} was made with "
                    f"another tokenizer than the checkpoint ({key}: {tok.get(key)!r} in the data, "
                    f"{saved_tok.get(key)!r} in the checkpoint)"
                )


def changed_identity(state: dict, config: TrainConfig) -> list[tuple[str, str, str]]:
    """(flag, saved value, this run's value) of every run-identity setting (the schedule and
    the data, marked in train.config) that differs from the checkpoint's: resuming with other
    values would mix two data streams, batch sizes or learning-rate curves in one lineage.
    Both configs are resolved (defaults such as --warmup-steps filled), so a new --max-steps
    also names the defaults that follow it."""
    saved, changed = state["config"], []
    for name in run_identity_fields():
        flag = f"--{name.replace('_', '-')}"
        if name == "data":  # the same sets named from another directory are the same data
            if state.get("data_identity") != data_identity(config.data):
                changed.append((flag, " ".join(saved.get("data", [])), " ".join(config.data)))
        elif saved.get(name) != getattr(config, name):
            changed.append((flag, str(saved.get(name)), str(getattr(config, name))))
    return changed


def check_resumable(state: dict, config: TrainConfig, data: Data, path: str) -> None:
    """One clear error for a checkpoint that does not belong to this run's data and model."""
    check_same_model(state, config, data, f"cannot resume from {path}", RESUME_MODEL)
    changed = [] if config.allow_config_change else changed_identity(state, config)
    if changed:
        differences = "; ".join(
            f"it was saved with {flag} {before}, this run has {flag} {now}"
            for flag, before, now in changed
        )
        fail(
            f"cannot resume from {path}: {differences}; pass --allow-config-change to continue "
            "it anyway, or choose another --out"
        )


def with_saved_shape(state: dict, config: TrainConfig, path: str) -> TrainConfig:
    """``config`` with the model-shape settings it leaves open (None) taken from the
    checkpoint it resumes, so a resume needs no --num-layers etc.; one that gives another
    value than the checkpoint's is refused (its weights would not fit)."""
    shape = {}
    for name in SHAPE_SETTINGS:
        mine, theirs = getattr(config, name), state["config"].get(name)
        if mine is not None and mine != theirs:
            before = "the preset's" if theirs is None else theirs
            flag = shape_flag(name)
            fail(
                f"cannot resume from {path}: it was saved with {flag} {before}, this run has "
                f"{flag} {mine}; leave the model's shape to the checkpoint"
            )
        shape[name] = theirs
    return dataclasses.replace(config, **shape)


def find_resume_checkpoint(config: TrainConfig, job_id: str | None) -> str | None:
    """The checkpoint this run continues from, or None for a fresh run (which --init-from,
    if given, starts from another run's weights: so --resume --init-from continues a run that
    has saved and starts one that has not).

    A checkpoint written by this very torchrun job means torchrun restarted it after a
    failure: resume by itself. (Every rank reads the same file, so all decide alike;
    TORCHELASTIC_RESTART_COUNT would not do: it counts only the restarts of its own node.)
    """
    path = ckpt.latest_checkpoint(config.out)
    restarted = path is not None and job_id is not None and ckpt.saved_run_id(path) == job_id
    if config.resume and path is None and config.init_from is None:
        fail(f"--resume: no checkpoint in {ckpt.checkpoints_dir(config.out)}")
    if path is not None and not (config.resume or restarted):
        fail(
            f"{config.out} already holds checkpoints (latest {path}); pass --resume to "
            "continue that run, or choose another --out"
        )
    return path


def claim_run_directory(config: TrainConfig, resuming: bool, is_main: bool) -> OutputFolder | None:
    """--out claimed by the ownership rule every folder-writing command follows
    (common.output_dir): refused, in one line, when it is a user's non-empty folder,
    another tool's output or being written by another run. Rank 0 claims it and holds the
    lock; the other ranks only ever write inside the checkpoints it records.

    A fresh run may replace an earlier run's output here only when that saved no checkpoint
    (find_resume_checkpoint refuses one that did): a metrics.jsonl of a run that died early.
    """
    if not is_main:
        return None
    try:
        folder = claim_output_folder(
            config.out, "pretrain", resume=resuming, overwrite=not resuming, flag="--out"
        )
        folder.record("metrics.jsonl", "checkpoints/")
        swept = ckpt.sweep_stale_saves(config.out)
    except OutputError as e:
        fail(str(e))
    if swept:  # a run killed while saving left them, and they may hold most of a disk
        print(f"removed the unfinished checkpoint saves of an earlier run: {', '.join(swept)}")
    return folder


def read_resume_state(path: str, config: TrainConfig, data: Data) -> dict:
    """The verified trainer state of the checkpoint to resume, checked against this run."""
    try:
        ckpt.verify_checkpoint(path)
        state = ckpt.read_trainer_state(path)
    except ckpt.CheckpointError as e:
        fail(f"cannot resume: {e}")
    check_resumable(state, config, data, path)
    return state


def read_init_state(
    config: TrainConfig, data: Data, say: Callable[[str], None] = print
) -> tuple[str, dict]:
    """--init-from: the checkpoint (a run's latest, or the one named) and its verified trainer
    state, checked to hold this run's kind of model and tokenizer; or an HF directory
    (:mod:`train.init_hf`; ``say`` gets its notes)."""
    path = config.init_from
    if is_hf_directory(path):
        return read_hf_init_state(config, data, say)
    if not os.path.exists(os.path.join(path, "meta.json")):
        path = ckpt.latest_checkpoint(path)
        if path is None:
            fail(f"--init-from {config.init_from}: no checkpoint in it")
    try:
        ckpt.verify_checkpoint(path)
        state = ckpt.read_trainer_state(path)
    except ckpt.CheckpointError as e:
        fail(f"--init-from: {e}")
    check_same_model(state, config, data, f"--init-from {path}", ("model",))
    return path, state


def init_weights(model: nn.Module, path: str) -> None:
    """Load the model weights of checkpoint ``path`` (any layout) into this run's ``model``
    (any layout), position embeddings fitted to its table (:func:`fit_positions`)."""
    from train.eval.load import LoadError, load_weights_of

    try:
        weights = load_weights_of(path, torch.device("cpu")).model.state_dict()
    except LoadError as e:
        fail(f"--init-from: {e}")
    own = model.state_dict()
    for name, tensor in weights.items():
        if name.endswith("wpe.weight") and name in own:
            weights[name] = fit_positions(tensor, own[name])
    try:
        set_model_state_dict(model, weights, options=StateDictOptions(full_state_dict=True))
    except (RuntimeError, KeyError, ValueError) as e:
        message = " ".join(str(e).split())[:300]
        fail(f"--init-from {path}: its weights do not fit this model ({message}); --preset?")


def fit_positions(saved: torch.Tensor, current: torch.Tensor) -> torch.Tensor:
    """A position table of ``current``'s size: the saved (learned) rows where it has them,
    ``current``'s own initialisation for the positions the checkpoint never saw (a longer
    context than it was trained with, as NVIDIA's BERT phase 2 starts its positions past 128)."""
    if saved.shape[0] == current.shape[0] or saved.shape[1:] != current.shape[1:]:
        return saved  # nothing to fit, or a mismatch set_model_state_dict reports
    rows = min(saved.shape[0], current.shape[0])
    fitted = full_tensor(current).detach().to("cpu", saved.dtype, copy=True)
    fitted[:rows] = saved[:rows]
    return fitted


def full_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """A sharded DTensor (FSDP2 / tensor parallel) gathered whole; a plain tensor as is."""
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
