"""Per-document metadata beside each shard: `<shard>.meta.parquet`, one row a document.

Row d of a shard's sidecar describes document d of that shard: its id within its source, the
input file it was read from, its URL (web) or title (wikipedia, books), the language the clean
stage identified and that language's probability, and its token count. The rows are columnar
(Parquet) so that a question over millions of documents ("which inputs gave the longest
documents?") reads two columns, not every row. The manifest lists each sidecar with its row
count, byte size and sha256 (`SidecarInfo`); a set without sidecars (older sets, imported
Megatron data) is still whole, and training never reads them.
"""

from __future__ import annotations

import dataclasses
import os

from common.storage import remove_quietly, replace, tmp_name
from dataset_format.files import FormatError, file_sha256, require_set_file

SIDECAR_SUFFIX = ".meta.parquet"
# The columns and their Arrow types (pyarrow is imported on first use: opening a set to train
# on never reads a sidecar, and needs no Arrow).
COLUMN_TYPES = (
    ("id", "string"),
    ("input", "string"),
    ("url", "string"),
    ("title", "string"),
    ("language", "string"),
    ("language_score", "float32"),
    ("tokens", "int64"),
)
COLUMNS = tuple(name for name, _ in COLUMN_TYPES)
_COLUMN_SET = frozenset(COLUMNS)
# Rows buffered before a row group is written: the writer's memory stays flat whatever the
# shard holds, and a lookup of one document reads one group.
ROW_GROUP_ROWS = 8192


def sidecar_name(shard_name: str) -> str:
    return shard_name + SIDECAR_SUFFIX


def _schema():
    import pyarrow as pa

    return pa.schema([(name, pa.type_for_alias(kind)) for name, kind in COLUMN_TYPES])


@dataclasses.dataclass(frozen=True)
class SidecarInfo:
    """What the manifest records of one shard's sidecar (read back by manifest.py, which
    type-checks every field)."""

    file: str
    rows: int
    bytes: int
    sha256: str

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


class SidecarWriter:
    """Streams one shard's rows into `path` (under a temporary name until `finalize`)."""

    def __init__(self, path: str):
        self.path = path
        self._tmp = tmp_name(path)  # unique per writer, as the pair's
        import pyarrow.parquet as pq

        self._schema = _schema()
        self._writer = pq.ParquetWriter(self._tmp, self._schema, compression="zstd")
        self._columns: dict[str, list] = {name: [] for name in COLUMNS}
        self.rows = 0
        self._closed = False

    def add(self, row: dict) -> None:
        if row.keys() != _COLUMN_SET:  # a set made once, not two a row
            raise ValueError(f"{self.path}: a row needs the columns {COLUMNS}, got {sorted(row)}")
        for name in COLUMNS:
            self._columns[name].append(row[name])
        self.rows += 1
        if len(self._columns["id"]) >= ROW_GROUP_ROWS:
            self._flush()

    def _flush(self) -> None:
        if self._columns["id"]:
            import pyarrow as pa

            self._writer.write_table(pa.table(self._columns, schema=self._schema))
            self._columns = {name: [] for name in COLUMNS}

    def finalize(self) -> SidecarInfo:
        self._flush()
        self._writer.close()
        self._closed = True
        replace(self._tmp, self.path)
        return SidecarInfo(
            file=os.path.basename(self.path),
            rows=self.rows,
            bytes=os.path.getsize(self.path),
            sha256=file_sha256(self.path),
        )

    def discard(self) -> None:
        """Drop the unfinished file (a finished one stays: a retry rewrites it identically)."""
        if not self._closed:
            self._writer.close()
            self._closed = True
        remove_quietly(self._tmp)


# A row group is read whole. The writer's hold ROW_GROUP_ROWS rows of short strings (a few MB);
# one that would decode to more than this is no sidecar of ours (a 15 KB file can hold a title of
# hundreds of MB, zstd-compressed), and is refused before it is decoded. A bound, not a fit.
MAX_ROW_GROUP_BYTES = 64 << 20


