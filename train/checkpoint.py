"""Checkpoints: sharded (torch.distributed.checkpoint), atomic, self-checking, reshardable.

Layout of ``RUN/checkpoints/step-00000100/``:

* ``.metadata`` and ``__R_I.distcp``  the model and optimizer state in DCP's format: each rank
  writes only its own shards (FSDP2 / tensor-parallel DTensors), in parallel, and reads back
  only the pieces its new layout needs, so a checkpoint saved at (tp=2, dp=1) resumes at
  (tp=1, dp=2) and no rank ever holds the full optimizer state;
* ``trainer.pt``  step, consumed_samples, scaler, schedule, skip counters, outlier window,
  config and tokenizer identity (plain types), and every rank's RNG states (rank 0 writes it);
* ``meta.json``  format version, step, layout, and the byte size + sha256 of every file above,
  written last by rank 0 once every rank has finished: a directory without a valid one is not
  a checkpoint.

Everything is written under ``.tmp-step-00000100`` and renamed into place after ``meta.json``,
so a crash while saving (or while an ``--async-checkpoint`` write is in flight) leaves the
previous checkpoint the latest valid one. A save that fails (a full disk) removes its
temporary directory and raises one line; every save first sweeps the temporary directories an
earlier killed process left. Files are hashed in parallel (rank r hashes every world_size-th
file) on save and on load.

A checkpoint is untrusted input: ``meta.json`` is read under a cap, every file it lists must be
a regular file of the recorded size and sha256, ``trainer.pt`` is loaded with
``torch.load(weights_only=True)``, and DCP's files are read through :mod:`train.checkpoint_io`
(no pickle in them can name code).
"""

from __future__ import annotations

import errno
import json
import os
import random
import re
import shutil
from collections.abc import Callable

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from common.safe_io import (
    MIB,
    UnsafeInputError,
    format_bytes,
    load_json_capped,
    require_regular_file,
)
from common.storage import replace, sync_folder
from dataset_format import file_sha256
from train import checkpoint_io

FORMAT = "shardsmith-checkpoint"
FORMAT_VERSION = 2
TRAINER_FILE = "trainer.pt"
DCP_METADATA = checkpoint_io.DCP_METADATA
STEP_DIR = re.compile(r"^step-(\d{8})$")
TMP_PREFIX = ".tmp-"
# meta.json lists one record (~120 bytes) per file: 16 MiB is over 100k files.
META_CAP = 16 * MIB
SHA256 = re.compile(r"^[0-9a-f]{64}$")


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
    """The job id recorded in a checkpoint's meta.json (None if none or unreadable; reading it
    for real, with every check, is :func:`read_meta`'s job)."""
    try:
        value = load_json_capped(os.path.join(path, "meta.json"), "meta.json", META_CAP)
        value = value.get("run_id")
    except (UnsafeInputError, AttributeError):
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


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def _rank_and_size() -> tuple[int, int]:
    return (dist.get_rank(), dist.get_world_size()) if _distributed() else (0, 1)


def _all_gather(obj: object) -> list:
    if not _distributed():
        return [obj]
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, obj)
    return gathered


def _my_share(names: list[str]) -> list[str]:
    """This rank's part of a file list (every world_size-th), so files are hashed in parallel."""
    rank, size = _rank_and_size()
    return sorted(names)[rank::size]


def sharded_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """The model's and optimizer's state as this rank's shards, keyed by parameter names
    (DTensors where FSDP2 / TP shard them): what DCP writes and reads in place."""
    return {
        "model": get_model_state_dict(model),
        "optimizer": get_optimizer_state_dict(model, optimizer),
    }


