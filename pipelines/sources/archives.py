"""Safe, bounded, streaming readers shared by the file-based sources: one import for them.

Everything here reads forward only, so it works on a Beam or fsspec stream as well as on a
local file, and nothing ever holds more than one document in memory. The pieces live by job:

- `input_errors`: the InputError kinds and the Failure made from one (`failure`, `broken_off`).
- `compression`: `open_decompressed` undoes gzip, bz2, xz or zstd found by magic bytes.
- `tar_members`: `iter_tar_members` walks a tar stream, never opening an unsafe member.
- here: source options (`max_document_bytes`), planning one task per file, `read_bounded` /
  `iter_lines` (a document or a line with a size cap, so a decompression bomb or a runaway line
  becomes `Failure(reason="too_large")`), and `decode_text` (bytes to str: UTF-8, UTF-16 with a
  BOM, else a documented UTF-8-with-replacement or cp1252 fallback; binary data raises
  `BinaryContentError`).

The sources import all of it from here (`__all__`).
"""

from __future__ import annotations

import codecs
import dataclasses
import os
import re
from collections.abc import Iterator, Mapping
from typing import BinaryIO

from pipelines.document import ReadTask
from pipelines.io import match_inputs
from pipelines.sources.compression import (
    SNIFF_BYTES,
    OpenedStream,
    detect_compression,
    open_decompressed,
)
from pipelines.sources.input_errors import (
    ArchiveError,
    BinaryContentError,
    CorruptInputError,
    InputError,
    TooLargeError,
    TruncatedInputError,
    broken_off,
    failure,
    failure_from,
    lost_from,
    printable_name,
)
from pipelines.sources.tar_members import (
    ArchiveMember,
    is_tar,
    iter_tar_members,
    unsafe_member_reason,
)

__all__ = [
    "BINARY_CONTROL_RATIO", "BINARY_SAMPLE_BYTES", "DEFAULT_MAX_DOCUMENT_BYTES",
    "FILE_BYTES_OPTION", "MAX_DOCUMENT_BYTES_OPTION", "RELATIVE_NAME_OPTION", "SNIFF_BYTES",
    "WORKER_BYTES_PER_DOCUMENT_BYTE", "ArchiveError", "ArchiveMember", "BinaryContentError",
    "CorruptInputError", "DecodedText", "InputError", "OpenedStream", "TooLargeError",
    "TruncatedInputError", "binary_reason", "broken_off", "decode_text", "detect_compression",
    "failure", "failure_from", "is_tar", "iter_lines", "iter_tar_members", "lost_from",
    "max_document_bytes", "open_decompressed", "parse_size", "plan_file_tasks", "printable_name",
    "read_bounded", "relative_name", "size_option", "task_name", "to_lf",
    "unsafe_member_reason",
]  # fmt: skip

MAX_DOCUMENT_BYTES_OPTION = "max_document_bytes"
# A worker holds several working copies of a document while it reads, cleans, signs (dedup),
# tokenizes and spills it: its peak memory grows by up to this many bytes per document byte
# (measured 20x at 32 MB, bench/results/worker_memory.md; rounded up). With the default cap a
# worker stays under ~6.5 GB, so two fit in 24 GB with room; a bigger cap costs this much more.
WORKER_BYTES_PER_DOCUMENT_BYTE = 24
DEFAULT_MAX_DOCUMENT_BYTES = 256 << 20  # 256 MiB: still far above any real book or page
# Set by plan_file_tasks: the file's name relative to the input pattern, used in document ids so
# that ids do not depend on where the corpus is mounted.
RELATIVE_NAME_OPTION = "relative_name"
# Also set by plan_file_tasks: the file's size, so that splitting never opens a small file.
FILE_BYTES_OPTION = "file_bytes"
_STREAM_BUFFER = 1 << 20


# --------------------------------------------------------------------------------- options

_SIZE_PATTERN = re.compile(r"^\s*(\d+)\s*([kmgt]?i?b?)\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9,
               "gb": 10**9, "t": 10**12, "tb": 10**12, "ki": 2**10, "kib": 2**10, "mi": 2**20,
               "mib": 2**20, "gi": 2**30, "gib": 2**30, "ti": 2**40, "tib": 2**40}


