"""The bounded, restricted unpickler for DCP's ``.metadata`` files, and its allow-list.

A ``.metadata`` file is a pickle, and a pickle is a program: it can name any global, call it,
set attributes on anything it holds, and make a tiny file ask for a huge amount of memory (one
``EMPTY_LIST`` byte is a 56-byte list). What a DCP metadata file may do is written here, in one
place (``ALLOWED_GLOBALS``, ``BUILDABLE``, ``ALLOWED_OPCODES``), and everything else is refused
with one line:

* globals: DCP's metadata classes, torch dtypes / ``torch.Size`` / the layout lookup, and the
  path classes a saver's ``checkpoint_id`` pickles as;
* BUILD (setting an object's state) only on instances of the plain data classes the metadata
  is made of, only with their own field names: never on a class, a function or a torch object
  (BUILD on the allowed ``torch.serialization._get_layout`` would change what it returns for
  the rest of the process);
* opcodes: those the protocol-2 to -5 pickles of plain data use; persistent ids, the extension
  registry, protocol-0 instantiation (INST, OBJ), out-of-band buffers and the text encodings of
  numbers and strings are refused;
* budgets: at most ``MAX_OPCODES`` opcodes (time), an estimate of the memory the objects built
  take held under ``MEMORY_PER_BYTE`` x the file's size + ``MEMORY_SLACK``, and no string or
  bytes value longer than ``MAX_STRING``.
"""

from __future__ import annotations

import dataclasses
import io
import pathlib
import pickle
from typing import Any

import torch
from torch.distributed.checkpoint import metadata as dcp_metadata
from torch.distributed.checkpoint.filesystem import _StorageInfo

# Real metadata of a small GPT run: 40 kB, 17k opcodes (0.43 a byte; 3-8 us each in this
# unpickler). 2**23 opcodes is a file of ~19 MB of real metadata, past checkpoint_io's cap, and
# bounds the time a hostile file takes to well under a minute.
MAX_OPCODES = 1 << 23
# Memory charged per opcode (see _charge): real metadata charges ~19 bytes per byte of file; a
# flood of one-byte EMPTY_LIST opcodes charges 64 (and takes ~80 in CPython).
MEMORY_PER_BYTE = 32
MEMORY_SLACK = 4 << 20
# The longest name a metadata file holds is a parameter's or optimizer state's path (~100 chars)
MAX_STRING = 4096
# An object on the stack, a memo entry, a pointer appended to a container: bytes charged.
_OBJECT, _REFERENCE = 64, 8