class PendingSave:
    """A checkpoint whose shards are written (or being written, with ``--async-checkpoint``) to
    its temporary directory; :meth:`commit` (every rank) makes it count."""

    def __init__(self, run_dir, step, tmp, trainer_state, keep, future=None, needed=0) -> None:
        self.run_dir, self.step, self.tmp = run_dir, step, tmp
        self.trainer_state, self.keep, self.future = trainer_state, keep, future
        self.needed = needed  # bytes of this rank's shards, for a full disk's message

    def commit(self) -> str | None:
        """Wait for the shards, hash every file (in parallel), then rank 0 writes meta.json and
        renames the directory into place. Returns the final path on rank 0, None elsewhere.
        A failure on any rank removes the temporary directory and raises CheckpointError on
        every rank; the previous checkpoint stays the latest."""
        rank, _ = _rank_and_size()
        # every rank's shards and trainer.pt are on disk before anyone lists them
        _agreed(self.run_dir, self.step, self.tmp, self._finish_shards, self.needed)
        records = _agreed(self.run_dir, self.step, self.tmp, self._hash_my_share, self.needed)
        gathered = _all_gather(records)

        def publish() -> str | None:
            if rank != 0:
                return None
            files = {name: record for part in gathered for name, record in part.items()}
            return _commit(self.run_dir, self.step, self.tmp, files, self.trainer_state)

        # nobody runs ahead (and maybe dies) before the checkpoint is final
        final = _agreed(self.run_dir, self.step, self.tmp, publish, self.needed)
        if rank == 0:
            _prune(self.run_dir, self.keep)
        return final

    def _finish_shards(self) -> None:
        if self.future is not None:
            self.future.result()
        if _rank_and_size()[0] == 0:
            with open(os.path.join(self.tmp, TRAINER_FILE), "wb") as f:
                torch.save(self.trainer_state, f)
                f.flush()
                os.fsync(f.fileno())

    def _hash_my_share(self) -> dict:
        records = {}
        for name in _my_share(sorted(os.listdir(self.tmp))):
            file_path = os.path.join(self.tmp, name)
            with open(file_path, "rb") as f:
                os.fsync(f.fileno())
            records[name] = {"bytes": os.path.getsize(file_path), "sha256": file_sha256(file_path)}
        return records


# A filesystem with less free space than this after a failed save counts as full: torch's own
# writer reports a full disk as "[enforce fail at inline_container.cc] unexpected pos", with
# no errno to tell it by.
FULL_DISK_BYTES = 1 << 20
NO_SPACE = "no space left on device"


def save_failure_reason(error: BaseException, where: str) -> str:
    """A failed write into `where` in a few words: a full disk (the common case) by name, told
    by the error's errno or by the free space left on `where`'s filesystem; else the cause."""
    cause = checkpoint_io.root_cause(error)
    if isinstance(cause, OSError) and cause.errno in (errno.ENOSPC, errno.EDQUOT):
        return NO_SPACE
    if _free_bytes(where) < FULL_DISK_BYTES:
        return f"{NO_SPACE}; {_one_line(cause, 200)}"
    return _one_line(cause)


def _free_bytes(path: str) -> float:
    """Bytes free to this user on the filesystem of `path` (or its nearest existing parent)."""
    while path and not os.path.exists(path):
        path = os.path.dirname(path)
    try:
        stat = os.statvfs(path or ".")
    except OSError:
        return float("inf")
    return stat.f_bavail * stat.f_frsize


def _agreed(
    run_dir: str, step: int, tmp: str, work: Callable[[], object], needed: int = 0
) -> object:
    """Run one step of a save on every rank and agree on its outcome (a collective, so it is
    also a barrier). If it failed anywhere, rank 0 removes the temporary directory and every
    rank raises the same one-line CheckpointError; a full disk's says how much room the save
    needs (``needed``: this rank's bytes, summed over the ranks) and how much is free."""
    try:
        result, reason = work(), None
    except (OSError, CheckpointException) as e:
        result, reason = None, save_failure_reason(e, tmp)
    outcomes = _all_gather((reason, needed))
    reasons = [r for r, _ in outcomes if r is not None]
    if not reasons:
        return result
    if _rank_and_size()[0] == 0:
        shutil.rmtree(tmp, ignore_errors=True)
    latest = latest_checkpoint(run_dir)
    room = ""
    if reasons[0].startswith(NO_SPACE):
        folder = os.path.dirname(tmp)
        room = (
            f": it needs {format_bytes(sum(n for _, n in outcomes))} in {folder}, which has "
            f"{format_bytes(_free_bytes(folder))} free; make room or choose another --out"
        )
    raise CheckpointError(
        f"checkpoint of step {step} not saved ({reasons[0]}){room}; its temporary directory "
        f"{tmp} was removed; the last complete checkpoint is {latest or 'none'}"
    )


