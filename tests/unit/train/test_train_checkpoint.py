"""train.checkpoint (DCP) in one process: round trip, RNG states, atomic naming, pruning, a save
cut short, damaged checkpoints and metadata of the wrong types. Multi-process resharding and
memory are tested under torchrun in test_train_checkpoint_dcp.py."""

from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest
import torch

from dataset_format import file_sha256
from tests.helpers.checkpoints import save_step as _save
from tests.helpers.checkpoints import trained_gpt as _trained
from tests.helpers.checkpoints import trainer_state as _state
from train import checkpoint as ckpt
from train.models.presets import build_model
from train.optim import build_optimizer


def test_round_trip_restores_weights_optimizer_and_rng(tmp_path):
    model, optimizer = _trained()
    random.seed(5)
    np.random.seed(6)
    torch.manual_seed(7)
    path = _save(tmp_path, 3, model, optimizer)
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


def test_files_are_dcp_shards_and_a_weights_only_trainer_state(tmp_path):
    model, optimizer = _trained()
    path = _save(tmp_path, 1, model, optimizer)
    assert sorted(os.listdir(path)) == [".metadata", "__0_0.distcp", "meta.json", "trainer.pt"]
    torch.load(os.path.join(path, "trainer.pt"), weights_only=True)
    meta = json.loads(open(os.path.join(path, "meta.json")).read())
    assert meta["step"] == 1 and set(meta["files"]) == {".metadata", "__0_0.distcp", "trainer.pt"}


def test_a_save_that_never_commits_leaves_the_previous_checkpoint(tmp_path):
    """A crash after the shards are written but before meta.json (or an async write still in
    flight) leaves only a temporary directory: the previous checkpoint is still the latest."""
    model, optimizer = _trained()
    first = _save(tmp_path, 1, model, optimizer)
    ckpt.save_checkpoint(str(tmp_path), 2, model, optimizer, _state(2), keep=2)  # no commit
    assert os.path.isdir(tmp_path / "checkpoints" / ".tmp-step-00000002")
    assert ckpt.latest_checkpoint(str(tmp_path)) == first
    assert ckpt.load_checkpoint(first, *_trained(seed=1))["step"] == 1


def test_run_id_is_recorded(tmp_path):
    model, optimizer = _trained()
    path = _save(tmp_path, 1, model, optimizer, {**_state(1), "run_id": "job-7"})
    assert ckpt.saved_run_id(path) == "job-7"
    assert ckpt.saved_run_id(str(tmp_path / "missing")) is None


def test_keeps_last_n_and_ignores_temporary_dirs(tmp_path):
    model, optimizer = _trained()
    for step in (1, 2, 3, 4):
        _save(tmp_path, step, model, optimizer)
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
        ("missing", "__0_0.distcp: missing"),
    ],
)
def test_damaged_checkpoint_is_a_clear_error(tmp_path, damage, message):
    model, optimizer = _trained()
    path = _save(tmp_path, 1, model, optimizer)
    target = os.path.join(path, "__0_0.distcp")
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
    path = _save(tmp_path, 1, model, optimizer)
    target = os.path.join(path, "trainer.pt")
    torch.save({"step": 1, "payload": ckpt.CheckpointError("x")}, target)  # an arbitrary object
    meta_path = os.path.join(path, "meta.json")
    meta = json.loads(open(meta_path).read())
    meta["files"]["trainer.pt"] = {
        "bytes": os.path.getsize(target),
        "sha256": file_sha256(target),
    }
    with open(meta_path, "w") as f:
        json.dump(meta, f)
    with pytest.raises(ckpt.CheckpointError, match="trainer.pt: cannot be loaded safely"):
        ckpt.load_checkpoint(path, *_trained())


def test_checkpoint_of_another_model_is_a_clear_error(tmp_path):
    model, optimizer = _trained()
    path = _save(tmp_path, 1, model, optimizer)
    other = build_model("gpt-tiny", vocab_size=256)
    other_optimizer = build_optimizer(other, "adamw", 1e-3, 0.1, (0.9, 0.95), 1e-8)
    with pytest.raises(ckpt.CheckpointError, match="does not fit this model"):
        ckpt.load_checkpoint(path, other, other_optimizer)


@pytest.mark.parametrize(
    "edit, fault",
    [
        (lambda m: m.update(step="3"), "'step' must be a non-negative integer, got '3'"),
        (lambda m: m.update(step=True), "'step' must be a non-negative integer, got True"),
        (lambda m: m.update(run_id=7), "'run_id' must be a string or null, got 7"),
        (lambda m: m.update(files=[]), "'files' must be a non-empty object, got list"),
        (lambda m: m["files"]["trainer.pt"].update(bytes="12"), "['trainer.pt'].bytes must be"),
        (lambda m: m["files"]["trainer.pt"].update(sha256=5), "['trainer.pt'].sha256 must"),
        (lambda m: m["files"].update({"../x": m["files"]["trainer.pt"]}), "not a plain file"),
        (lambda m: m["files"].pop(".metadata"), "does not list .metadata"),
        (lambda m: m["files"].update({"a\nb": {}}), "'files'['a\\nb'].bytes must"),
        (lambda m: m.clear() or m.update(format_version="2"), "not a shardsmith-checkpoint v2"),
    ],
)
def test_metadata_of_the_wrong_types_is_one_line_naming_the_file(tmp_path, edit, fault):
    model, optimizer = _trained()
    path = _save(tmp_path, 1, model, optimizer)
    meta_path = os.path.join(path, "meta.json")
    meta = json.loads(open(meta_path).read())
    edit(meta)
    with open(meta_path, "w") as f:
        json.dump(meta, f)
    with pytest.raises(ckpt.CheckpointError) as error:
        ckpt.load_checkpoint(path, *_trained())
    message = str(error.value)
    assert message.startswith(f"{meta_path}: ") and fault in message and "\n" not in message


def test_offline_export_to_one_file_and_to_hugging_face(tmp_path):
    """No process group: the sharded checkpoint becomes one torch file and a transformers
    directory (safetensors) whose GPT2LMHeadModel computes the same logits."""
    import dataclasses

    transformers = pytest.importorskip("transformers")
    from train import export

    model, optimizer = _trained()
    state = {**_state(1), "config": {"seed": 1, "model": "gpt"},
             "model_config": dataclasses.asdict(model.config)}  # fmt: skip
    path = _save(tmp_path, 1, model, optimizer, state)
    export.export_torch(path, str(tmp_path / "full.pt"))
    full = torch.load(tmp_path / "full.pt", weights_only=True)
    for name, tensor in model.state_dict().items():
        assert torch.equal(full["model"][name], tensor), name
    assert full["trainer"]["step"] == 1 and "rng" not in full["trainer"]
    export.export_hf(path, str(tmp_path / "hf"))
    assert (tmp_path / "hf" / "model.safetensors").exists()
    hf_model = transformers.GPT2LMHeadModel.from_pretrained(str(tmp_path / "hf")).eval()
    ids = torch.randint(0, 128, (2, 16))
    with torch.no_grad():
        torch.testing.assert_close(hf_model(ids).logits, model.eval()(ids)[0], atol=1e-5, rtol=0)
