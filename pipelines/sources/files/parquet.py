"""Parquet source (Hugging Face datasets, RedPajama/FineWeb-style shards): one row, one Document.

Options:
- `text_column` (default "text"): the string (or UTF-8 binary) column holding the text;
  "url" and "title" columns are read too when the file has them.
- `task_bytes` (default 64MiB): plan() cuts each file into tasks of consecutive row groups
  of about this much uncompressed data (ReadTask.start/end = the row-group range), so one big
  file is read by many workers. A file whose footer cannot be read is one task, which then
  reports Failure(reason="unreadable_file").
- `batch_rows` (default 1024): rows per Arrow batch while streaming (`iter_batches`).
- `max_document_bytes` (default 256 MiB): a longer text is Failure(reason="too_large").

Document id `parquet:<file name>:<row>`, row = 0-based row index within the file (the name is
relative to the input pattern's directory, i.e. the basename for a flat glob). A null text is
Failure(reason="missing_text"), a non-text column Failure(reason="bad_field"). Row groups are
read one at a time, so a corrupt page is one Failure(reason="corrupt_input") naming its row
group and row range, and the row groups after it are still read. Rows are counted against the
footer: the rows of a row group that its footer promised and its pages did not deliver are
`Failure.rows_lost` (on the corrupt_input Failure, or on a Failure(reason="rows_missing") when
the pages simply end early), which stats.json counts as `input_rows_lost`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.document import MIN_TOKENS_META, Document, Failure, ReadTask
from pipelines.io import open_input
from pipelines.sources.file_source import check_file_options, plan_file_tasks, task_name
from pipelines.sources.input_errors import BinaryContentError, failure, failure_from
from pipelines.sources.ranges import range_input_bytes
from pipelines.sources.reading import decode_text
from pipelines.sources.sizes import max_document_bytes
from pipelines.sources.traits import DocumentBound, InputFormat, SourceTraits

NAME = "parquet"
TEXT_COLUMN_OPTION = "text_column"
BATCH_ROWS_OPTION = "batch_rows"
# Curated records, one a row, counted in the files' footers.
TRAITS = SourceTraits(
    documents=DocumentBound.ONE_PER_ROW,
    input_format=InputFormat("Parquet", lambda head: head.startswith(b"PAR1")),
    options=(TEXT_COLUMN_OPTION, BATCH_ROWS_OPTION),
)
DEFAULT_TEXT_COLUMN = "text"
DEFAULT_BATCH_ROWS = 1024
_EXTRA_COLUMNS = ("url", "title")
# A document file's map of strings (pipelines/dedup/parquet.py), of which the token floor its
# first run kept the document with is carried (document.MIN_TOKENS_META); a dataset's own
# column of that name (a JSON string, a struct) is not read.
_META_COLUMN = "meta"


def _batch_rows(options: Mapping[str, str]) -> int:
    """The `batch_rows` option: rows per Arrow batch while streaming."""
    value = options.get(BATCH_ROWS_OPTION)
    if value is None:
        return DEFAULT_BATCH_ROWS
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"{BATCH_ROWS_OPTION} must be a whole number, got {value!r}") from None
    if number <= 0:
        raise ValueError(f"{BATCH_ROWS_OPTION} must be positive, got {value!r}")
    return number


def check_options(options: Mapping[str, str]) -> None:
    check_file_options(options, TRAITS, checks=(_batch_rows,))


def missing_column_detail(text_column: str, columns: list[str]) -> str:
    """The file has no `text_column`: its columns, and the option that names another."""
    return (
        f"no column {text_column!r}; columns are {columns}; --source-option "
        f"{TEXT_COLUMN_OPTION}=COLUMN names the text's column"
    )


def check_input(path: str, options: Mapping[str, str]) -> None:
    """ValueError, one line, when the footer of `path` shows no `text_column`: its every row
    group would fail. A file whose footer cannot be read is left to the reader."""
    text_column = options.get(TEXT_COLUMN_OPTION, DEFAULT_TEXT_COLUMN)
    try:
        with open_input(path) as raw:
            columns = pq.ParquetFile(raw).schema_arrow.names
    except (OSError, pa.ArrowException):
        return
    if text_column not in columns:
        raise ValueError(f"{path}: {missing_column_detail(text_column, columns)}")


def row_group_ranges(row_group_bytes: list[int], task_bytes: int) -> list[tuple[int, int]]:
    """Consecutive (start, end) row-group ranges of about `task_bytes` each (at least one row
    group a range), covering every row group once, in order."""
    ranges: list[tuple[int, int]] = []
    start, total = 0, 0
    for index, size in enumerate(row_group_bytes):
        total += size
        if total >= task_bytes:
            ranges.append((start, index + 1))
            start, total = index + 1, 0
    if start < len(row_group_bytes):
        ranges.append((start, len(row_group_bytes)))
    return ranges


def plan(patterns: str | Sequence[str], options: Mapping[str, str]) -> list[ReadTask]:
    check_options(options)
    task_bytes = TRAITS.task_size.bytes(options)
    tasks: list[ReadTask] = []
    for file_task in plan_file_tasks(NAME, patterns, options):
        try:
            with open_input(file_task.path) as raw:
                metadata = pq.ParquetFile(raw).metadata
        except (OSError, pa.ArrowException):
            tasks.append(file_task)  # read() reports why it cannot be read
            continue
        sizes = [metadata.row_group(i).total_byte_size for i in range(metadata.num_row_groups)]
        for start, end in row_group_ranges(sizes, task_bytes):
            tasks.append(ReadTask(source=NAME, path=file_task.path, start=start, end=end,
                                  options=file_task.options))
    return tasks


def input_bytes(task: ReadTask) -> int:
    """The stored (compressed) bytes of the task's row groups, which its start/end count; the
    whole file when the footer cannot be read (read() then reports why)."""
    try:
        with open_input(task.path) as raw:
            metadata = pq.ParquetFile(raw).metadata
    except (OSError, pa.ArrowException):
        return range_input_bytes(dataclasses.replace(task, start=0, end=-1))
    end = metadata.num_row_groups if task.end < 0 else task.end
    groups = [metadata.row_group(index) for index in range(task.start, end)]
    return sum(group.column(column).total_compressed_size
               for group in groups for column in range(group.num_columns))


def _text_of(value: object, where: str, limit: int) -> str | Failure:
    if value is None:
        return failure(where, "missing_text", "the text is null")
    if isinstance(value, bytes):
        if len(value) > limit:
            return failure(where, "too_large", f"{len(value)} bytes, limit {limit}")
        try:
            return decode_text(value).text
        except BinaryContentError as error:
            return failure_from(error, where)
    if not isinstance(value, str):
        return failure(where, "bad_field", f"the text is a {type(value).__name__}")
    if len(value) > limit // 4 and len(value.encode("utf-8")) > limit:
        return failure(where, "too_large", f"longer than {limit} bytes")
    return value


def _values(column: pa.Array) -> list:
    """The column as Python values. Parquet readers do not check that string values are UTF-8,
    so a string column holding invalid bytes gives its raw bytes instead (decoded row by row
    after): a bad value costs its own row, not the batch and every row group after it."""
    try:
        return column.to_pylist()
    except UnicodeDecodeError:
        binary = pa.large_binary() if pa.types.is_large_string(column.type) else pa.binary()
        return column.view(binary).to_pylist()


def _one_line(error: Exception) -> str:
    """An Arrow error on one line (its messages span lines)."""
    return f"{type(error).__name__}: {' '.join(str(error).split())}"


def _string_value(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value if isinstance(value, str) else ""


def _carried_meta(value: object) -> dict[str, str]:
    """What a row's `meta` map carries on to its Document: the token floor of a document
    file's first run (MIN_TOKENS_META). Any other meta column (a dataset's own, not a map of
    strings) carries nothing."""
    if not isinstance(value, list):
        return {}
    for pair in value:
        if isinstance(pair, tuple) and len(pair) == 2 and pair[0] == MIN_TOKENS_META:
            return {MIN_TOKENS_META: pair[1]} if isinstance(pair[1], str) else {}
    return {}


class _RowCount:
    """Rows of one row group delivered so far (as Documents or as Failures of their own)."""

    def __init__(self) -> None:
        self.rows = 0


def _row_group_documents(parquet_file: pq.ParquetFile, row_group: int, first_row: int,
                         columns: list[str], name: str, location: str, batch_rows: int,
                         limit: int, delivered: _RowCount) -> Iterator[Document | Failure]:
    text_column, *extras = columns
    row = first_row
    for batch in parquet_file.iter_batches(batch_size=batch_rows, row_groups=[row_group],
                                           columns=columns):
        texts = _values(batch.column(text_column))
        missing = [None] * len(texts)
        urls = _values(batch.column("url")) if "url" in extras else missing
        titles = _values(batch.column("title")) if "title" in extras else missing
        metas = batch.column(_META_COLUMN).to_pylist() if _META_COLUMN in extras else missing
        for offset, value in enumerate(texts):
            delivered.rows += 1
            text = _text_of(value, f"{location}:{row + offset}", limit)
            if isinstance(text, Failure):
                yield text
                continue
            url, title = urls[offset], titles[offset]
            yield Document(
                id=f"{NAME}:{name}:{row + offset}",
                source=NAME,
                text=text,
                url=_string_value(url),
                title=_string_value(title),
                meta=_carried_meta(metas[offset]),
            )
        row += len(texts)


def _read_row_group(parquet_file: pq.ParquetFile, row_group: int, first_row: int,
                    columns: list[str], name: str, location: str, batch_rows: int,
                    limit: int) -> Iterator[Document | Failure]:
    """One row group's records, then a Failure for the rows its footer promised and its pages
    did not deliver (Failure.rows_lost): a corrupt page, or a footer whose row count lies."""
    promised = parquet_file.metadata.row_group(row_group).num_rows
    where = f"{location}:row group {row_group} (rows {first_row}-{first_row + promised - 1})"
    delivered = _RowCount()
    try:
        yield from _row_group_documents(parquet_file, row_group, first_row, columns, name,
                                        location, batch_rows, limit, delivered)
    except (OSError, pa.ArrowException) as error:
        yield failure(where, "corrupt_input", f"{_one_line(error)}; "
                      f"{promised - delivered.rows} of {promised} rows lost",
                      rows_lost=max(promised - delivered.rows, 0))
        return
    if delivered.rows < promised:
        yield failure(where, "rows_missing", f"the footer promises {promised} rows, the pages "
                      f"hold {delivered.rows}", rows_lost=promised - delivered.rows)


def read(task: ReadTask) -> Iterator[Document | Failure]:
    name = task_name(task)
    text_column = task.options.get(TEXT_COLUMN_OPTION, DEFAULT_TEXT_COLUMN)
    batch_rows = _batch_rows(task.options)
    limit = max_document_bytes(task.options)
    try:
        with open_input(task.path) as raw:
            parquet_file = pq.ParquetFile(raw)
            metadata = parquet_file.metadata
            columns = parquet_file.schema_arrow.names
            if text_column not in columns:
                yield failure(task.path, "missing_column",
                              missing_column_detail(text_column, columns))
                return
            wanted = [text_column, *(c for c in _EXTRA_COLUMNS if c in columns and c != text_column)]
            schema = parquet_file.schema_arrow
            if _META_COLUMN in columns and pa.types.is_map(schema.field(_META_COLUMN).type):
                wanted.append(_META_COLUMN)
            end = metadata.num_row_groups if task.end < 0 else task.end
            first_row = sum(metadata.row_group(i).num_rows for i in range(task.start))
            # one row group at a time: a corrupt page costs its own row group, not the rest
            for row_group in range(task.start, end):
                yield from _read_row_group(parquet_file, row_group, first_row, wanted, name,
                                           task.path, batch_rows, limit)
                first_row += metadata.row_group(row_group).num_rows
    except (OSError, pa.ArrowException) as error:
        yield failure(task.path, "unreadable_file", _one_line(error), lost_from=0)