def _state_bytes(state: object) -> int:
    """Bytes of the tensors in ``state`` (this rank's shards of DTensors): what a save writes."""
    if isinstance(state, dict):
        return sum(_state_bytes(value) for value in state.values())
    if isinstance(state, (list, tuple)):
        return sum(_state_bytes(value) for value in state)
    if isinstance(state, torch.Tensor):
        local = state.to_local() if hasattr(state, "to_local") else state
        return local.numel() * local.element_size()
    return 0


def sweep_stale_saves(run_dir: str) -> list[str]:
    """Remove the temporary directories of saves that never finished (a process killed while
    saving leaves one, and it may hold most of a disk); returns their names. Rank 0 calls it
    at the start of a run and before every save (no other save can be in flight then: a
    pending save is committed before the next one starts)."""
    root = checkpoints_dir(run_dir)
    if not os.path.isdir(root):
        return []
    stale = sorted(
        name
        for name in os.listdir(root)
        if name.startswith(TMP_PREFIX) and STEP_DIR.match(name[len(TMP_PREFIX) :])
    )
    for name in stale:
        shutil.rmtree(os.path.join(root, name), ignore_errors=True)
    return stale


def save_checkpoint(
    run_dir: str,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    trainer_state: dict,
    keep: int,
    async_group: object | None = None,
) -> PendingSave:
    """Start a save on every rank's behalf (all ranks must call it) and return it pending.

    ``model`` is the unwrapped module (FSDP2 / tensor parallelism change it in place; for DDP
    pass ``ddp.module``). ``trainer_state`` holds plain types; the RNG states of every rank are
    gathered into it here. With ``async_group`` (a gloo process group used only for
    checkpointing) the shards are staged to host memory and written by a background thread
    while training goes on; otherwise they are written before this returns. Either way
    :meth:`PendingSave.commit` must follow (before the next save) for the checkpoint to count.
    A write that fails raises CheckpointError (one line) after removing the temporary directory.
    """
    rank, _ = _rank_and_size()
    root = checkpoints_dir(run_dir)
    tmp = os.path.join(root, TMP_PREFIX + step_dir_name(step))

    def prepare() -> None:
        if rank == 0:
            os.makedirs(root, exist_ok=True)
            sweep_stale_saves(run_dir)
            os.makedirs(tmp)

    state = sharded_state(model, optimizer)
    needed = _state_bytes(state)
    _agreed(run_dir, step, tmp, prepare, needed)  # also the barrier before any rank writes
    rng = _all_gather(capture_rng_state())
    trainer_state = {**trainer_state, "rng": rng}
    if async_group is not None:
        future = dcp.async_save(state, checkpoint_id=tmp, process_group=async_group)
        return PendingSave(run_dir, step, tmp, trainer_state, keep, future, needed)

    def write() -> None:
        with checkpoint_io.single_process_quiet():
            dcp.save(state, checkpoint_id=tmp, no_dist=not _distributed())

    _agreed(run_dir, step, tmp, write, needed)
    return PendingSave(run_dir, step, tmp, trainer_state, keep, needed=needed)


def _write_json_synced(path: str, value: object) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2)
        f.flush()
        os.fsync(f.fileno())


def _commit(run_dir: str, step: int, tmp: str, files: dict, trainer_state: dict) -> str:
    root = checkpoints_dir(run_dir)
    final = os.path.join(root, step_dir_name(step))
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "step": step,
        # the torchrun job that wrote it: a restarted attempt of that job resumes by itself
        "run_id": trainer_state.get("run_id"),
        "world_size": len(trainer_state["rng"]),
        "files": files,
    }
    _write_json_synced(os.path.join(tmp, "meta.json"), meta)
    sync_folder(tmp)
    if os.path.exists(final):  # re-saving the same step (a resumed run that stopped there)
        shutil.rmtree(final)
    replace(tmp, final)  # the whole folder in one rename: complete or not there
    sync_folder(root)
    return final


