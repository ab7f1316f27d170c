"""Documents (and dedup's audit records) as Parquet, so each stage can be rerun on its own.

Document files have the columns of `pipelines.document.Document`: id, source, text, url, title
(strings) and meta (map<string, string>). Only id and text are required when reading; a
missing source/url/title reads as "" and a missing meta as {}. Files are read one row group
at a time (memory bounded by the row group, never the file) from any filesystem
`pipelines.io` can open: local paths, gs://, s3://, fsspec URLs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines import io as pipeline_io
from pipelines.document import Document
from pipelines.inputs import match_patterns

DOCUMENT_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("source", pa.string()),
        ("text", pa.string()),
        ("url", pa.string()),
        ("title", pa.string()),
        ("meta", pa.map_(pa.string(), pa.string())),
    ]
)
REJECT_SCHEMA = pa.schema(
    [
        ("doc_id", pa.string()),
        ("source", pa.string()),
        ("reason", pa.string()),
        ("detail", pa.string()),
        ("text", pa.string()),
    ]
)
CLUSTER_SCHEMA = pa.schema(
    [
        ("kept_id", pa.string()),
        ("removed_id", pa.string()),
        ("removed_source", pa.string()),
        ("reason", pa.string()),
        ("matched_id", pa.string()),
        ("jaccard", pa.float64()),
    ]
)
_REQUIRED = ("id", "text")
_CODEC = "zstd"


def document_to_row(doc: Document) -> dict:
    return {
        "id": doc.id,
        "source": doc.source,
        "text": doc.text,
        "url": doc.url,
        "title": doc.title,
        "meta": dict(doc.meta),
    }


def read_parquet_documents(path: str, batch_rows: int = 1024) -> Iterator[Document]:
    """Every document of one Parquet file, a batch of rows at a time.

    Raises ValueError naming the file when a required column is missing or a row has no id or
    text: a half-read stage output must not pass for a smaller corpus.
    """
    with pipeline_io.open_input(path) as handle:
        parquet = pq.ParquetFile(handle)
        names = set(parquet.schema_arrow.names)
        missing = [c for c in _REQUIRED if c not in names]
        if missing:
            raise ValueError(
                f"{path}: not a document file: no column {', '.join(missing)} "
                f"(it has {', '.join(sorted(names)) or 'no columns'})"
            )
        columns = [c for c in DOCUMENT_SCHEMA.names if c in names]
        row = 0
        for batch in parquet.iter_batches(batch_size=batch_rows, columns=columns):
            for record in batch.to_pylist():
                if record["id"] is None or record["text"] is None:
                    raise ValueError(
                        f"{path}: row {row} has no {'id' if record['id'] is None else 'text'}"
                    )
                yield Document(
                    id=record["id"],
                    source=record.get("source") or "",
                    text=record["text"],
                    url=record.get("url") or "",
                    title=record.get("title") or "",
                    meta=dict(record.get("meta") or ()),
                )
                row += 1


class ReadDocuments(beam.PTransform):
    """Parquet document files the patterns match (pipelines/inputs.py: each once) ->
    PCollection[Document] (one file per task)."""

    def __init__(self, patterns: str | Sequence[str]) -> None:
        super().__init__()
        # Matched on the launcher: a typo fails before the pipeline starts.
        files = match_patterns(patterns)
        self._paths = [f.path for f in files]
        self.input_bytes = sum(f.size_bytes for f in files)  # as listed (compressed)

    def expand(self, pbegin):
        return (
            pbegin
            | "Files" >> beam.Create(self._paths)
            | "Spread" >> beam.Reshuffle()
            | "Read" >> beam.FlatMap(read_parquet_documents)
        )


class WriteParquet(beam.PTransform):
    """Records -> `PREFIX-NNNNN-of-NNNNN.parquet` files (zstd), one row per record."""

    def __init__(self, file_path_prefix: str, schema: pa.Schema, to_row=dataclasses.asdict):
        super().__init__()
        self._prefix = file_path_prefix
        self._schema = schema
        self._to_row = to_row

    def expand(self, records):
        return (
            records
            | "Rows" >> beam.Map(self._to_row)
            | "Write"
            >> beam.io.WriteToParquet(
                self._prefix, self._schema, codec=_CODEC, file_name_suffix=".parquet"
            )
        )


class WriteDocuments(WriteParquet):
    def __init__(self, file_path_prefix: str) -> None:
        super().__init__(file_path_prefix, DOCUMENT_SCHEMA, document_to_row)


class WriteRejects(WriteParquet):
    """Rejects (with their text) for --keep-rejects."""

    def __init__(self, file_path_prefix: str) -> None:
        super().__init__(file_path_prefix, REJECT_SCHEMA)


class WriteClusters(WriteParquet):
    """ClusterMember rows for --keep-rejects: group by kept_id for each cluster's members."""

    def __init__(self, file_path_prefix: str) -> None:
        super().__init__(file_path_prefix, CLUSTER_SCHEMA)
