"""The weights files of a Hugging Face folder read as untrusted input: ``model.safetensors``
through a bounded header parser of our own, or ``pytorch_model.bin`` with
``torch.load(weights_only=True)``, each alone or as the shards an ``*.index.json`` names.

A safetensors file is an 8-byte little-endian header length, a JSON header (name -> dtype,
shape, data offsets) and the tensors' bytes. The header is capped, its JSON depth bounded,
every entry checked (a dtype we know, a shape of non-negative ints, offsets inside the file
that span exactly the shape's bytes, no two tensors on the same bytes) before one byte of
data is read, so what the tensors will take is known first (:class:`Weights`). Every refusal is
one :class:`~common.safe_io.UnsafeInputError` line naming the file.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass, field

import torch

from common.safe_io import (
    MAX_JSON_DEPTH,
    UnsafeInputError,
    format_bytes,
    json_depth,
    read_text_capped,
)

# A header lists names, dtypes, shapes and offsets: ~100 bytes a tensor. 100 MB is a million
# tensors, far past any model's.
HEADER_CAP = 100 << 20
INDEX_CAP = 100 << 20
MAX_RANK = 8
DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
}  # fmt: skip
SAFETENSORS, SAFETENSORS_INDEX = "model.safetensors", "model.safetensors.index.json"
TORCH_BIN, TORCH_BIN_INDEX = "pytorch_model.bin", "pytorch_model.bin.index.json"


@dataclass
class _Entry:
    dtype: torch.dtype
    shape: tuple[int, ...]
    start: int  # absolute offset in the file
    length: int


@dataclass
class Weights:
    """The tensors of an HF folder: their shapes and dtypes known before any data is read."""

    shapes: dict[str, tuple[torch.Size, torch.dtype]] = field(default_factory=dict)
    _safetensors: dict[str, tuple[str, _Entry]] = field(default_factory=dict)
    _loaded: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def bytes(self) -> int:
        return sum(s.numel() * d.itemsize for s, d in self.shapes.values())

    def tensors(self) -> dict[str, torch.Tensor]:
        """Every tensor, read from its file."""
        out = dict(self._loaded)
        for name, (path, entry) in self._safetensors.items():
            out[name] = _read_tensor(path, entry)
        return out

    def add(self, name: str, shape, dtype, where: str) -> None:
        if name in self.shapes:
            raise UnsafeInputError(f"{where}: tensor {_name(name)} is in two weights files")
        self.shapes[name] = (torch.Size(shape), dtype)


def read_weights(folder: str) -> Weights:
    """The weights of HF folder ``folder`` (safetensors first, as transformers loads them)."""
    for index, single, reader in (
        (SAFETENSORS_INDEX, SAFETENSORS, _add_safetensors),
        (TORCH_BIN_INDEX, TORCH_BIN, _add_torch_bin),
    ):
        if os.path.exists(os.path.join(folder, single)):
            files = [single]
        elif os.path.exists(os.path.join(folder, index)):
            files = _index_files(folder, index)
        else:
            continue
        weights = Weights()
        for name in files:
            reader(os.path.join(folder, name), weights)
        return weights
    raise UnsafeInputError(
        f"{folder}: no weights file ({SAFETENSORS}, {TORCH_BIN} or an index of their shards)"
    )


def _index_files(folder: str, index: str) -> list[str]:
    """The shard files an ``*.index.json`` names: plain names of files in ``folder``."""
    path = os.path.join(folder, index)
    text = read_text_capped(path, "weights index", INDEX_CAP)
    try:
        if json_depth(text) > MAX_JSON_DEPTH:
            raise ValueError(f"JSON nested deeper than {MAX_JSON_DEPTH}")
        weight_map = json.loads(text).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ValueError("no weight_map")
        files = sorted(set(weight_map.values()))
        for name in files:
            if not isinstance(name, str) or os.path.basename(name) != name or name in ("", ".", ".."):
                raise ValueError(f"weight_map names {_name(name)}, not a file beside it")
    except (ValueError, AttributeError) as e:
        raise UnsafeInputError(f"{path}: {e}") from None
    return files


def _add_safetensors(path: str, weights: Weights) -> None:
    """Check ``path``'s header and add its entries (no tensor data read)."""
    if not os.path.isfile(path):
        raise UnsafeInputError(f"{path}: not a regular file")
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise UnsafeInputError(f"{path}: {size} bytes, too short for a safetensors header")
        (length,) = struct.unpack("<Q", head)
        if length > HEADER_CAP or 8 + length > size:
            raise UnsafeInputError(
                f"{path}: header length {length:,} past the file's {size:,} bytes or the "
                f"{format_bytes(HEADER_CAP)} cap: not a safetensors file"
            )
        raw = f.read(length)
    try:
        text = raw.decode("utf-8")
        if json_depth(text) > MAX_JSON_DEPTH:
            raise ValueError(f"JSON nested deeper than {MAX_JSON_DEPTH}")
        header = json.loads(text)
        if not isinstance(header, dict):
            raise ValueError("not a JSON object")
    except ValueError as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise UnsafeInputError(f"{path}: unreadable safetensors header ({_cut(e)})") from None
    data_start = 8 + length
    spans = []
    for name, record in header.items():
        if name == "__metadata__":
            continue
        entry = _entry(record, data_start, size, f"{path}: tensor {_name(name)}")
        weights.add(name, entry.shape, entry.dtype, path)
        weights._safetensors[name] = (path, entry)
        spans.append((entry.start, entry.start + entry.length, name))
    spans.sort()
    for (_, end, first), (start, _, second) in zip(spans, spans[1:]):
        if start < end:
            raise UnsafeInputError(
                f"{path}: tensors {_name(first)} and {_name(second)} share bytes"
            )