def _prune(run_dir: str, keep: int) -> None:
    for _, path in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(path, ignore_errors=True)


def _meta_fault(meta: object) -> str | None:
    """What is wrong with a parsed meta.json's fields (None if nothing): types and ranges."""
    if not isinstance(meta, dict):
        return f"expected a JSON object, got {type(meta).__name__}"
    if meta.get("format") != FORMAT or meta.get("format_version") != FORMAT_VERSION:
        return (
            f"not a {FORMAT} v{FORMAT_VERSION} checkpoint "
            f"(format={meta.get('format')!r}, version={meta.get('format_version')!r})"
        )
    step = meta.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        return f"'step' must be a non-negative integer, got {step!r}"
    if not isinstance(meta.get("run_id"), (str, type(None))):
        return f"'run_id' must be a string or null, got {meta.get('run_id')!r}"
    files = meta.get("files")
    if not isinstance(files, dict) or not files:
        return f"'files' must be a non-empty object, got {type(files).__name__}"
    for name, record in files.items():
        if not name or "/" in name or "\\" in name or name in (".", ".."):
            return f"'files' names {name!r}, not a plain file name"
        if not isinstance(record, dict):
            return f"'files'[{name!r}] must be an object, got {type(record).__name__}"
        size, digest = record.get("bytes"), record.get("sha256")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            return f"'files'[{name!r}].bytes must be a non-negative integer, got {size!r}"
        if not isinstance(digest, str) or not SHA256.match(digest):
            return f"'files'[{name!r}].sha256 must be 64 hex digits, got {digest!r}"
    for required in (TRAINER_FILE, DCP_METADATA):
        if required not in files:
            return f"does not list {required}"
    return None


def read_meta(path: str) -> dict:
    """meta.json of a checkpoint directory, type-checked; CheckpointError naming the fault."""
    meta_path = os.path.join(path, "meta.json")
    if not os.path.exists(meta_path):
        raise CheckpointError(f"{meta_path}: missing: {path} is not a complete checkpoint")
    try:
        meta = load_json_capped(meta_path, "checkpoint metadata", META_CAP)
    except UnsafeInputError as e:
        raise CheckpointError(f"unreadable checkpoint metadata: {e}") from None
    fault = _meta_fault(meta)
    if fault is not None:
        raise CheckpointError(f"{meta_path}: {fault}")
    return meta


def _file_fault(path: str, name: str, record: dict, hash_it: bool) -> str | None:
    file_path = os.path.join(path, name)
    if not os.path.lexists(file_path):
        return f"{file_path}: missing"
    try:
        # a FIFO would block the hash below forever, a link to /dev/zero never end it
        size = require_regular_file(file_path, "checkpoint file").st_size
    except UnsafeInputError as e:
        return str(e)
    if size != record["bytes"]:
        return f"{file_path}: {size} bytes, meta.json says {record['bytes']} (cut or replaced)"
    if hash_it and file_sha256(file_path) != record["sha256"]:
        return f"{file_path}: sha256 differs from meta.json (corrupted)"
    return None


def verify_checkpoint(path: str) -> dict:
    """Check meta.json, every file's size (each rank) and sha256 (each file hashed by one rank,
    in parallel); every rank raises the same CheckpointError if any check fails. Returns meta."""
    try:
        meta = read_meta(path)
        faults = [
            _file_fault(path, name, record, hash_it=name in _my_share(list(meta["files"])))
            for name, record in sorted(meta["files"].items())
        ]
        fault = next((f for f in faults if f is not None), None)
    except CheckpointError as e:
        meta, fault = None, str(e)
    reported = [f for f in _all_gather(fault) if f is not None]
    if reported:
        raise CheckpointError(reported[0])
    return meta


