"""JSON lines shared by the sources that read them (jsonl, and webtext's JSONL files): each
line one JSON object, a bad line one Failure at `<file>@<byte offset>` and reading goes on."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

from pipelines.document import Failure
from pipelines.sources.input_errors import failure

# The JSON escape of a UTF-16 surrogate. json.loads joins an escaped pair into one character
# but keeps a lone one: a str that cannot be encoded as UTF-8, which fails every later stage.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")


def json_records(lines: Iterable[tuple[int, bytes | None]], location: str,
                 limit: int) -> Iterator[tuple[int, dict[str, Any]] | Failure]:
    """(byte offset, object) for each JSON-object line of (byte offset, line) pairs; a Failure
    at `<location>@<byte offset>` for each bad line. Blank lines are skipped. Raises
    InputError (e.g. truncated_input) when reading the lines fails."""
    for offset, line in lines:
        where = f"{location}@{offset}"
        if line is None:
            yield failure(where, "too_large", f"line longer than max_document_bytes={limit}")
            continue
        if not line.strip():
            continue
        try:
            record = json.loads(line.decode("utf-8", errors="replace"))
        except ValueError as error:
            yield failure(where, "bad_json", str(error))
            continue
        except RecursionError:  # arrays or objects nested deeper than the parser's stack
            yield failure(where, "bad_json", "nested too deep to parse")
            continue
        if not isinstance(record, dict):
            yield failure(where, "bad_json", f"a JSON {type(record).__name__}, not an object")
            continue
        surrogate = _SURROGATE_ESCAPE.search(line) and _lone_surrogate(record)
        if surrogate:
            yield failure(where, "bad_json",
                          f"a string holds a lone UTF-16 surrogate U+{ord(surrogate):04X}")
            continue
        yield offset, record


def _lone_surrogate(record: dict[str, Any]) -> str | None:
    """The first lone surrogate character in any key or string of `record`, or None."""
    pending: list[Any] = [record]
    while pending:  # a loop, not recursion: the record may be nested as deep as json allows
        value = pending.pop()
        if isinstance(value, dict):
            pending.extend(value)
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as error:
                return value[error.start]
    return None
