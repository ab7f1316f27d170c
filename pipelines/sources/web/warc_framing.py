"""WARC framing: a WARC stream cut into its records, resynchronising after a bad one.

warcio trusts each record's Content-Length to find the next record, so one wrong length (or a
broken header block) halfway through a crawl file cost every record after it. Here each record
is delimited first and checked: its header block must hold a Content-Length, and its content
must be followed by the blank lines that end a record and then the next `WARC/1.` header line
or the end of the data. A record that fails the check is one `CorruptRecord`, and reading goes
on at the next line that starts with `WARC/1.`, looked for from the start of the bad record's
content (a Content-Length that is too long swallows the records after it; they are found
again). Only a stream that ends inside a record is a `TruncatedInputError`: nothing follows to
resynchronise on.

A record's bytes (header block, content, the closing blank lines) are handed on whole, to be
parsed by warcio one at a time; a record whose content is over the size limit is skipped
without being held, as a `CorruptRecord` with reason "too_large".
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from typing import BinaryIO

from pipelines.sources.input_errors import TruncatedInputError

_VERSION_LINE = b"WARC/1."
_RECORD_END = b"\r\n\r\n"
# A header block is a few hundred bytes; one over this is not a WARC header block.
MAX_HEADER_BYTES = 1 << 20
_LINE_LIMIT = 1 << 16
_READ_CHUNK = 1 << 20
_CONTENT_LENGTH = re.compile(rb"^content-length:[ \t]*(\d{1,18})[ \t]*\r?$", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class CorruptRecord:
    """A record that could not be delimited (or was too large to hold); reading went on."""

    index: int  # 1-based position among the records found
    reason: str  # "corrupt_input" or "too_large"
    detail: str


class _Pushback:
    """A forward reader that can put bytes back in front of the stream (to rescan them)."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._buffer = b""
        self._position = 0  # of the next unread byte in _buffer

    def unread(self, data: bytes) -> None:
        start = self._position - len(data)
        if start >= 0 and self._buffer[start : self._position] == data:
            self._position = start  # what was just read: no copy of the buffer
            return
        self._buffer = data + self._buffer[self._position :]
        self._position = 0

    def _more(self) -> bool:
        data = self._stream.read(_READ_CHUNK)
        if data:
            self._buffer = self._buffer[self._position :] + data
            self._position = 0
        return bool(data)

    def _take(self, end: int) -> bytes:
        data = self._buffer[self._position : end]
        self._position = end
        return data

    def readline(self, limit: int = _LINE_LIMIT) -> bytes:
        """The next line with its end, or its first `limit` bytes; b"" at the end of the data."""
        while True:
            stop = self._position + limit
            end = self._buffer.find(b"\n", self._position, stop)
            if end >= 0:
                return self._take(end + 1)
            if len(self._buffer) >= stop or not self._more():
                return self._take(min(stop, len(self._buffer)))

    def read(self, size: int) -> bytes:
        """Exactly `size` bytes, fewer only at the end of the data."""
        if len(self._buffer) - self._position >= size:
            return self._take(self._position + size)
        parts = [self._take(len(self._buffer))]
        missing = size - len(parts[0])
        while missing > 0 and (data := self._stream.read(min(missing, _READ_CHUNK))):
            parts.append(data)
            missing -= len(data)
        return b"".join(parts)

    def skip(self, size: int) -> int:
        """Pass over `size` bytes without holding them; how many there were."""
        skipped = 0
        while skipped < size:
            data = self.read(min(size - skipped, _READ_CHUNK))
            if not data:
                break
            skipped += len(data)
        return skipped


def _content_length(header: bytes) -> int | None:
    for line in header.split(b"\n")[1:]:
        match = _CONTENT_LENGTH.match(line)
        if match:
            return int(match.group(1))
    return None


def _read_header(reader: _Pushback, index: int) -> bytes | None:
    """The header block from its version line to its blank line; None when it is too big.
    TruncatedInputError when the data ends inside it."""
    parts, size = [], 0
    while True:
        line = reader.readline()
        if not line:
            raise TruncatedInputError(f"WARC data ends inside the headers of record {index}")
        parts.append(line)
        size += len(line)
        if line in (b"\r\n", b"\n"):
            return b"".join(parts)
        if size > MAX_HEADER_BYTES:
            return None


def _ends_cleanly(reader: _Pushback) -> tuple[bool, bytes]:
    """Whether the record's content is followed by the two blank lines that end a record and
    then the next version line (put back), or by the end of the data; also every byte read to
    tell, to be put back when it is not."""
    seen, blank = b"", 0
    while True:
        line = reader.readline()
        if line in (b"\r\n", b"\n"):  # LF-only files exist, written by hand
            seen += line
            blank += 1
            continue
        if not line or (blank >= 2 and line.startswith(_VERSION_LINE)):
            reader.unread(line)
            return True, seen
        return False, seen + line


def _skip_to_version_line(reader: _Pushback) -> bool:
    """Read on to the next line that starts with `WARC/1.` and put it back; False at the end."""
    at_line_start = True
    while line := reader.readline():
        if at_line_start and line.startswith(_VERSION_LINE):
            reader.unread(line)
            return True
        at_line_start = line.endswith(b"\n")
    return False


def warc_records(stream: BinaryIO, limit: int) -> Iterator[tuple[int, bytes] | CorruptRecord]:
    """Each record of a (decompressed) WARC stream as (1-based index, its bytes), or a
    CorruptRecord for one that could not be delimited; after it, reading goes on at the next
    version line.
    Raises TruncatedInputError when the data ends inside a record."""
    reader = _Pushback(stream)
    index = 0
    while True:
        line = reader.readline()
        while line in (b"\r\n", b"\n"):
            line = reader.readline()
        if not line:
            return
        index += 1
        if not line.startswith(_VERSION_LINE):
            yield CorruptRecord(index, "corrupt_input",
                                f"unreadable WARC record {index}: starts with {line[:40]!r}")
            if not _skip_to_version_line(reader):
                return
            continue
        reader.unread(line)
        header = _read_header(reader, index)
        length = _content_length(header) if header is not None else None
        if header is None or length is None:
            problem = "no header block end" if header is None else "no valid Content-Length header"
            yield CorruptRecord(index, "corrupt_input",
                                f"unreadable WARC record {index}: {problem}")
            if not _skip_to_version_line(reader):
                return
            continue
        if length > limit:
            if reader.skip(length) < length:
                raise TruncatedInputError(f"WARC data ends inside record {index}")
            yield CorruptRecord(index, "too_large", f"WARC record {index} content is {length} "
                                f"bytes, over max_document_bytes={limit}")
            clean, seen = _ends_cleanly(reader)
            if not clean:
                reader.unread(seen)
                if not _skip_to_version_line(reader):
                    return
            continue
        content = reader.read(length)
        clean, seen = _ends_cleanly(reader) if len(content) == length else (False, b"")
        if clean:
            yield index, header + content + _RECORD_END
            continue
        reader.unread(content + seen)
        if len(content) < length and b"\n" + _VERSION_LINE not in content:
            raise TruncatedInputError(
                f"WARC record {index} ends {length - len(content)} bytes before its length")
        yield CorruptRecord(index, "corrupt_input",
                            f"WARC record {index} does not end where its Content-Length says "
                            f"({length} bytes); reading goes on at the next record")
        if not _skip_to_version_line(reader):
            return