def read_trainer_state(path: str) -> dict:
    file_path = os.path.join(path, TRAINER_FILE)
    try:
        state = torch.load(file_path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means a bad file
        raise CheckpointError(f"{file_path}: cannot be loaded safely ({_one_line(e)})") from None
    fault = _trainer_state_fault(state)
    if fault is not None:
        raise CheckpointError(f"{file_path}: {fault}")
    return state


def _trainer_state_fault(state: object) -> str | None:
    if not isinstance(state, dict):
        return f"expected a dict, got {type(state).__name__}"
    for key, kind in (("step", int), ("consumed_samples", int), ("config", dict), ("rng", list)):
        value = state.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            return f"'{key}' must be {kind.__name__}, got {type(value).__name__}"
    return None


def _one_line(error: Exception, limit: int = 400) -> str:
    """torch's load errors span lines ("Error(s) in loading...:\n\tsize mismatch ..."): the
    whole message on one line, cut to ``limit`` characters."""
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def load_dcp(path: str, state: dict, planner: object | None = None) -> None:
    """Read a verified checkpoint's DCP files into ``state`` (in place; every rank, or one
    process offline): ``.metadata`` through the restricted unpickler and checked against
    meta.json's file list, non-tensor entries ``weights_only``. CheckpointError (one line) if
    anything in them is unsafe; RuntimeError (one line) if a tensor does not fit ``state``."""
    sizes = {name: record["bytes"] for name, record in read_meta(path)["files"].items()}
    try:
        metadata = checkpoint_io.read_checked_metadata(path, sizes)
        checkpoint_io.load_into(path, metadata, state, planner, no_dist=not _distributed())
    except UnsafeInputError as e:
        raise CheckpointError(str(e)) from None


def load_checkpoint(
    path: str,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    check: Callable[[dict], None] | None = None,
    trainer_state: dict | None = None,
) -> dict:
    """Load a checkpoint into ``model`` (unwrapped, possibly sharded) and ``optimizer`` and
    restore this rank's RNG states; returns the trainer state (without the RNG list). All
    ranks must call it. Each rank reads only the pieces of the shards its parameters cover.

    ``check(trainer_state)`` runs before any weight is touched, so a checkpoint of another
    run (other tokenizer, other preset) is reported as that, not as a tensor-shape mismatch.
    ``trainer_state``: the caller already verified the checkpoint and read it (to size the
    model from it); it is used as is.
    """
    if trainer_state is None:
        verify_checkpoint(path)
        trainer_state = read_trainer_state(path)
    if check is not None:
        check(trainer_state)
    state = sharded_state(model, optimizer)
    # Only the per-parameter optimizer state (keyed by parameter name) is read back: how
    # parameters are grouped depends on the layout (tensor parallelism keeps norms as plain
    # tensors, in groups of their own), and the groups' settings come from this run's flags.
    wanted = {"model": state["model"], "optimizer": {"state": state["optimizer"]["state"]}}
    try:
        load_dcp(path, wanted)
        set_model_state_dict(model, state["model"])
    except (RuntimeError, KeyError, ValueError) as e:
        raise CheckpointError(
            f"{path}: its model state does not fit this model ({_one_line(e)}); "
            "was it saved with another --preset or tokenizer?"
        ) from None
    try:
        set_optimizer_state_dict(model, optimizer, state["optimizer"])
    except (RuntimeError, KeyError, ValueError) as e:
        raise CheckpointError(
            f"{path}: its optimizer state does not fit this optimizer ({_one_line(e)}); "
            "was it saved with another --optimizer?"
        ) from None
    rng_states = trainer_state.pop("rng")
    rank, _ = _rank_and_size()
    if rank < len(rng_states):
        restore_rng_state(rng_states[rank])
    else:
        # more ranks than when saved: this rank has no saved stream; derive a distinct one
        torch.manual_seed(int(trainer_state["config"]["seed"]) + 7919 * rank)
    return trainer_state
