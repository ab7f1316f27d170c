"""train.checkpoint: round trip, RNG states, atomic naming, pruning, and damaged checkpoints."""

from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest
import torch

from train import checkpoint as ckpt
from train.models.presets import build_model
from train.optim import build_optimizer


def _trained(seed: int = 0):
    torch.manual_seed(seed)
    model = build_model("gpt-tiny", vocab_size=128)
    optimizer = build_optimizer(model, "adamw", 1e-3, 0.1, (0.9, 0.95), 1e-8)
    ids = torch.randint(0, 128, (2, 16))
    model(ids, ids)[1].backward()
    optimizer.step()
    optimizer.zero_grad()
    return model, optimizer


def _state(step: int) -> dict:
    return {"step": step, "consumed_samples": 8 * step, "config": {"seed": 1}, "counters": {"a": 1}}


def test_round_trip_restores_weights_optimizer_and_rng(tmp_path):
    model, optimizer = _trained()
    random.seed(5)
    np.random.seed(6)
    torch.manual_seed(7)
    path = ckpt.save_checkpoint(str(tmp_path), 3, model, optimizer, _state(3), keep=2)
    assert path == os.path.join(tmp_path, "checkpoints", "step-00000003")
    expected_draws = (random.random(), np.random.rand(), torch.rand(1).item())

    fresh, fresh_optimizer = _trained(seed=1)  # other weights, other optimizer state
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    state = ckpt.load_checkpoint(path, fresh, fresh_optimizer)
    assert state["step"] == 3 and state["consumed_samples"] == 24 and "rng" not in state
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected_draws
    for (name, a), b in zip(model.state_dict().items(), fresh.state_dict().values()):
        assert torch.equal(a, b), name
    assert fresh.lm_head.weight is fresh.wte.weight  # still tied after loading
    saved = optimizer.state_dict()["state"]
    loaded = fresh_optimizer.state_dict()["state"]
    assert saved.keys() == loaded.keys()
    for key in saved:
        for field in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(saved[key][field], loaded[key][field])


def test_files_load_with_weights_only(tmp_path):
    model, optimizer = _trained()
    path = ckpt.save_checkpoint(str(tmp_path), 1, model, optimizer, _state(1), keep=1)
    assert sorted(os.listdir(path)) == ["meta.json", "model.pt", "optimizer.pt", "trainer.pt"]
    for name in ckpt.FILES:
        torch.load(os.path.join(path, name), weights_only=True)
    meta = json.loads(open(os.path.join(path, "meta.json")).read())
    assert meta["step"] == 1 and set(meta["files"]) == set(ckpt.FILES)


def test_run_id_is_recorded(tmp_path):
    model, optimizer = _trained()
    path = ckpt.save_checkpoint(
        str(tmp_path), 1, model, optimizer, {**_state(1), "run_id": "job-7"}, keep=1
    )
    assert ckpt.saved_run_id(path) == "job-7"
    assert ckpt.saved_run_id(str(tmp_path / "missing")) is None


def test_keeps_last_n_and_ignores_temporary_dirs(tmp_path):
    model, optimizer = _trained()
    for step in (1, 2, 3, 4):
        ckpt.save_checkpoint(str(tmp_path), step, model, optimizer, _state(step), keep=2)
    # a crash while saving step 5 leaves only its temp dir: not a checkpoint
    os.makedirs(tmp_path / "checkpoints" / ".tmp-step-00000005")
    assert [s for s, _ in ckpt.list_checkpoints(str(tmp_path))] == [3, 4]
    assert ckpt.latest_checkpoint(str(tmp_path)).endswith("step-00000004")
    assert ckpt.latest_checkpoint(str(tmp_path / "nothing-here")) is None


@pytest.mark.parametrize(
    "damage, message",
    [
        ("truncate", "bytes, meta.json says"),
        ("flip", "sha256 differs"),
        ("no-meta", "not a complete checkpoint"),
        ("bad-meta", "unreadable checkpoint metadata"),
        ("missing", "optimizer.pt: missing"),
    ],
)
def test_damaged_checkpoint_is_a_clear_error(tmp_path, damage, message):
    model, optimizer = _trained()
    path = ckpt.save_checkpoint(str(tmp_path), 1, model, optimizer, _state(1), keep=1)
    target = os.path.join(path, "optimizer.pt")
    if damage == "truncate":
        with open(target, "r+b") as f:
            f.truncate(os.path.getsize(target) // 2)
    elif damage == "flip":
        with open(target, "r+b") as f:
            f.seek(100)
            byte = f.read(1)
            f.seek(100)
            f.write(bytes([byte[0] ^ 0xFF]))
    elif damage == "no-meta":
        os.remove(os.path.join(path, "meta.json"))
    elif damage == "bad-meta":
        with open(os.path.join(path, "meta.json"), "w") as f:
            f.write("{not json")
    else:
        os.remove(target)
    with pytest.raises(ckpt.CheckpointError, match=message):
        ckpt.load_checkpoint(path, *_trained())


def test_unsafe_pickle_is_refused(tmp_path):
    """A file that passes the size/sha checks but needs arbitrary unpickling is refused."""
    model, optimizer = _trained()
    path = ckpt.save_checkpoint(str(tmp_path), 1, model, optimizer, _state(1), keep=1)
    target = os.path.join(path, "trainer.pt")
    torch.save({"step": 1, "payload": ckpt.CheckpointError("x")}, target)  # an arbitrary object
    meta_path = os.path.join(path, "meta.json")
    meta = json.loads(open(meta_path).read())
    meta["files"]["trainer.pt"] = {
        "bytes": os.path.getsize(target),
        "sha256": ckpt._sha256(target),
    }
    with open(meta_path, "w") as f:
        json.dump(meta, f)
    with pytest.raises(ckpt.CheckpointError, match="cannot be loaded safely"):
        ckpt.read_checkpoint(path)


def test_checkpoint_of_another_model_is_a_clear_error(tmp_path):
    model, optimizer = _trained()
    path = ckpt.save_checkpoint(str(tmp_path), 1, model, optimizer, _state(1), keep=1)
    other = build_model("gpt-tiny", vocab_size=256)
    other_optimizer = build_optimizer(other, "adamw", 1e-3, 0.1, (0.9, 0.95), 1e-8)
    with pytest.raises(ckpt.CheckpointError, match="does not fit this model"):
        ckpt.load_checkpoint(path, other, other_optimizer)