def _open(path: str):
    """The sidecar as a pyarrow ParquetFile, its columns checked; a file that is not one (or not
    a regular file) is a FormatError."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    require_set_file(path, "metadata sidecar")
    try:
        parquet = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as e:
        raise FormatError(f"{path}: not a readable Parquet sidecar: {e}") from None
    if parquet.schema_arrow != _schema():
        raise FormatError(f"{path}: columns {parquet.schema_arrow.names} (or their types) are "
                          f"not the sidecar's {list(COLUMNS)}")
    return parquet


def _read_group(parquet, path: str, group: int, columns: list[str]):
    """Row group `group`'s `columns`, refused before decoding when its footer says it decodes
    to more than MAX_ROW_GROUP_BYTES."""
    import pyarrow as pa

    size = parquet.metadata.row_group(group).total_byte_size
    if size > MAX_ROW_GROUP_BYTES:
        raise FormatError(f"{path}: row group {group} decodes to {size:,} bytes, over the "
                          f"{MAX_ROW_GROUP_BYTES:,} a sidecar's may")
    try:
        return parquet.read_row_group(group, columns=columns)
    except (OSError, pa.ArrowException, KeyError) as e:
        raise FormatError(f"{path}: row group {group} unreadable: {e}") from None


def _check_rows(path: str, table, first: int, lengths) -> None:
    """Rows first.. of `table` against the shard's `lengths` (tokens of each document, from its
    .idx): row d must hold an id and document d's token count, so a row moved, dropped or taken
    from another shard is found."""
    ids, tokens = table.column("id").to_pylist(), table.column("tokens").to_pylist()
    expected = lengths[first : first + len(tokens)].tolist()
    for k, (doc_id, count, length) in enumerate(zip(ids, tokens, expected)):
        if not doc_id:
            raise FormatError(f"{path}: row {first + k} has no document id")
        if count != length:
            raise FormatError(
                f"{path}: row {first + k} says {count} tokens, but document {first + k} of its "
                f"shard has {length}: the rows are not the shard's documents in order"
            )


def read_row(path: str, row: int, lengths) -> dict:
    """Row `row` of the sidecar of a shard whose documents have `lengths` tokens (one row group
    is read, and its rows checked against them)."""
    parquet = _open(path)
    metadata = parquet.metadata
    if metadata.num_rows != len(lengths):
        raise FormatError(f"{path}: {metadata.num_rows} rows, but its shard holds "
                          f"{len(lengths)} documents")
    first = 0
    for group in range(metadata.num_row_groups):
        rows = metadata.row_group(group).num_rows
        if row < first + rows:
            table = _read_group(parquet, path, group, list(COLUMNS))
            _check_rows(path, table, first, lengths)
            return table.slice(row - first, 1).to_pylist()[0]
        first += rows
    raise FormatError(f"{path}: no row {row} (it holds {first})")


def verify_sidecar(directory: str, info: SidecarInfo, lengths, checksums: bool) -> None:
    """The sidecar is the file the manifest lists, of a regular file's type and size, and holds
    one row per document of its shard, in the shard's order (`_check_rows`), every row group
    within MAX_ROW_GROUP_BYTES; `lengths`: the tokens of each of the shard's documents."""
    path = os.path.join(directory, info.file)
    if not os.path.lexists(path):
        raise FormatError(f"{path}: metadata sidecar named in the manifest is missing")
    size = require_set_file(path, "metadata sidecar").st_size
    if size != info.bytes:
        raise FormatError(f"{path}: {size} bytes, manifest says {info.bytes}")
    if checksums:
        actual = file_sha256(path)
        if actual != info.sha256:
            raise FormatError(
                f"{path}: checksum mismatch: manifest says {info.sha256}, file is {actual}"
            )
    parquet = _open(path)
    rows = parquet.metadata.num_rows
    if rows != info.rows or rows != len(lengths):
        raise FormatError(
            f"{path}: {rows} rows, but the manifest lists {info.rows} and the shard holds "
            f"{len(lengths)} documents"
        )
    first = 0
    for group in range(parquet.metadata.num_row_groups):
        table = _read_group(parquet, path, group, ["id", "tokens"])
        _check_rows(path, table, first, lengths)
        first += table.num_rows


# What a tool prints of one field: a URL or a title is far shorter; a longer value is cut
# (and said to be), so a hostile sidecar cannot fill a terminal or a log.
SHOWN_FIELD_CHARS = 1000


def shown_row(row: dict, limit: int = SHOWN_FIELD_CHARS) -> tuple[dict, list[str]]:
    """`row` with each string longer than `limit` characters cut to `limit` and a note of how
    many were left out; and the names of the fields cut."""
    shown, cut = {}, []
    for key, value in row.items():
        if isinstance(value, str) and len(value) > limit:
            value = f"{value[:limit]}... ({len(value) - limit:,} more characters not shown)"
            cut.append(key)
        shown[key] = value
    return shown, cut