def parse_size(text: str) -> int:
    """'1073741824', '512MiB', '50MB', '1g' -> bytes. Raises ValueError naming the text."""
    match = _SIZE_PATTERN.match(text)
    unit = match.group(2).lower() if match else ""
    if not match or unit not in _SIZE_UNITS:
        raise ValueError(f"not a size: {text!r} (use e.g. 1048576, 512MiB or 1GB)")
    return int(match.group(1)) * _SIZE_UNITS[unit]


def size_option(options: Mapping[str, str], key: str, default: int) -> int:
    """A positive byte-size source option ("64MiB", "1000"), or ``default`` when not given."""
    value = options.get(key)
    if value is None:
        return default
    size = parse_size(str(value))
    if size <= 0:
        raise ValueError(f"{key} must be positive, got {value!r}")
    return size


def max_document_bytes(options: Mapping[str, str]) -> int:
    """The `max_document_bytes` option: the largest (decompressed) document, tar member, JSON
    line or record a source reads into memory; bigger ones are Failure(reason="too_large")."""
    return size_option(options, MAX_DOCUMENT_BYTES_OPTION, DEFAULT_MAX_DOCUMENT_BYTES)


# ------------------------------------------------------------------------------- planning

_WILDCARD = re.compile(r"[*?\[]")


def _pattern_base(pattern: str) -> str:
    """The directory part of a pattern before its first wildcard, ending in '/'."""
    wildcard = _WILDCARD.search(pattern)
    prefix = pattern[: wildcard.start()] if wildcard else pattern
    return prefix[: prefix.rfind("/") + 1]


def relative_name(path: str, base: str) -> str:
    """`path` relative to the pattern's base directory (its basename if it is not under it), as
    printable_name makes it."""
    if base and path.startswith(base):
        return printable_name(path[len(base):])
    if "://" not in path and base and "://" not in base:
        relative = os.path.relpath(os.path.abspath(path), os.path.abspath(base))
        if not relative.startswith(".."):
            return printable_name(relative.replace(os.sep, "/"))
    return printable_name(path.rstrip("/").rsplit("/", 1)[-1])


def plan_file_tasks(source: str, pattern: str, options: Mapping[str, str]) -> list[ReadTask]:
    """One ReadTask per file matching `pattern` (a glob, a file, or a directory = all files
    under it), sorted by path. A source may split a big file's task further (sources/ranges.py)
    where its format allows."""
    max_document_bytes(options)  # a bad option fails on the launcher, not on every worker
    local_dir = "://" not in pattern and os.path.isdir(pattern)
    if local_dir or pattern.endswith("/"):
        pattern = pattern.rstrip("/") + "/**"
    base = _pattern_base(pattern)
    files = [f for f in match_inputs(pattern) if not ("://" not in f.path and os.path.isdir(f.path))]
    if not files:
        raise FileNotFoundError(f"no input files match {pattern!r} (only directories)")
    return [
        ReadTask(source=source, path=f.path,
                 options={**options, RELATIVE_NAME_OPTION: relative_name(f.path, base),
                          FILE_BYTES_OPTION: str(f.size_bytes)})
        for f in files
    ]


def task_name(task: ReadTask) -> str:
    """The name of the task's file to use in document ids (set by plan_file_tasks)."""
    name = task.options.get(RELATIVE_NAME_OPTION) or task.path.rstrip("/").rsplit("/", 1)[-1]
    return printable_name(name)


# ------------------------------------------------------------------------- bounded reading


def read_bounded(stream: BinaryIO, limit: int, what: str) -> bytes:
    """All remaining bytes of `stream`, or TooLargeError once more than `limit` arrive (reads in
    chunks, so memory stays at `limit` however big the stream would decompress to)."""
    parts: list[bytes] = []
    total = 0
    while True:
        data = stream.read(min(_STREAM_BUFFER, limit + 1 - total))
        if not data:
            return b"".join(parts)
        parts.append(data)
        total += len(data)
        if total > limit:
            raise TooLargeError(f"{what} is larger than {MAX_DOCUMENT_BYTES_OPTION}={limit}")


