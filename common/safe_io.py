"""Opening files we did not write: regular files only, read whole only under a size cap, JSON
only within a nesting depth and integer size that no honest file needs.

Everything a command reads is untrusted (inputs, tokenizers, manifests, checkpoints, metrics,
eval data). A FIFO or a device named where a file belongs would hang a run or fill its memory
(`/dev/zero`), so the type is checked before the open; a file read whole is read through a cap so
that a huge or endless file costs at most the cap; and a parse fault becomes one line naming the
file, never a traceback. Every package (`dataset_format`, `pipelines`, `train`) and `tools` use this one module.
"""

from __future__ import annotations

import json
import os
import re
import stat
from typing import Any

# JSON nested deeper than this is refused: our files nest under 10 levels, a tokenizer's under
# 20; Python's own decoder would recurse until RecursionError on a hostile 50k-deep file.
MAX_JSON_DEPTH = 64
# Integers longer than this many digits are refused: no count we store needs more than 20.
MAX_INT_DIGITS = 40

KIB = 1 << 10
MIB = 1 << 20
# A tokenizer file read whole (tokenizer.json, vocab.txt, merges.txt): the largest in common use
# are ~35 MiB (a 256k-token vocabulary with its merges); a bound, not a fit. The same bound as
# the pipeline's (dataset_format/tokenizer.py), so a tokenizer one side reads the other side reads too.
TOKENIZER_CAP = 256 * MIB


class UnsafeInputError(ValueError):
    """A file refused before or while reading it; the message is one line naming the file."""


def describe_kind(mode: int) -> str:
    """A person's word for a file type that is not a regular file."""
    for test, word in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return word
    return "not a regular file"


def require_regular_file(path: str | os.PathLike, what: str) -> os.stat_result:
    """Stat `path` (following links, so a link to /dev/zero is judged as /dev/zero) and refuse
    anything but a regular file, before any open that could block or never end."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise UnsafeInputError(f"{what} {os.fspath(path)!s}: no such file") from None
    except OSError as e:
        raise UnsafeInputError(f"{what} {os.fspath(path)!s}: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise UnsafeInputError(
            f"{what} {os.fspath(path)!s} is {describe_kind(st.st_mode)}, not a regular file"
        )
    return st


def read_bytes_capped(path: str | os.PathLike, what: str, cap: int) -> bytes:
    """The whole of a regular file of at most `cap` bytes; a larger one is refused by name.

    Reads at most cap + 1 bytes, so a file that grows while read still costs at most the cap.
    """
    st = require_regular_file(path, what)
    if st.st_size > cap:
        raise UnsafeInputError(_too_big(path, what, cap))
    try:
        with open(path, "rb") as f:
            data = f.read(cap + 1)
    except OSError as e:
        raise UnsafeInputError(f"{what} {os.fspath(path)!s}: {e.strerror or e}") from None
    if len(data) > cap:
        raise UnsafeInputError(_too_big(path, what, cap))
    return data


def read_text_capped(path: str | os.PathLike, what: str, cap: int) -> str:
    """The whole of a regular UTF-8 text file of at most `cap` bytes (`read_bytes_capped`)."""
    data = read_bytes_capped(path, what, cap)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UnsafeInputError(f"{what} {os.fspath(path)!s}: not UTF-8 (byte {e.start})") from None


def _too_big(path, what: str, cap: int) -> str:
    return f"{what} {os.fspath(path)!s} is larger than its cap of {format_bytes(cap)}"


def format_bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", MIB), ("KiB", KIB)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n} bytes"


def parse_json(text: str | bytes, what: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """`json.loads` that raises only UnsafeInputError: bad syntax, bad UTF-8, nesting deeper than
    `max_depth` and integers longer than MAX_INT_DIGITS digits each give one line naming `what`."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise UnsafeInputError(f"{what}: not UTF-8 (byte {e.start})") from None
    # Checked on the text outside strings, before parsing: one regular expression each, where a
    # parse_int hook was a Python call per integer (GPT-2's vocab.json has 50k of them).
    outside = _STRINGS.sub("", text)
    depth = _depth(outside)
    if depth > max_depth:
        raise UnsafeInputError(f"{what}: JSON nested {depth} deep (at most {max_depth} allowed)")
    long_integer = _LONG_INTEGER.search(outside)
    if long_integer:
        raise UnsafeInputError(
            f"{what}: not valid JSON (an integer of {len(long_integer.group())} digits "
            f"(at most {MAX_INT_DIGITS} allowed))"
        )
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:
        raise UnsafeInputError(f"{what}: not valid JSON ({_first_line(e)})") from None


def load_json_capped(
    path: str | os.PathLike, what: str, cap: int, max_depth: int = MAX_JSON_DEPTH
) -> Any:
    """A regular JSON file of at most `cap` bytes, parsed by `parse_json`."""
    return parse_json(read_bytes_capped(path, what, cap), f"{what} {os.fspath(path)!s}", max_depth)


def json_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in `text`, brackets inside strings not counted.

    Strings are cut out by one regular expression and only the brackets left are walked, so a
    megabyte of tokenizer JSON costs milliseconds.
    """
    return _depth(_STRINGS.sub("", text))


def _depth(outside_strings: str) -> int:
    deepest = depth = 0
    for ch in _BRACKETS.findall(outside_strings):
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


# A JSON string (escapes included), written as an unrolled loop so that it runs in linear time.
_STRINGS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKETS = re.compile(r"[\[\]{}]")
# An integer literal (not a fraction's or an exponent's digits, not a float's integer part)
# longer than MAX_INT_DIGITS digits, sign included in its length.
_LONG_INTEGER = re.compile(rf"(?<![0-9.eE+\-])-?[0-9]{{{MAX_INT_DIGITS + 1},}}(?![0-9.eE])")


def _first_line(error: BaseException) -> str:
    return str(error).splitlines()[0] if str(error) else type(error).__name__
