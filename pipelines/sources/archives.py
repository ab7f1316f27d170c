"""Safe, bounded, streaming readers shared by the file-based sources.

Everything here reads forward only, so it works on a Beam or fsspec stream as well as on a
local file, and nothing ever holds more than one document in memory:

- `open_decompressed`: undoes gzip, bz2, xz or zstd found by magic bytes (not by file name),
  concatenated streams included, and raises `TruncatedInputError` when the compressed data stops
  before its end marker (the stdlib and zstandard stream readers return short data silently).
- `iter_tar_members`: walks a tar stream (`r|`) member by member. Absolute paths, `..`
  components, links and device files are never opened (and nothing is ever extracted to disk);
  each one is a counted, logged `Failure(reason="unsafe_tar_member")`.
- `read_bounded` / `iter_lines`: read a document or a line with a size cap, so a decompression
  bomb or a runaway line becomes `Failure(reason="too_large")` instead of an out-of-memory worker.
- `decode_text`: bytes to str: UTF-8 (BOM stripped), UTF-16 with a BOM, else a documented
  UTF-8-with-replacement or cp1252 fallback; binary data raises `BinaryContentError`.

Errors are `InputError` subclasses whose `reason` is the key a `Failure` is counted under.
"""

from __future__ import annotations

import bz2
import codecs
import dataclasses
import io
import logging
import lzma
import os
import re
import tarfile
import zlib
from collections.abc import Iterator, Mapping
from typing import BinaryIO

import zstandard

from pipelines.document import Failure, ReadTask
from pipelines.io import match_inputs

logger = logging.getLogger(__name__)

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

_READ_CHUNK = 1 << 16
_MAX_OUTPUT_PER_CALL = 1 << 20
# zstd's decompressobj cannot cap its output, and one 4-byte RLE block can expand to 128 KiB, so
# feed it small pieces: 2 KiB of input yields at most ~64 MiB even for a crafted bomb.
_ZSTD_INPUT_CHUNK = 1 << 11
_STREAM_BUFFER = 1 << 20
SNIFF_BYTES = 1024  # >= one tar header block; enough to tell WARC, JSON, HTML and text apart