def iter_lines(stream: BinaryIO, limit: int) -> Iterator[tuple[int, bytes | None]]:
    """(1-based line number, line bytes without the newline) for each line; None instead of the
    bytes for a line longer than `limit` (the rest of it is skipped, not held in memory)."""
    number = 0
    while True:
        line = stream.readline(limit + 1)
        if not line:
            return
        number += 1
        if len(line) > limit and not line.endswith(b"\n"):
            while line and not line.endswith(b"\n"):
                line = stream.readline(_STREAM_BUFFER)
            yield number, None
            continue
        yield number, line.rstrip(b"\r\n")


# -------------------------------------------------------------------------------- decoding

# Control bytes that plain text does not contain (tab, LF, VT, FF, CR and ESC are allowed).
_CONTROL_BYTES = bytes(set(range(32)) - {9, 10, 11, 12, 13, 27}) + b"\x7f"
BINARY_SAMPLE_BYTES = 1 << 16
BINARY_CONTROL_RATIO = 0.10


def binary_reason(data: bytes) -> str | None:
    """Why `data` looks binary rather than text, judged on its first 64 KiB: a NUL byte (git's
    rule) or more than 10% control bytes. None for text (UTF-16/32 with a BOM counts as text)."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return None
    sample = data[:BINARY_SAMPLE_BYTES]
    nul = sample.find(b"\0")
    if nul >= 0:
        return f"NUL byte at offset {nul}"
    controls = len(sample) - len(sample.translate(None, _CONTROL_BYTES))
    if sample and controls / len(sample) > BINARY_CONTROL_RATIO:
        return f"{controls} control bytes in the first {len(sample)} bytes"
    return None


def _cp1252_or_latin1(error: UnicodeDecodeError) -> tuple[str, int]:
    # cp1252 leaves 0x81, 0x8D, 0x8F, 0x90, 0x9D undefined; ISO-8859-1 maps them to C1 controls
    return error.object[error.start:error.end].decode("latin-1"), error.end


codecs.register_error("pipelines_cp1252_latin1", _cp1252_or_latin1)


@dataclasses.dataclass(frozen=True)
class DecodedText:
    text: str
    # "utf-8", "utf-16", "utf-8+replace" (invalid sequences became U+FFFD) or "cp1252"
    encoding: str


def decode_text(data: bytes) -> DecodedText:
    """Text from bytes. Raises BinaryContentError for binary data.

    UTF-8 (a BOM is dropped) and BOM-marked UTF-16 decode exactly. Other bytes are judged by
    what the invalid ones look like: when the valid multi-byte UTF-8 characters outnumber the
    invalid bytes the data is UTF-8 with some damage, decoded with U+FFFD replacements;
    otherwise it is a legacy 8-bit file, decoded as cp1252 (with latin-1 for the 5 bytes cp1252
    leaves undefined), the encoding of virtually all non-UTF-8 English web text and e-books.
    """
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        try:
            return DecodedText(data.decode("utf-16"), "utf-16")
        except UnicodeDecodeError:
            pass  # not really UTF-16: judge it like any other bytes
    reason = binary_reason(data)
    if reason is not None:
        raise BinaryContentError(f"binary data, not text: {reason}")
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8):]
    try:
        return DecodedText(data.decode("utf-8"), "utf-8")
    except UnicodeDecodeError:
        pass
    replaced = data.decode("utf-8", errors="replace")
    invalid = replaced.count("\ufffd") - data.count("\ufffd".encode())
    non_ascii = len(replaced) - len(replaced.encode("ascii", errors="ignore"))
    valid_multibyte = non_ascii - replaced.count("\ufffd")
    if valid_multibyte >= invalid:
        return DecodedText(replaced, "utf-8+replace")
    return DecodedText(data.decode("cp1252", errors="pipelines_cp1252_latin1"), "cp1252")


def to_lf(text: str) -> str:
    """CRLF and lone CR line ends as LF."""
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text