_METADATA_CLASSES = {
    name: getattr(dcp_metadata, name)
    for name in (
        "Metadata",
        "TensorStorageMetadata",
        "BytesStorageMetadata",
        "ChunkStorageMetadata",
        "TensorProperties",
        "StorageMeta",
        "MetadataIndex",
        "_MEM_FORMAT_ENCODING",
    )
}
ALLOWED_GLOBALS = {
    **{("torch.distributed.checkpoint.metadata", n): c for n, c in _METADATA_CLASSES.items()},
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"): _StorageInfo,
    ("torch", "Size"): torch.Size,
    # layouts pickle as a call to this lookup by name (it only reads a dict of torch.layout)
    ("torch.serialization", "_get_layout"): torch.serialization._get_layout,
    # StorageMeta.checkpoint_id: the path the saver wrote to (informational)
    ("pathlib", "PosixPath"): pathlib.PosixPath,
    ("pathlib", "PurePosixPath"): pathlib.PurePosixPath,
}
# The plain data classes whose instances a metadata file may BUILD (set the fields of)
BUILDABLE = frozenset(
    cls for cls in (*_METADATA_CLASSES.values(), _StorageInfo) if dataclasses.is_dataclass(cls)
)
_CONTAINER_OPS = ("EMPTY_LIST", "EMPTY_DICT", "EMPTY_SET", "EMPTY_TUPLE", "LIST", "DICT",
                  "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "FROZENSET")
_SCALAR_OPS = ("NONE", "NEWTRUE", "NEWFALSE", "BININT", "BININT1", "BININT2", "LONG1",
               "BINFLOAT", "SHORT_BINUNICODE", "BINUNICODE", "SHORT_BINSTRING", "BINSTRING",
               "SHORT_BINBYTES", "BINBYTES")
_CALL_OPS = ("GLOBAL", "STACK_GLOBAL", "REDUCE", "NEWOBJ", "BUILD")
_INSERT_OPS = ("APPEND", "APPENDS", "SETITEM", "SETITEMS", "ADDITEMS")
_MEMO_OPS = ("MEMOIZE", "PUT", "BINPUT", "LONG_BINPUT")
_STACK_OPS = ("PROTO", "FRAME", "STOP", "MARK", "POP", "POP_MARK", "GET", "BINGET",
              "LONG_BINGET")
ALLOWED_OPCODES = frozenset(
    getattr(pickle, name)[0]
    for name in (*_CONTAINER_OPS, *_SCALAR_OPS, *_CALL_OPS, *_INSERT_OPS, *_MEMO_OPS, *_STACK_OPS)
)
_STRING_OPS = frozenset(getattr(pickle, name)[0] for name in _SCALAR_OPS if "BIN" in name
                        and ("UNICODE" in name or "STRING" in name or "BYTES" in name))
_OPCODE_NAMES = {
    getattr(pickle, name)[0]: name for name in dir(pickle)
    if name.isupper() and isinstance(getattr(pickle, name), bytes) and len(getattr(pickle, name)) == 1
}


def _charge(name: str) -> int:
    """Bytes of memory an opcode is taken to cost: a new object, or a reference to one (a stack
    slot, a container's pointer); a string or bytes value is charged its length besides."""
    if name in ("PROTO", "FRAME", "STOP"):
        return 0
    if name in _INSERT_OPS or name in _STACK_OPS:
        return _REFERENCE
    return _OBJECT  # memo entries included: a dict slot and its key


def _guarded_opcode(code: int):
    """The unpickler's handler of opcode `code`, under the budgets (and BUILD's check)."""
    original = pickle._Unpickler.dispatch[code]
    charge = _charge(_OPCODE_NAMES[code])

    def handler(self: MetadataUnpickler) -> None:
        self.opcodes_left -= 1
        self.memory_left -= charge
        if self.opcodes_left < 0 or self.memory_left < 0:
            self.over_budget()
        if code == _BUILD:
            _check_build(self.stack[-2], self.stack[-1])
        original(self)
        if code in _STRING_OPS:
            self.string_pushed(len(self.stack[-1]))

    return handler


def _refused_opcode(code: int):
    name = _OPCODE_NAMES.get(code, f"0x{code:02x}")

    def handler(self: MetadataUnpickler) -> None:
        raise pickle.UnpicklingError(f"uses the {name} opcode, which DCP metadata never does "
                                     "(refused)")

    return handler


_BUILD = pickle.BUILD[0]


class MetadataUnpickler(pickle._Unpickler):
    """Python's own unpickler (the pure-Python one, so that each opcode can be guarded) with the
    allow-list and budgets of this module; the memory budget is set by the size of `data`."""

    def __init__(self, data: bytes) -> None:
        super().__init__(io.BytesIO(data))
        self.opcodes_left = MAX_OPCODES
        self.memory_left = MEMORY_PER_BYTE * len(data) + MEMORY_SLACK

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in ALLOWED_GLOBALS:
            return ALLOWED_GLOBALS[(module, name)]
        value = getattr(torch, name, None) if module == "torch" else None
        if isinstance(value, torch.dtype):
            return value
        raise pickle.UnpicklingError(
            f"refers to {_short(module)}.{_short(name)}, which a DCP metadata file never needs "
            "(refused: it could run code)"
        )

    def over_budget(self) -> None:
        if self.opcodes_left < 0:
            raise pickle.UnpicklingError(f"runs more than {MAX_OPCODES:,} opcodes (refused)")
        raise pickle.UnpicklingError(
            f"builds more objects than {MEMORY_PER_BYTE} bytes of memory per byte of file "
            "(refused)")

    def string_pushed(self, length: int) -> None:
        if length > MAX_STRING:
            raise pickle.UnpicklingError(
                f"holds a string of {length:,} characters (at most {MAX_STRING:,})")
        self.memory_left -= length

    dispatch = {code: _guarded_opcode(code) if code in ALLOWED_OPCODES else _refused_opcode(code)
                for code in range(256)}


def _check_build(target: object, state: object) -> None:
    """BUILD sets `target`'s state: only a plain data class's instance, with its own fields
    (TensorProperties sets them from a tuple in its own __setstate__)."""
    cls = type(target)
    if cls not in BUILDABLE:
        what = "a class" if isinstance(target, type) else f"a {cls.__name__}"
        raise pickle.UnpicklingError(f"sets attributes on {what} (refused: only DCP's "
                                     "metadata records are built)")
    if "__setstate__" in vars(cls):
        return
    names = {field.name for field in dataclasses.fields(cls)}
    if not isinstance(state, dict) or not all(isinstance(k, str) and k in names for k in state):
        raise pickle.UnpicklingError(f"sets a {cls.__name__} field it does not have (refused)")


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
