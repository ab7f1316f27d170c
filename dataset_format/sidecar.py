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
import uuid

from common.safe_io import UnsafeInputError, require_regular_file
from dataset_format.indexed import FormatError, file_sha256

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
        self._tmp = f"{path}.tmp-{uuid.uuid4().hex[:12]}"  # unique per writer, as the pair's
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
        os.replace(self._tmp, self.path)
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
        if os.path.exists(self._tmp):
            os.remove(self._tmp)


def _open(path: str):
    """The sidecar as a pyarrow ParquetFile; a file that is not one is a FormatError."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        require_regular_file(path, "metadata sidecar")
        return pq.ParquetFile(path)
    except UnsafeInputError as e:
        raise FormatError(str(e)) from None
    except (OSError, pa.ArrowException) as e:
        raise FormatError(f"{path}: not a readable Parquet sidecar: {e}") from None


def read_row(path: str, row: int) -> dict:
    """Row `row` of a sidecar as a dict (one row group is read)."""
    import pyarrow as pa

    parquet = _open(path)
    metadata = parquet.metadata
    first = 0
    for group in range(metadata.num_row_groups):
        rows = metadata.row_group(group).num_rows
        if row < first + rows:
            try:
                table = parquet.read_row_group(group, columns=list(COLUMNS))
            except (OSError, pa.ArrowException, KeyError) as e:
                raise FormatError(f"{path}: row group {group} unreadable: {e}") from None
            return table.slice(row - first, 1).to_pylist()[0]
        first += rows
    raise FormatError(f"{path}: no row {row} (it holds {first})")


def verify_sidecar(directory: str, info: SidecarInfo, documents: int, checksums: bool) -> None:
    """The sidecar is the file the manifest lists and holds one row per document of its shard."""
    path = os.path.join(directory, info.file)
    if not os.path.lexists(path):
        raise FormatError(f"{path}: metadata sidecar named in the manifest is missing")
    size = os.path.getsize(path)
    if size != info.bytes:
        raise FormatError(f"{path}: {size} bytes, manifest says {info.bytes}")
    if checksums:
        actual = file_sha256(path)
        if actual != info.sha256:
            raise FormatError(
                f"{path}: checksum mismatch: manifest says {info.sha256}, file is {actual}"
            )
    parquet = _open(path)
    if parquet.schema_arrow != _schema():
        raise FormatError(f"{path}: columns {parquet.schema_arrow.names} (or their types) are "
                          f"not the sidecar's {list(COLUMNS)}")
    rows = parquet.metadata.num_rows
    if rows != info.rows or rows != documents:
        raise FormatError(
            f"{path}: {rows} rows, but the manifest lists {info.rows} and the shard holds "
            f"{documents} documents"
        )
