"""Reading torch DCP checkpoint files as untrusted input, and calling DCP in one process quietly.

A checkpoint directory may come from anyone (shared runs, downloads), and ``meta.json``'s
hashes prove only that the files match each other, not who wrote them. Two places in torch's
own DCP reader unpickle file contents as arbitrary Python: ``FileSystemReader.read_metadata``
(``pickle.load`` of ``.metadata``) and ``DefaultLoadPlanner.load_bytes``
(``torch.load(weights_only=False)`` of every non-tensor entry, such as an optimizer's
hyper-parameters). Here:

* ``.metadata`` is read whole under a cap and unpickled by
  :class:`~train.metadata_pickle.MetadataUnpickler`, which resolves only DCP's metadata classes,
  torch dtypes / sizes / layouts and a path class, builds only DCP's plain metadata records, and
  holds the opcodes run, the memory built and each string's length to budgets; the result is
  then checked field by field (:func:`check_metadata`) against the files ``meta.json``
  lists, so no entry points outside the checkpoint or past a file's end;
* the DCP reader is handed that checked object instead of re-reading the file, so what was
  checked is what is used;
* non-tensor entries are loaded with ``torch.load(weights_only=True)``.

Every refusal is one line (:class:`~common.safe_io.UnsafeInputError`).
"""

from __future__ import annotations

import contextlib
import io
import os
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint import metadata as dcp_metadata
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.format_utils import _EmptyStateDictLoadPlanner
from torch.distributed.checkpoint.planner import ReadItem
from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

from common.safe_io import UnsafeInputError, read_bytes_capped
from train.metadata_pickle import MetadataUnpickler

DCP_METADATA = ".metadata"
# .metadata grows with the number of tensors and shards: ~240 bytes a shard; 16 MiB is ~70,000
# shards, far past any run we make, and with the unpickler's budgets (train/metadata_pickle.py)
# bounds what reading it costs: under 600 MB of objects and a minute of CPU.
METADATA_CAP = 16 << 20

def parse_metadata(data: bytes, what: str) -> dcp_metadata.Metadata:
    """Unpickle DCP metadata bytes with the restricted unpickler (no check of the fields yet)."""
    try:
        value = MetadataUnpickler(data).load()
    except Exception as e:  # noqa: BLE001 - any failure to unpickle untrusted bytes is the file's
        raise UnsafeInputError(f"{what}: not DCP metadata ({_one_line(e)})") from None
    if not isinstance(value, dcp_metadata.Metadata):
        raise UnsafeInputError(f"{what}: not DCP metadata (holds a {type(value).__name__})")
    return value