def _entry(record: object, data_start: int, size: int, what: str) -> _Entry:
    if not isinstance(record, dict):
        raise UnsafeInputError(f"{what}: its header entry is not an object")
    dtype = DTYPES.get(record.get("dtype")) if isinstance(record.get("dtype"), str) else None
    if dtype is None:
        raise UnsafeInputError(f"{what}: dtype {_name(record.get('dtype'))} is none we read")
    shape, offsets = record.get("shape"), record.get("data_offsets")
    if (
        not isinstance(shape, list)
        or len(shape) > MAX_RANK
        or not all(_is_count(d) for d in shape)
    ):
        raise UnsafeInputError(f"{what}: shape {_name(shape)} is not a list of sizes")
    if not (
        isinstance(offsets, list) and len(offsets) == 2 and all(_is_count(o) for o in offsets)
    ) or not offsets[0] <= offsets[1] <= size - data_start:
        raise UnsafeInputError(
            f"{what}: data offsets {_name(offsets)} lie outside the file's "
            f"{size - data_start:,} data bytes"
        )
    length = offsets[1] - offsets[0]
    needed = math.prod(shape) * dtype.itemsize
    if needed != length:
        raise UnsafeInputError(
            f"{what}: shape {_name(shape)} of {record['dtype']} needs {needed:,} bytes, its "
            f"offsets span {length:,}"
        )
    return _Entry(dtype, tuple(shape), data_start + offsets[0], length)


def _read_tensor(path: str, entry: _Entry) -> torch.Tensor:
    if entry.length == 0:
        return torch.empty(entry.shape, dtype=entry.dtype)
    with open(path, "rb") as f:
        f.seek(entry.start)
        data = bytearray(f.read(entry.length))
    if len(data) != entry.length:  # the file shrank since its header was checked
        raise UnsafeInputError(f"{path}: cut short while read")
    return torch.frombuffer(data, dtype=entry.dtype).reshape(entry.shape)


def _add_torch_bin(path: str, weights: Weights) -> None:
    """A ``torch.save`` state dict (weights_only, memory-mapped: no data read yet)."""
    if not os.path.isfile(path):
        raise UnsafeInputError(f"{path}: not a regular file")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as e:  # noqa: BLE001 - any failure to unpickle untrusted bytes is the file's
        raise UnsafeInputError(f"{path}: cannot be loaded safely ({_cut(e)})") from None
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise UnsafeInputError(f"{path}: not a state dict of named tensors")
    for name, tensor in state.items():
        weights.add(name, tensor.shape, tensor.dtype, path)
        weights._loaded[name] = tensor


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _name(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _cut(error: BaseException, limit: int = 200) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."
