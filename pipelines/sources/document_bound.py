"""An upper bound on the documents of a source's input files that can pass cleaning, from the
input's listing, before the graph is built: dedup sizes its unrolled connected-components rounds
to it (`DedupConfig.with_rounds_for`: a component has at most that many nodes).

`input_documents_bound`: a document passes cleaning only with at least the cleaning's
`min_chars` characters; the bound is the input's characters of text over that. (dedup's
shingles alone would allow far more: a text with a single word character still gets one
shingle, so a document needs only one byte to reach the components.) The characters of text a
file yields:

- a file of a plain-text source (its traits' `documents.plain_text`: the text is the file's own
  characters, so that every character takes at least one byte of an uncompressed file: UTF-8
  and cp1252 one or more, UTF-16 two, a JSON escape two to twelve) whose first bytes are neither
  a compressed stream nor a tar: at most CLEANED_CHARS_PER_BYTE a byte;
- any other file (compressed, an archive of compressed members, one whose head was not read):
  what the readers let a task produce, --max-expansion x its bytes but never less than
  sources/transforms.py's MIN_EXPANSION_BOUND_BYTES, summed over as many tasks as the file can be cut into;
  no bound when --max-expansion is 0;
- a remote file listed without a size (size 0): no bound.

A plain local file of a source of a document a line (DocumentBound.ONE_PER_PLAIN_LINE: JSONL)
holds at most a document a line, a much tighter bound than its bytes (five short documents: 5,
not 23), so the launcher counts the lines of such files up to COUNT_LINES_BYTES in all (a few
ms a MB); the bound is the smaller of the two for each file. A plain file of a source of a
document a file (DocumentBound.ONE_PER_PLAIN_FILE: a book) is one document (the demo's six
books: 6, where their bytes allowed 51k and unrolled the capped 16 rounds).

A source of a document a row (DocumentBound.ONE_PER_ROW: --source parquet), and python -m
pipelines.dedup: the rows in the files' Parquet footers.

The launcher reads heads and footers only in listings of at most READ_LOCAL_FILES local and
READ_REMOTE_FILES remote files (a remote read is a request); a bigger listing is bounded from
its sizes alone (Parquet: no bound), where a few rounds more than needed cost little next to the
run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from common.storage import is_remote
from pipelines.inputs import match_patterns
from pipelines.io import InputFile, open_input

# Cleaning can lengthen a text: ftfy's ligature fixes and NFC turn a character into at most three
# (U+FB03 -> "ffi"), and such a character takes at least two bytes (of UTF-16; three of UTF-8).
CLEANED_CHARS_PER_BYTE = 1.5
READ_LOCAL_FILES = 4096  # ~20 us a head
READ_REMOTE_FILES = 16
COUNT_LINES_BYTES = 256 << 20


def readable_listing(files: list[InputFile]) -> bool:
    """Whether the launcher reads these files' heads or footers (module docstring)."""
    remote = sum(is_remote(f.path) for f in files)
    return remote <= READ_REMOTE_FILES and len(files) - remote <= READ_LOCAL_FILES


def plain_text_file(path: str) -> bool:
    """True for a file whose first bytes are neither a compressed stream nor a tar (one read of
    its head). A file that cannot be read is not plain: its reader will say why."""
    from pipelines.sources.compression import SNIFF_BYTES, detect_compression
    from pipelines.sources.tar_members import is_tar

    try:
        with open_input(path) as raw:
            head = raw.read(SNIFF_BYTES)
    except Exception:  # noqa: BLE001 - any failure (a remote store's auth too): the safe bound
        return False
    return detect_compression(head) is None and not is_tar(head)


def count_lines(path: str) -> int:
    """Lines of a file: its newlines, plus one for a last line without one."""
    lines, last = 0, b"\n"
    with open_input(path) as raw:
        for chunk in iter(lambda: raw.read(1 << 20), b""):
            lines += chunk.count(b"\n")
            last = chunk[-1:]
    return lines + (last != b"\n")


def file_chars_bound(size: int, plain: bool, max_expansion: float, task_bytes: int) -> int | None:
    """Most characters of cleaned text a file of `size` bytes yields (module docstring); None
    when nothing bounds it."""
    from pipelines.sources import MIN_TASK_BYTES
    from pipelines.sources.transforms import MIN_EXPANSION_BOUND_BYTES

    if plain:
        return int(size * CLEANED_CHARS_PER_BYTE)
    if max_expansion <= 0:
        return None
    # A task is never smaller than the smaller of the source's bound and MIN_TASK_BYTES
    # (sources.task_size), plus one for the piece a range split leaves at the end.
    tasks = 1 + size // max(1, min(task_bytes, MIN_TASK_BYTES))
    return int(size * max_expansion) + MIN_EXPANSION_BOUND_BYTES * tasks


def input_documents_bound(
    files: Iterable[InputFile],
    source: str,
    source_options: Mapping[str, str],
    max_expansion: float,
    min_chars: int,
) -> int | None:
    """At most how many documents of these files pass cleaning (at least `min_chars`
    characters each), or None when a file's text has no bound."""
    from pipelines.sources import source_traits
    from pipelines.sources.traits import DocumentBound

    files = list(files)
    traits = source_traits(source)
    if traits.documents is DocumentBound.ONE_PER_ROW:
        return parquet_rows(files)
    read_heads = traits.documents.plain_text and readable_listing(files)
    task_bytes = traits.task_size.bytes(source_options)
    documents, lines_budget = 0, COUNT_LINES_BYTES
    for f in files:
        if f.size_bytes == 0 and is_remote(f.path):
            return None  # a listing that gives no size (fsspec: 0), not an empty file
        plain = read_heads and plain_text_file(f.path)
        chars = file_chars_bound(f.size_bytes, plain, max_expansion, task_bytes)
        if chars is None:
            return None
        bound = chars // max(1, min_chars)
        if plain and traits.documents is DocumentBound.ONE_PER_PLAIN_FILE:
            bound = min(bound, 1)
        lines = plain and traits.documents is DocumentBound.ONE_PER_PLAIN_LINE
        if lines and not is_remote(f.path) and f.size_bytes <= lines_budget:
            lines_budget -= f.size_bytes
            try:
                bound = min(bound, count_lines(f.path))
            except OSError:
                pass  # the bytes' bound stands; the reader reports the file
        documents += bound
    return documents


def parquet_rows(files: list[InputFile]) -> int | None:
    """The rows of these Parquet files (their footers), or None when the listing is too big to
    read (readable_listing) or a footer cannot be read (the run's reader reports that file)."""
    import pyarrow.parquet as pq

    if not readable_listing(files):
        return None
    rows = 0
    for f in files:
        try:
            with open_input(f.path) as raw:
                rows += pq.ParquetFile(raw).metadata.num_rows
        except Exception:  # noqa: BLE001 - pyarrow's, the store's: the reader reports it
            return None
    return rows


def parquet_rows_bound(patterns: str | Sequence[str]) -> int | None:
    """parquet_rows of the files the patterns match (FileNotFoundError naming a pattern that
    matches none)."""
    return parquet_rows(match_patterns(patterns))
