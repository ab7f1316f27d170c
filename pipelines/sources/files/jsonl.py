"""JSON-lines source (Megatron "loose JSON"): one JSON object a line, one Document a line.

Files: `.jsonl` / `.json` (one object a line, not a JSON array), plain or compressed with
gzip, zstd, xz or bz2 (found by magic bytes, not by name). Options:

- `json_keys` (comma-separated, default `text`): the fields holding the text. Megatron's
  preprocess_data.py writes one dataset per key; here the keys' texts are joined, in the order
  given, with a blank line ("\\n\\n") into ONE document. A key missing or null in a record is
  left out; a record with none of them is Failure(reason="missing_text"), and a key that holds
  something other than a string is Failure(reason="bad_field").
- `max_document_bytes` (default 256 MiB): longer lines are Failure(reason="too_large").
- `task_bytes` (default 64MiB): an uncompressed file bigger than this is read as line-aligned
  byte ranges of about this size by several workers (sources/ranges.py); a compressed file is
  one stream, read by one task.

Document id `jsonl:<file name>@<byte offset>`, the offset of the record's line in the file's
(decompressed) data, so ids are the same however the file is split (the name is relative to
the input pattern's directory, i.e. the basename for a flat glob); `url` and `title` come from
the record's "url" and "title" fields when present. A line that is not a JSON object is
Failure(reason="bad_json", location="<file>@<byte offset>") and reading goes on; invalid UTF-8
in a line is replaced by U+FFFD before parsing. A line nested too deep for the parser, or whose
strings hold a lone UTF-16 surrogate escape ("\\ud800": valid JSON syntax, but no Unicode
text), is a bad_json failure too: each costs its own line only.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from typing import Any, BinaryIO

from pipelines.document import Document, Failure, ReadTask
from pipelines.io import open_input
from pipelines.sources.compression import open_decompressed
from pipelines.sources.file_source import FileSource, task_name
from pipelines.sources.input_errors import InputError, failure
from pipelines.sources.json_lines import json_records
from pipelines.sources.ranges import is_range, iter_range_lines, split_line_file
from pipelines.sources.sizes import max_document_bytes
from pipelines.sources.traits import DocumentBound, InputFormat, SourceTraits, leading_text

NAME = "jsonl"
JSON_KEYS_OPTION = "json_keys"
# Curated records, one a line: a plain file's text is the records' own characters.
TRAITS = SourceTraits(
    documents=DocumentBound.ONE_PER_PLAIN_LINE,
    input_format=InputFormat("JSON lines", lambda head: leading_text(head).startswith(b"{")),
    options=(JSON_KEYS_OPTION,),
)
DEFAULT_JSON_KEYS = ("text",)
# check_input looks for the first record among this many lines (bad ones are the reader's)
_FIRST_LINES = 100
KEY_SEPARATOR = "\n\n"


def json_keys(options: Mapping[str, str]) -> tuple[str, ...]:
    value = options.get(JSON_KEYS_OPTION)
    if value is None:
        return DEFAULT_JSON_KEYS
    keys = tuple(key.strip() for key in str(value).split(",") if key.strip())
    if not keys:
        raise ValueError(f"{JSON_KEYS_OPTION} names no key: {value!r}")
    return keys


def record_text(record: Mapping[str, Any], keys: tuple[str, ...]) -> str:
    """The record's text under `keys`, joined by a blank line. Raises TypeError for a
    non-string value, ValueError when none of the keys is present (messages name the keys)."""
    parts = []
    for key in keys:
        value = record.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise TypeError(f"field {key!r} holds a {type(value).__name__}, not a string")
        parts.append(value)
    if not parts:
        raise ValueError(f"no field {', '.join(repr(k) for k in keys)} in the record")
    return KEY_SEPARATOR.join(parts)


def missing_keys_hint(record: Mapping[str, Any]) -> str:
    """What to pass for a record without the text's field: the option, and the record's
    fields (the longest string first, as the likely text)."""
    fields = sorted(record, key=lambda k: -len(record[k]) if isinstance(record[k], str) else 0)
    named = ", ".join(repr(k) for k in fields[:20]) or "none"
    more = f" and {len(fields) - 20} more" if len(fields) > 20 else ""
    return (
        f"--source-option {JSON_KEYS_OPTION}=FIELD names the text's field(s); the record has "
        f"{named}{more}"
    )


def check_input(path: str, options: Mapping[str, str]) -> None:
    """ValueError, one line, when the first record of `path` has none of the `json_keys`: each
    record would fail as missing_text. A file that cannot be read here is left to the reader."""
    keys = json_keys(options)
    limit = max_document_bytes(options)
    try:
        with open_input(path) as raw:
            lines = iter_range_lines(open_decompressed(raw).stream, 0, -1, limit)
            records = itertools.islice(json_records(lines, path, limit), _FIRST_LINES)
            first = next((r for r in records if isinstance(r, tuple)), None)
    except (InputError, OSError, EOFError):
        return
    if first is not None and not any(first[1].get(key) is not None for key in keys):
        raise ValueError(
            f"{path}: the first record has no field {', '.join(map(repr, keys))}; "
            f"{missing_keys_hint(first[1])}"
        )


def _string_field(record: Mapping[str, Any], key: str) -> str:
    value = record.get(key)
    return value if isinstance(value, str) else ""


def _read_file(raw: BinaryIO, task: ReadTask) -> Iterator[Document | Failure]:
    name = task_name(task)
    keys = json_keys(task.options)
    limit = max_document_bytes(task.options)
    if is_range(task):
        lines = iter_range_lines(raw, task.start, task.end, limit)
    else:
        opened = open_decompressed(raw)
        if opened.head.lstrip().startswith(b"["):
            yield failure(task.path, "json_array", "a JSON array, not JSON lines (one object a line)")
            return
        lines = iter_range_lines(opened.stream, 0, -1, limit)
    for item in json_records(lines, task.path, limit):
        if isinstance(item, Failure):
            yield item
            continue
        offset, record = item
        try:
            text = record_text(record, keys)
        except TypeError as error:
            yield failure(f"{task.path}@{offset}", "bad_field", str(error))
            continue
        except ValueError as error:
            yield failure(f"{task.path}@{offset}", "missing_text",
                          f"{error} (--source-option {JSON_KEYS_OPTION}= names the text's field)")
            continue
        yield Document(
            id=f"{NAME}:{name}@{offset}",
            source=NAME,
            text=text,
            url=_string_field(record, "url"),
            title=_string_field(record, "title"),
        )


_FILES = FileSource(NAME, TRAITS, _read_file, checks=(json_keys,))
check_options, plan, read = _FILES.check_options, _FILES.plan, _FILES.read
split = split_line_file
