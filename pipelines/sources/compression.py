"""Decompression by magic bytes, bounded and forward-only (`open_decompressed`).

Undoes gzip, bz2, xz or zstd found by magic bytes (not by file name), concatenated streams
included, and raises `TruncatedInputError` when the compressed data stops before its end marker
(the stdlib and zstandard stream readers return short data silently), or `CorruptInputError`;
both carry the compressed offset of the fault (`InputError.input_offset`). Output is produced at
most 1 MiB per call, so a decompression bomb never lands in memory at once.
"""

from __future__ import annotations

import bz2
import dataclasses
import io
import lzma
import zlib
from typing import Any, BinaryIO

import zstandard

from pipelines.sources.input_errors import CorruptInputError, TruncatedInputError

_READ_CHUNK = 1 << 16
_MAX_OUTPUT_PER_CALL = 1 << 20
# zstd's decompressobj cannot cap its output, and one 4-byte RLE block can expand to 128 KiB, so
# feed it small pieces: 2 KiB of input yields at most ~64 MiB even for a crafted bomb.
_ZSTD_INPUT_CHUNK = 1 << 11
_STREAM_BUFFER = 1 << 20
SNIFF_BYTES = 1024  # >= one tar header block; enough to tell WARC, JSON, HTML and text apart


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


class _Codec:
    """One codec's streaming decompressor (`_decompressor`) behind the interface
    _DecompressingReader uses: eof, needs_input, unused_data, decompress."""

    _decompressor: Any

    @property
    def eof(self) -> bool:
        return self._decompressor.eof

    @property
    def unused_data(self) -> bytes:
        return self._decompressor.unused_data


class _ZlibCodec(_Codec):
    def __init__(self) -> None:
        self._decompressor = zlib.decompressobj(wbits=31)  # 31: gzip header and trailer
        self._output_was_capped = False

    @property
    def needs_input(self) -> bool:
        # a call that hit the output cap may have consumed all input yet still hold output
        # inside zlib, so only an uncapped call with no unconsumed tail needs more input
        return not self._decompressor.unconsumed_tail and not self._output_was_capped

    def decompress(self, data: bytes) -> bytes:
        pending = self._decompressor.unconsumed_tail + data
        out = self._decompressor.decompress(pending, _MAX_OUTPUT_PER_CALL)
        self._output_was_capped = len(out) == _MAX_OUTPUT_PER_CALL
        return out


class _BoundedCodec(_Codec):
    """bz2 and lzma decompressors share this interface, output capped per call."""

    def __init__(self, decompressor: bz2.BZ2Decompressor | lzma.LZMADecompressor) -> None:
        self._decompressor = decompressor

    @property
    def needs_input(self) -> bool:
        return self._decompressor.needs_input

    def decompress(self, data: bytes) -> bytes:
        return self._decompressor.decompress(data, _MAX_OUTPUT_PER_CALL)


class _ZstdCodec(_Codec):
    needs_input = True

    def __init__(self) -> None:
        self._decompressor = zstandard.ZstdDecompressor().decompressobj()

    def decompress(self, data: bytes) -> bytes:
        return self._decompressor.decompress(data)


def _new_codec(compression: str) -> _Codec:
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
