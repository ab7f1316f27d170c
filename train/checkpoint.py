"""Checkpoints: atomic, self-checking, parallelism-independent.

Layout of ``RUN/checkpoints/step-00000100/``:

* ``model.pt``      full (unsharded) model state dict, fp32 on CPU;
* ``optimizer.pt``  full optimizer state dict, keyed by parameter names;
* ``trainer.pt``    step, consumed_samples, scaler, schedule, skip counters, outlier window,
                    config and tokenizer identity (plain types), and every rank's RNG states;
* ``meta.json``     format version, step, and the byte size + sha256 of each file above,
                    written last: a directory without a valid one is not a checkpoint.

A checkpoint is written under ``.tmp-step-00000100`` and renamed into place, so a crash while
saving leaves no half checkpoint under a final name. Full state dicts (gathered with
``torch.distributed.checkpoint.state_dict``) make a checkpoint loadable under any
parallelism: saved with FSDP on 8 GPUs, resumed with DDP on 2. Only rank 0 writes; every rank
reads (the run directory must be on a filesystem all ranks see, as usual for multi-node
runs). Everything is loaded with ``torch.load(weights_only=True)``: non-tensor state is stored
as plain Python types.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
from collections.abc import Callable

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

FORMAT = "shardsmith-checkpoint"
FORMAT_VERSION = 1
FILES = ("model.pt", "optimizer.pt", "trainer.pt")
STEP_DIR = re.compile(r"^step-(\d{8})$")


class CheckpointError(Exception):
    """A checkpoint that cannot be used; the message names the file and what is wrong."""


def checkpoints_dir(run_dir: str) -> str:
    return os.path.join(run_dir, "checkpoints")


def step_dir_name(step: int) -> str:
    return f"step-{step:08d}"


def list_checkpoints(run_dir: str) -> list[tuple[int, str]]:
    """Finished checkpoints (final names only, temp dirs ignored) as (step, path), by step."""
    root = checkpoints_dir(run_dir)
    if not os.path.isdir(root):
        return []
    found = []
    for name in os.listdir(root):
        match = STEP_DIR.match(name)
        if match and os.path.isdir(os.path.join(root, name)):
            found.append((int(match.group(1)), os.path.join(root, name)))
    return sorted(found)


def latest_checkpoint(run_dir: str) -> str | None:
    found = list_checkpoints(run_dir)
    return found[-1][1] if found else None


def saved_run_id(path: str) -> str | None:
    """The torchrun run id recorded in a checkpoint's meta.json (None if none or unreadable;
    reading it for real, with every check, is :func:`read_checkpoint`'s job)."""
    try:
        with open(os.path.join(path, "meta.json"), encoding="utf-8") as f:
            value = json.load(f).get("run_id")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def capture_rng_state() -> dict:
    """This process's RNG states as plain types and tensors (weights_only-loadable)."""
    version, mt_state, gauss = random.getstate()
    np_state = np.random.get_state(legacy=False)
    state = {
        "python": {"version": version, "state": list(mt_state), "gauss": gauss},
        "numpy": {
            "bit_generator": np_state["bit_generator"],
            "key": torch.from_numpy(np_state["state"]["key"].astype(np.int64)),
            "pos": int(np_state["state"]["pos"]),
            "has_gauss": int(np_state["has_gauss"]),
            "gauss": float(np_state["gauss"]),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def restore_rng_state(state: dict) -> None:
    python = state["python"]
    random.setstate((python["version"], tuple(python["state"]), python["gauss"]))
    numpy = state["numpy"]
    np.random.set_state(
        {
            "bit_generator": numpy["bit_generator"],
            "state": {"key": numpy["key"].numpy().astype(np.uint32), "pos": numpy["pos"]},
            "has_gauss": numpy["has_gauss"],
            "gauss": numpy["gauss"],
        }
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _save(obj: object, path: str) -> None:
    with open(path, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def save_checkpoint(
    run_dir: str,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    trainer_state: dict,
    keep: int,
) -> str | None:
    """Save on every rank's behalf (all ranks must call it: gathering is collective).

    ``model`` is the unwrapped module (FSDP2 / tensor parallelism change it in place; for DDP
    pass ``ddp.module``). ``trainer_state`` holds plain types; the RNG states of every rank are
    gathered into it here. Returns the checkpoint path on rank 0, None elsewhere.
    """
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    model_state = get_model_state_dict(model, options=options)
    optimizer_state = get_optimizer_state_dict(model, optimizer, options=options)
    rng = capture_rng_state()
    rank = dist.get_rank() if _distributed() else 0
    if _distributed():
        gathered: list[dict] | None = [None] * dist.get_world_size() if rank == 0 else None
        dist.gather_object(rng, gathered, dst=0)
    else:
        gathered = [rng]
    path = None
    if rank == 0:
        path = _write(
            run_dir, step, model_state, optimizer_state, {**trainer_state, "rng": gathered}
        )
        _prune(run_dir, keep)
    if _distributed():
        dist.barrier()  # nobody runs ahead (and maybe dies) before the checkpoint is final
    return path


def _write(run_dir, step, model_state, optimizer_state, trainer_state) -> str:
    root = checkpoints_dir(run_dir)
    os.makedirs(root, exist_ok=True)
    final = os.path.join(root, step_dir_name(step))
    tmp = os.path.join(root, ".tmp-" + step_dir_name(step))
    shutil.rmtree(tmp, ignore_errors=True)  # left by a crash during an earlier save
    os.makedirs(tmp)
    for name, obj in zip(FILES, (model_state, optimizer_state, trainer_state)):
        _save(obj, os.path.join(tmp, name))
    files = {
        name: {
            "bytes": os.path.getsize(os.path.join(tmp, name)),
            "sha256": _sha256(os.path.join(tmp, name)),
        }
        for name in FILES
    }
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "step": step,
        # the torchrun job that wrote it: a restarted attempt of that job resumes by itself
        "run_id": trainer_state.get("run_id"),
        "files": files,
    }
    with open(os.path.join(tmp, "meta.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    _fsync_dir(tmp)
    if os.path.exists(final):  # re-saving the same step (a resumed run that stopped there)
        shutil.rmtree(final)
    os.replace(tmp, final)
    _fsync_dir(root)
    return final


def _prune(run_dir: str, keep: int) -> None:
    for _, path in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(path, ignore_errors=True)


def read_checkpoint(path: str) -> tuple[dict, dict, dict]:
    """Verify and load (model_state, optimizer_state, trainer_state); CheckpointError if the
    directory is incomplete, a file is cut or altered, or a file does not unpickle safely."""
    meta_path = os.path.join(path, "meta.json")
    if not os.path.exists(meta_path):
        raise CheckpointError(f"{meta_path}: missing: {path} is not a complete checkpoint")
    try:
        with open(meta_path, encoding="utf-8") as f:
            meta = json.load(f)
        files = meta["files"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{meta_path}: unreadable checkpoint metadata ({e})") from None
    if meta.get("format") != FORMAT or meta.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{meta_path}: not a {FORMAT} v{FORMAT_VERSION} checkpoint "
            f"(format={meta.get('format')!r}, version={meta.get('format_version')!r})"
        )
    loaded = []
    for name in FILES:
        file_path = os.path.join(path, name)
        record = files.get(name)
        if record is None:
            raise CheckpointError(f"{meta_path}: does not list {name}")
        if not os.path.exists(file_path):
            raise CheckpointError(f"{file_path}: missing")
        size = os.path.getsize(file_path)
        if size != record["bytes"]:
            raise CheckpointError(
                f"{file_path}: {size} bytes, meta.json says {record['bytes']} (cut or replaced)"
            )
        if _sha256(file_path) != record["sha256"]:
            raise CheckpointError(f"{file_path}: sha256 differs from meta.json (corrupted)")
        try:
            loaded.append(torch.load(file_path, map_location="cpu", weights_only=True))
        except Exception as e:  # noqa: BLE001 - any unpickling failure means a bad file
            raise CheckpointError(f"{file_path}: cannot be loaded safely ({e})") from None
    model_state, optimizer_state, trainer_state = loaded
    return model_state, optimizer_state, trainer_state


def _one_line(error: Exception, limit: int = 400) -> str:
    """torch's load errors span lines ("Error(s) in loading...:\n\tsize mismatch ..."): the
    whole message on one line, cut to ``limit`` characters."""
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def load_checkpoint(
    path: str,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    check: Callable[[dict], None] | None = None,
) -> dict:
    """Load a checkpoint into ``model`` (unwrapped, possibly sharded) and ``optimizer`` and
    restore this rank's RNG states; returns the trainer state (without the RNG list).

    ``check(trainer_state)`` runs before any weight is touched, so a checkpoint of another
    run (other tokenizer, other preset) is reported as that, not as a tensor-shape mismatch.
    """
    model_state, optimizer_state, trainer_state = read_checkpoint(path)
    if check is not None:
        check(trainer_state)
    options = StateDictOptions(full_state_dict=True)
    try:
        set_model_state_dict(model, model_state, options=options)
    except (RuntimeError, KeyError, ValueError) as e:
        raise CheckpointError(
            f"{path}/model.pt: does not fit this model ({_one_line(e)}); "
            "was it saved with another --preset or tokenizer?"
        ) from None
    try:
        set_optimizer_state_dict(model, optimizer, optimizer_state, options=options)
    except (RuntimeError, KeyError, ValueError) as e:
        raise CheckpointError(
            f"{path}/optimizer.pt: does not fit this optimizer ({_one_line(e)}); "
            "was it saved with another --optimizer?"
        ) from None
    rng_states = trainer_state.pop("rng")
    rank = dist.get_rank() if _distributed() else 0
    if rank < len(rng_states):
        restore_rng_state(rng_states[rank])
    else:
        # more ranks than when saved: this rank has no saved stream; derive a distinct one
        torch.manual_seed(int(trainer_state["config"]["seed"]) + 7919 * rank)
    return trainer_state