def check_metadata(md: dcp_metadata.Metadata, what: str, sizes: dict[str, int]) -> None:
    """Every field of unpickled DCP metadata has the type DCP expects, every storage entry lies
    inside a file named in ``sizes`` (file name -> bytes, from meta.json), and no tensor claims
    more bytes than the checkpoint's data files hold (a hostile size would otherwise make an
    export allocate it). UnsafeInputError names the first fault."""
    try:
        fault = _metadata_fault(md, sizes)
    except Exception as e:  # noqa: BLE001 - objects built by a hostile pickle may lack any field
        fault = f"malformed DCP metadata ({_one_line(e)})"
    if fault is not None:
        raise UnsafeInputError(f"{what}: {_one_line(fault)}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _size_fault(size: object, label: str) -> str | None:
    if not isinstance(size, torch.Size) or not all(_is_int(d) and d >= 0 for d in size):
        return f"{label} is not a tensor size"
    return None


def _metadata_fault(md: dcp_metadata.Metadata, sizes: dict[str, int]) -> str | None:
    entries = md.state_dict_metadata
    if not isinstance(entries, dict):
        return "state_dict_metadata is not a dict"
    data_bytes = sum(size for name, size in sizes.items() if name.endswith(".distcp"))
    for key, entry in entries.items():
        if not isinstance(key, str):
            return f"an entry is keyed by a {type(key).__name__}, not a name"
        if isinstance(entry, dcp_metadata.BytesStorageMetadata):
            continue
        if not isinstance(entry, dcp_metadata.TensorStorageMetadata):
            return f"entry {_name(key)} is a {type(entry).__name__}"
        props = entry.properties
        if not isinstance(props, dcp_metadata.TensorProperties) or not isinstance(
            props.dtype, torch.dtype
        ):
            return f"entry {_name(key)} has no tensor dtype"
        fault = _size_fault(entry.size, f"entry {_name(key)}'s size")
        if fault is not None:
            return fault
        if entry.size.numel() * props.dtype.itemsize > data_bytes:
            return f"entry {_name(key)} claims more bytes than the checkpoint's data files hold"
        if not isinstance(entry.chunks, list):
            return f"entry {_name(key)}'s chunks are not a list"
        for chunk in entry.chunks:
            if not isinstance(chunk, dcp_metadata.ChunkStorageMetadata):
                return f"entry {_name(key)} has a chunk of type {type(chunk).__name__}"
            for field in ("offsets", "sizes"):
                fault = _size_fault(getattr(chunk, field), f"a chunk {field} of {_name(key)}")
                if fault is not None:
                    return fault
            if (
                len(chunk.offsets) != len(entry.size)
                or len(chunk.sizes) != len(entry.size)
                or any(o + s > d for o, s, d in zip(chunk.offsets, chunk.sizes, entry.size))
            ):
                return f"entry {_name(key)} has a chunk outside its tensor"
    fault = _planner_data_fault(md.planner_data)
    if fault is not None:
        return fault
    storage = md.storage_data
    if not isinstance(storage, dict):
        return "storage_data is not a dict"
    for index, info in storage.items():
        if not isinstance(index, dcp_metadata.MetadataIndex) or not isinstance(index.fqn, str):
            return f"a storage key is a {type(index).__name__}"
        if not isinstance(info, _StorageInfo):
            return f"storage of {_name(index.fqn)} is a {type(info).__name__}"
        path = info.relative_path
        if not isinstance(path, str) or path not in sizes or not path.endswith(".distcp"):
            return (f"storage of {_name(index.fqn)} names {_name(path)}, not a data file "
                    "meta.json lists")
        if (
            not (_is_int(info.offset) and _is_int(info.length))
            or info.offset < 0
            or (info.length < 0 or info.offset + info.length > sizes[path])
        ):
            return f"storage of {_name(index.fqn)} lies outside {path}"
        # transforms are extension plug-ins (compression and the like) we never write
        if info.transform_descriptors:
            return (f"storage of {_name(index.fqn)} asks for transforms "
                    f"{_name(info.transform_descriptors)}")
    return None


# planner_data maps a flat key to its path in the nested state dict; an integer step is a list
# index, and DCP pads a list up to it, so a hostile 10**12 would fill the memory.
MAX_LIST_INDEX = 1 << 20


def _planner_data_fault(planner_data: object) -> str | None:
    if planner_data is None:
        return None
    if not isinstance(planner_data, dict):
        return "planner_data is not a dict"
    for key, path in planner_data.items():
        if (
            not isinstance(key, str)
            or not isinstance(path, (tuple, list))
            or not all(
                isinstance(step, str) or (_is_int(step) and 0 <= step < MAX_LIST_INDEX)
                for step in path
            )
        ):
            return f"planner_data of {_name(key)} is not a path of names and small indices"
    return None


def read_checked_metadata(path: str, sizes: dict[str, int]) -> dcp_metadata.Metadata:
    """A checkpoint directory's ``.metadata``: a regular file under METADATA_CAP, unpickled by
    the restricted unpickler and checked against meta.json's file sizes."""
    file_path = os.path.join(path, DCP_METADATA)
    data = read_bytes_capped(file_path, "checkpoint metadata", METADATA_CAP)
    md = parse_metadata(data, file_path)
    check_metadata(md, file_path, sizes)
    return md


class _CheckedReader(FileSystemReader):
    """DCP's file reader, handed metadata that was already read and checked."""

    def __init__(self, path: str, md: dcp_metadata.Metadata) -> None:
        super().__init__(path)
        self._checked = md

    def read_metadata(self, *args: Any, **kwargs: Any) -> dcp_metadata.Metadata:
        self._checked.storage_meta = dcp_metadata.StorageMeta(load_id=self.load_id)
        return self._checked


class _WeightsOnlyBytes:
    """``load_bytes`` as DCP's DefaultLoadPlanner does it, but ``weights_only=True``: a
    non-tensor entry (an optimizer's lr, betas) is plain data, never an object to construct."""

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        try:
            loaded = torch.load(value, map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - any unpickling failure means a bad file
            raise UnsafeInputError(
                f"entry {read_item.dest_index.fqn!r} cannot be loaded safely ({_one_line(e)})"
            ) from None
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], loaded)
        else:
            self.state_dict[read_item.dest_index.fqn] = loaded


class SafeLoadPlanner(_WeightsOnlyBytes, DefaultLoadPlanner):
    """Fills a given state dict (the trainer's and evaluation's loads)."""


class SafeFullLoadPlanner(_WeightsOnlyBytes, _EmptyStateDictLoadPlanner):
    """Builds the whole state dict from the metadata (offline export)."""


def load_into(
    path: str,
    md: dcp_metadata.Metadata,
    state: dict,
    planner: DefaultLoadPlanner | None = None,
    no_dist: bool = True,
) -> None:
    """DCP's load of checkpoint ``path`` into ``state`` (in place), from checked metadata.

    DCP reports any fault as a CheckpointException (a BaseException whose text is a traceback
    per rank); it is unwrapped here: an unsafe entry raises UnsafeInputError, anything else
    (a tensor that does not fit) RuntimeError, both one line."""
    try:
        with single_process_quiet():
            _load_state_dict(
                state,
                storage_reader=_CheckedReader(path, md),
                planner=planner or SafeLoadPlanner(),
                no_dist=no_dist,
            )
    except CheckpointException as e:
        cause = root_cause(e)
        if isinstance(cause, UnsafeInputError):
            raise UnsafeInputError(f"{path}: {cause}") from None
        raise RuntimeError(_one_line(cause)) from None


def root_cause(error: BaseException) -> BaseException:
    """The first rank's original exception inside DCP's CheckpointException (itself if none)."""
    if isinstance(error, CheckpointException):
        for wrapped in error.failures.values():
            if isinstance(wrapped, tuple) and wrapped and isinstance(wrapped[0], BaseException):
                return root_cause(wrapped[0])
    return error


@contextlib.contextmanager
def single_process_quiet() -> Iterator[None]:
    """DCP warns "torch.distributed is disabled ... assuming the intent is to save (load) in a
    single process" on every one-process save and load. That is exactly our intent for a
    one-process run, export and evaluation, so that one warning is silenced, nothing else."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", r"torch\.distributed is disabled, unavailable or uninitialized", UserWarning
        )
        yield


def _name(value: object, limit: int = 80) -> str:
    """A name from the file, quoted and cut: a fault line must not carry a 50 MB key."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _one_line(error: BaseException | str, limit: int = 300) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."
