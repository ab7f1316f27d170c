"""Real one-process checkpoints of a tiny GPT for the checkpoint, export and trust tests: the
model after one AdamW step, its save, a trainer state, and meta.json re-hashed after an edit."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest
import torch

from dataset_format import file_sha256
from train import checkpoint as ckpt
from train.eval.load import LoadError, load_model
from train.models.presets import build_model
from train.optim import build_optimizer


def trained_gpt(seed: int = 0):
    """gpt-tiny (vocab 128) and its AdamW optimizer after one step on random ids."""
    torch.manual_seed(seed)
    model = build_model("gpt-tiny", vocab_size=128)
    optimizer = build_optimizer(model, "adamw", 1e-3, 0.1, (0.9, 0.95), 1e-8)
    ids = torch.randint(0, 128, (2, 16))
    model(ids, ids)[1].backward()
    optimizer.step()
    optimizer.zero_grad()
    return model, optimizer


def save_step(run_dir, step, model, optimizer, state=None, keep=2) -> str:
    """Save and commit the checkpoint of `step` under run_dir; its path."""
    return ckpt.save_checkpoint(
        str(run_dir), step, model, optimizer, state or trainer_state(step), keep=keep
    ).commit()


def trainer_state(step: int) -> dict:
    return {"step": step, "consumed_samples": 8 * step, "config": {"seed": 1}, "counters": {"a": 1}}


def gpt_checkpoint_for_export(run_dir) -> str:
    """A real one-process GPT checkpoint (step 1, under run_dir) with the model config that
    evaluation and export need."""
    model, optimizer = trained_gpt()
    fields = dataclasses.asdict(model.config)
    state = {**trainer_state(1), "config": {"seed": 1, "model": "gpt"}, "model_config": fields}
    return save_step(run_dir, 1, model, optimizer, state)


def rehash(path: str, name: str) -> None:
    """Record a replaced file's size and sha256 in meta.json, as an attacker would."""
    meta_path = os.path.join(path, "meta.json")
    with open(meta_path) as f:
        meta = json.load(f)
    file_path = os.path.join(path, name)
    meta["files"][name] = {"bytes": os.path.getsize(file_path), "sha256": file_sha256(file_path)}
    with open(meta_path, "w") as f:
        json.dump(meta, f)


def load_path_errors(path: str, tmp_path) -> list[str]:
    """The one-line errors of resume (load_checkpoint), evaluation / tools/generate
    (load_model) and export / tools/convert (export_main) on one checkpoint."""
    messages = []
    with pytest.raises(ckpt.CheckpointError) as caught:
        ckpt.load_checkpoint(path, *trained_gpt(seed=1))
    messages.append(str(caught.value))
    with pytest.raises(LoadError) as caught:
        load_model(path, torch.device("cpu"))
    messages.append(str(caught.value))
    return messages
