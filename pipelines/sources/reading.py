"""Reading one document's bytes safely: forward only, so it works on a Beam or fsspec stream as
well as on a local file, and never more than one document in memory.

- `read_bounded` / `iter_lines`: a document or a line with a size cap, so a decompression bomb
  or a runaway line becomes `Failure(reason="too_large")`;
- `decode_text`: bytes to str (UTF-8, UTF-16 with a BOM, else a documented UTF-8-with-replacement
  or cp1252 fallback; binary data raises `BinaryContentError`), and `to_lf`.
"""

from __future__ import annotations

import codecs
import dataclasses
from collections.abc import Iterator
from typing import BinaryIO

from pipelines.sources.input_errors import BinaryContentError, TooLargeError
from pipelines.sources.sizes import MAX_DOCUMENT_BYTES_OPTION

_STREAM_BUFFER = 1 << 20



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