class InputError(Exception):
    """Bad input data; `reason` is the Failure reason it is counted under."""

    reason = "unreadable_file"

    def __init__(self, detail: str, input_offset: int | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        # compressed bytes of the stream read before the fault, where the decompressor knows it
        self.input_offset = input_offset


class TruncatedInputError(InputError):
    reason = "truncated_input"


class CorruptInputError(InputError):
    reason = "corrupt_input"


class TooLargeError(InputError):
    reason = "too_large"


class BinaryContentError(InputError):
    reason = "binary"


class ArchiveError(InputError):
    """The tar archive at `location` itself broke: no later member of it can be reached, so
    whoever walks that archive must stop. A reader of one member tells this apart from an error
    inside the member (a corrupt nested .xz, a nested tar that broke) by the location."""

    def __init__(self, cause: InputError, location: str) -> None:
        super().__init__(cause.detail, cause.input_offset)
        self.reason = cause.reason
        self.location = location


def failure(location: str, reason: str, detail: str = "", lost_from: int | None = None) -> Failure:
    """A Failure, logged: every skip a source makes is both counted and visible in the log. Its
    location and detail go through printable_name (a path may hold a non-UTF-8 byte);
    `lost_from` as Failure has it (0: a file that could not be read at all is lost whole)."""
    location, detail = printable_name(location), printable_name(detail)
    logger.warning("%s: %s: %s", location, reason, detail)
    return Failure(location=location, reason=reason, detail=detail, lost_from=lost_from)


def failure_from(error: InputError, location: str) -> Failure:
    return failure(location, error.reason, error.detail)


def broken_off(error: InputError, location: str) -> Failure:
    """The Failure of a task whose input stopped being readable at `error`: nothing after the
    fault is read, so the Failure says from where the input counts as lost (stats.py). A stream
    cut short counts whole: how much of it is missing cannot be known, and what is read of it
    cannot be told complete. Corrupt data counts from where the decompressor found it, else
    (the fault's place in the input unknown) whole as well."""
    return failure(location, error.reason, error.detail, lost_from(error))


def lost_from(error: InputError) -> int:
    """Failure.lost_from for a task stopped by `error` (see broken_off)."""
    if isinstance(error, TruncatedInputError) or error.input_offset is None:
        return 0
    return error.input_offset


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


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape_surrogate(match: re.Match) -> str:
    code = ord(match.group())
    # U+DC80..U+DCFF is how os.fsdecode and tarfile's surrogateescape carry a non-UTF-8 byte.
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def printable_name(name: str) -> str:
    """A file or member name as valid Unicode, for document ids: a byte that is not UTF-8
    (b"caf\\xe9.txt" lists as "caf\\udce9.txt") becomes the text "\\xe9", so the id is the same on
    every run and can be written as UTF-8 (Beam coders, Parquet, JSON all refuse a lone
    surrogate). Valid names are unchanged."""
    return _LONE_SURROGATE.sub(_escape_surrogate, name)


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


# --------------------------------------------------------------------------- decompression

_MAGIC = (
    (b"\x1f\x8b", "gzip"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
)
_MAGIC_OF = {**{name: magic for magic, name in _MAGIC}, "bz2": b"BZh"}


def detect_compression(head: bytes) -> str | None:
    """'gzip', 'bz2', 'xz', 'zstd' from a file's first bytes, or None for uncompressed data."""
    for magic, name in _MAGIC:
        if head.startswith(magic):
            return name
    # "BZh" + block size digit; the digit keeps a text file that starts with "BZh" plain text
    if head[:3] == b"BZh" and head[3:4] in b"123456789" and len(head) >= 4:
        return "bz2"
    return None


class _ZlibCodec:
    def __init__(self) -> None:
        self._decompressor = zlib.decompressobj(wbits=31)  # 31: gzip header and trailer
        self._output_was_capped = False

    @property
    def eof(self) -> bool:
        return self._decompressor.eof

    @property
    def needs_input(self) -> bool:
        # a call that hit the output cap may have consumed all input yet still hold output
        # inside zlib, so only an uncapped call with no unconsumed tail needs more input
        return not self._decompressor.unconsumed_tail and not self._output_was_capped

    @property
    def unused_data(self) -> bytes:
        return self._decompressor.unused_data

    def decompress(self, data: bytes) -> bytes:
        pending = self._decompressor.unconsumed_tail + data
        out = self._decompressor.decompress(pending, _MAX_OUTPUT_PER_CALL)
        self._output_was_capped = len(out) == _MAX_OUTPUT_PER_CALL
        return out


class _BoundedCodec:
    """bz2 and lzma decompressors share this interface, output capped per call."""

    def __init__(self, decompressor: bz2.BZ2Decompressor | lzma.LZMADecompressor) -> None:
        self._decompressor = decompressor

    @property
    def eof(self) -> bool:
        return self._decompressor.eof

    @property
    def needs_input(self) -> bool:
        return self._decompressor.needs_input

    @property
    def unused_data(self) -> bytes:
        return self._decompressor.unused_data

    def decompress(self, data: bytes) -> bytes:
        return self._decompressor.decompress(data, _MAX_OUTPUT_PER_CALL)


class _ZstdCodec:
    needs_input = True

    def __init__(self) -> None:
        self._decompressor = zstandard.ZstdDecompressor().decompressobj()

    @property
    def eof(self) -> bool:
        return self._decompressor.eof

    @property
    def unused_data(self) -> bytes:
        return self._decompressor.unused_data

    def decompress(self, data: bytes) -> bytes:
        return self._decompressor.decompress(data)


def _new_codec(compression: str) -> _ZlibCodec | _BoundedCodec | _ZstdCodec:
    if compression == "gzip":
        return _ZlibCodec()
    if compression == "bz2":
        return _BoundedCodec(bz2.BZ2Decompressor())
    if compression == "xz":
        return _BoundedCodec(lzma.LZMADecompressor(format=lzma.FORMAT_XZ))
    if compression == "zstd":
        return _ZstdCodec()
    raise ValueError(f"unknown compression {compression!r}")


def _starts_stream(data: bytes, compression: str) -> bool:
    if compression == "zstd" and data[1:4] == b"\x2a\x4d\x18" and data[0] & 0xF0 == 0x50:
        return True  # a zstd skippable frame
    return detect_compression(data) == compression


_CODEC_ERRORS = (zlib.error, lzma.LZMAError, OSError, EOFError, zstandard.ZstdError)


class _DecompressingReader(io.RawIOBase):
    """A raw, forward-only reader of the decompressed bytes of `raw` (or of `raw` itself)."""

    def __init__(self, raw: BinaryIO, compression: str | None, head: bytes) -> None:
        super().__init__()
        self._raw = raw
        self._compression = compression
        self._codec = _new_codec(compression) if compression else None
        self._input_chunk = _ZSTD_INPUT_CHUNK if compression == "zstd" else _READ_CHUNK
        self._pending = head  # bytes already read from raw (for sniffing), not yet consumed
        self._out = memoryview(b"")
        self._finished = False
        self.bytes_in = 0
        self.bytes_out = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:
        while not self._out:
            if self._finished:
                return 0
            self._out = memoryview(self._produce())
        count = min(len(buffer), len(self._out))
        buffer[:count] = self._out[:count]
        self._out = self._out[count:]
        return count

    def peek_exact(self, size: int) -> bytes:
        """The next `size` bytes (fewer only at the end of data), without consuming them."""
        while len(self._out) < size and not self._finished:
            self._out = memoryview(bytes(self._out) + self._produce())
        return bytes(self._out[:size])

    def _read_raw(self) -> bytes:
        if self._pending:
            data, self._pending = self._pending, b""
        else:
            data = self._raw.read(self._input_chunk)
        self.bytes_in += len(data)
        return data

    def _produce(self) -> bytes:
        if self._codec is None:
            data = self._read_raw()
            self._finished = not data
            self.bytes_out += len(data)
            return data
        if self._codec.eof:
            self._start_next_stream()
            return b""
        data = b""
        if self._codec.needs_input:
            data = self._read_raw()
            if not data:
                raise TruncatedInputError(
                    f"{self._compression} data ends before its end-of-stream marker "
                    f"(after {self.bytes_in} compressed bytes, {self.bytes_out} decompressed)",
                    self.bytes_in,
                )
        try:
            out = self._codec.decompress(data)
        except _CODEC_ERRORS as error:
            # the fault lies in the chunk just read: what came before it was read
            raise CorruptInputError(
                f"corrupt {self._compression} data after {self.bytes_in} compressed bytes: {error}",
                self.bytes_in - len(data),
            ) from None
        self.bytes_out += len(out)
        return out

    def _start_next_stream(self) -> None:
        # gzip, bz2, xz and zstd all allow concatenated streams (pigz, pbzip2, per-record WARC
        # gzip); zero padding after a stream (tape-blocked .tar.gz) is ignored like gzip(1) does.
        assert self._codec is not None
        rest = self._codec.unused_data.lstrip(b"\0")
        while not rest:
            more = self._read_raw()
            if not more:
                self._finished = True
                return
            rest = more.lstrip(b"\0")
        while len(rest) < 6:
            more = self._read_raw()
            if not more:
                break
            rest += more
        if len(rest) < 6 and _MAGIC_OF[self._compression or ""].startswith(rest):
            raise TruncatedInputError(
                f"{self._compression} data ends inside the header of the stream that starts "
                f"at compressed byte {self.bytes_in - len(rest)}",
                self.bytes_in - len(rest),
            )
        if not _starts_stream(rest, self._compression or ""):
            raise CorruptInputError(
                f"data after the end of the {self._compression} stream is not another "
                f"{self._compression} stream (at compressed byte {self.bytes_in - len(rest)})",
                self.bytes_in - len(rest),
            )
        self._codec = _new_codec(self._compression or "")
        self._pending = rest
        self.bytes_in -= len(rest)  # counted again when _read_raw hands it out


class _ShortReadBuffer(io.BufferedReader):
    """read(n) returns what one raw read gives (like read1), not n bytes at any cost.

    A plain BufferedReader.read(n) keeps reading until it has n bytes, so a reader that asks
    for a block past the last complete record (warcio, tarfile) would hit a truncation error
    and lose that record; with short reads the error comes only when the missing bytes are
    really needed."""

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            return super().read()
        return self.read1(size)


@dataclasses.dataclass
class OpenedStream:
    stream: BinaryIO  # buffered, decompressed bytes
    compression: str | None
    head: bytes  # the first SNIFF_BYTES decompressed bytes (also still in `stream`)


def _read_up_to(raw: BinaryIO, size: int) -> bytes:
    parts: list[bytes] = []
    remaining = size
    while remaining > 0:
        data = raw.read(remaining)
        if not data:
            break
        parts.append(data)
        remaining -= len(data)
    return b"".join(parts)


def open_decompressed(raw: BinaryIO) -> OpenedStream:
    """Wrap a binary stream so that reading it yields its decompressed bytes.

    Reads raise TruncatedInputError / CorruptInputError for bad compressed data (after every byte
    before the fault has been returned), so callers yield all good records first.
    """
    magic = _read_up_to(raw, 6)
    compression = detect_compression(magic)
    reader = _DecompressingReader(raw, compression, magic)
    head = reader.peek_exact(SNIFF_BYTES)
    return OpenedStream(_ShortReadBuffer(reader, _STREAM_BUFFER), compression, head)


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


# ----------------------------------------------------------------------------------- tar


def is_tar(head: bytes) -> bool:
    """True when `head` starts with a valid tar header block (checksum verified)."""
    if len(head) < tarfile.BLOCKSIZE:
        return False
    try:
        tarfile.TarInfo.frombuf(head[: tarfile.BLOCKSIZE], "utf-8", "surrogateescape")
    except tarfile.HeaderError:
        return False
    return True


def unsafe_member_reason(info: tarfile.TarInfo) -> str | None:
    """Why a tar member must not be read (None when it is a plain file at a relative path)."""
    if info.issym():
        return f"symlink to {info.linkname!r}"
    if info.islnk():
        return f"hardlink to {info.linkname!r}"
    if info.ischr() or info.isblk():
        return "device file"
    if info.isfifo():
        return "fifo"
    if not info.isreg():
        return f"unsupported member type {info.type!r}"
    name = info.name
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        return "absolute path"
    if ".." in re.split(r"[\\/]", name):
        return "path with a '..' component"
    return None


def _clean_member_name(name: str) -> str:
    return printable_name("/".join(part for part in name.split("/") if part not in ("", ".")))


@dataclasses.dataclass(frozen=True)
class ArchiveMember:
    name: str  # relative path inside the archive, './' removed
    size: int
    stream: BinaryIO  # readable only until the next member is requested


class _EndRecordingTarInfo(tarfile.TarInfo):
    """Records why tarfile stopped: in stream mode it ends silently on a truncated or garbled
    header, which would turn a cut archive into a quiet loss of every later member."""

    @classmethod
    def fromtarfile(cls, archive: tarfile.TarFile) -> tarfile.TarInfo:
        try:
            return super().fromtarfile(archive)
        except tarfile.HeaderError as error:
            archive.stream_end_error = error  # type: ignore[attr-defined]
            raise


class _MemberStream(io.RawIOBase):
    """A member's bytes; a failure of the archive underneath becomes ArchiveError."""

    def __init__(self, member_file: BinaryIO, archive_location: str, member_name: str) -> None:
        super().__init__()
        self._file = member_file
        self._archive_location = archive_location
        self._member_name = member_name

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:
        try:
            return self._file.readinto(buffer)
        except ArchiveError:
            raise  # an archive further out broke: it is that archive's error
        except InputError as error:
            raise ArchiveError(error, self._archive_location) from None
        except (tarfile.ReadError, EOFError) as error:
            truncated = TruncatedInputError(f"tar data ends inside member {self._member_name}: {error}")
            raise ArchiveError(truncated, self._archive_location) from None


def _skip_to_next_header(archive: tarfile.TarFile, last: tarfile.TarInfo) -> None:
    """Read on to where the next member's header starts, checking the last member's claimed
    size against the real stream. tarfile's stream mode would skip there itself, a block at a
    time without noticing the end of the data: a header claiming 2**60 bytes never finished."""
    remaining = archive.offset - archive.fileobj.tell()
    while remaining > 0:
        skipped = archive.fileobj.read(min(remaining, _STREAM_BUFFER))
        if not skipped:
            raise TruncatedInputError(
                f"tar data ends inside member {last.name}, whose header claims {last.size} "
                f"bytes ({remaining} bytes short)")
        remaining -= len(skipped)


def iter_tar_members(stream: BinaryIO, location: str) -> Iterator[ArchiveMember | Failure]:
    """The regular-file members of a tar stream, in archive order; unsafe members as Failures.

    Raises ArchiveError(location=location) when the archive is truncated or corrupt, after
    yielding every member before the fault (errors of an enclosing archive pass through as they
    are). Directories are structure, not content, and are passed over silently.
    """
    try:
        archive = tarfile.open(fileobj=stream, mode="r|", tarinfo=_EndRecordingTarInfo)
    except ArchiveError:
        raise
    except InputError as error:
        raise ArchiveError(error, location) from None
    except (tarfile.TarError, EOFError) as error:
        corrupt = CorruptInputError(f"not a readable tar archive: {error}")
        raise ArchiveError(corrupt, location) from None
    last_name = "(start)"
    info = None
    with archive:
        while True:
            try:
                if info is not None:  # (the first header was read when the archive opened)
                    _skip_to_next_header(archive, info)
                info = archive.next()
            except ArchiveError:
                raise
            except InputError as error:
                raise ArchiveError(error, location) from None
            except (tarfile.TarError, EOFError) as error:
                truncated = TruncatedInputError(f"tar data ends after member {last_name}: {error}")
                raise ArchiveError(truncated, location) from None
            if info is None:
                break
            # stream mode keeps every TarInfo for getmembers(); we never call it, and an
            # OpenWebText-sized archive would otherwise grow the list by millions of entries
            archive.members.clear()
            last_name = info.name
            if info.isdir():
                continue
            reason = unsafe_member_reason(info)
            if reason is not None:
                yield failure(f"{location}:{info.name}", "unsafe_tar_member", reason)
                continue
            member_file = archive.extractfile(info)
            assert member_file is not None  # regular files always have data
            yield ArchiveMember(
                name=_clean_member_name(info.name),
                size=info.size,
                stream=_MemberStream(member_file, location, info.name),
            )
        end_error = getattr(archive, "stream_end_error", None)
    if isinstance(end_error, tarfile.EOFHeaderError):
        # tarfile stops at the end-of-archive blocks; reading on to the end of the stream lets
        # the decompressor check its own end marker (a cut .tar.gz loses only zero padding)
        try:
            while stream.read(_STREAM_BUFFER):
                pass
        except ArchiveError:
            raise
        except InputError as error:
            raise ArchiveError(error, location) from None
    if isinstance(end_error, (tarfile.EmptyHeaderError, tarfile.TruncatedHeaderError)):
        truncated = TruncatedInputError(
            f"tar data ends without the end-of-archive blocks, after member {last_name}")
        raise ArchiveError(truncated, location)
    if isinstance(end_error, tarfile.InvalidHeaderError):
        corrupt = CorruptInputError(f"invalid tar header after member {last_name}: {end_error}")
        raise ArchiveError(corrupt, location)


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
