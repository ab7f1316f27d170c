"""What goes wrong reading an input: the InputError kinds, and the Failure made from one.

Errors are `InputError` subclasses whose `reason` is the key a `Failure` is counted under. A
record that cannot be read is `failure(...)` (counted and logged by the stage, and reading goes
on); a task
whose input stops being readable is `broken_off(...)`, which also says from where its input
counts as lost (stats.py bounds that share with --max-failure-rate).
"""

from __future__ import annotations

import re

from pipelines.document import Failure


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


def failure(location: str, reason: str, detail: str = "", lost_from: int | None = None,
            rows_lost: int = 0) -> Failure:
    """A Failure. It is logged where it is counted (stage.py's read stage, train_tokenizer), once:
    the first of each reason one by one, the rest in one line a doubling (reason_log.py). Its
    location and detail go through printable_name (a path may hold a non-UTF-8 byte);
    `lost_from` and `rows_lost` as Failure has them (lost_from 0: a file that could not be read
    at all is lost whole)."""
    location, detail = printable_name(location), printable_name(detail)
    return Failure(location=location, reason=reason, detail=detail, lost_from=lost_from,
                   rows_lost=rows_lost)


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
