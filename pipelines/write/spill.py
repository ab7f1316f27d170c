"""Step 1 of writing a shard set: each tokenized document to its bucket's spill file.

Fused with tokenizing, so token arrays never cross a shuffle: every bundle appends its
documents to one spill file per bucket (`bucket_of`) under `OUTPUT/_work/spill/` and emits only
`(bucket, spill name)` when it commits. A retried or abandoned bundle leaves files nobody refers
to, deleted when the set is finished.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import tempfile
from collections.abc import Iterator

import apache_beam as beam
import numpy as np
from apache_beam.transforms.window import GlobalWindows

from pipelines.document import PROVENANCE_FIELDS, TokenizedDocument, bucket_of
from pipelines.output import SPILL_DIR, WORK_DIR, BundleFiles, OutputDir

# Default bucket count: one bucket per this many input bytes (compressed, as listed), at least 1.
# It fixes how many workers write shards in parallel; it never depends on bundles.
BYTES_PER_BUCKET = 256 << 20
MAX_DEFAULT_BUCKETS = 512


def default_num_buckets(input_bytes: int) -> int:
    return max(1, min(MAX_DEFAULT_BUCKETS, -(-input_bytes // BYTES_PER_BUCKET)))


# One spill file per bundle and bucket, one object on a remote store, written straight under its
# final name: the name is unique to the bundle attempt and is handed on only once the file is
# complete, so nothing ever reads a half-written one (no temporary name, no rename, which on GCS
# is a copy and a delete). Layout: the token ids, then int32 sequence lengths, then int32
# sequence counts per document, then a JSON line per document ([id, text bytes, its provenance
# for the metadata sidecar...]), then a JSON footer (dtype, counts, provenance field names),
# then its length (u64) and the magic.
SPILL_MAGIC = b"SPILL002"
SPILL_SUFFIX = ".spill"
_FOOTER_TAIL = struct.Struct("<Q8s")
_INT32 = np.dtype("<i4")
_COUNT = struct.Struct("<i")


class SpillWriter:
    """Streams one bundle's documents of one bucket to a local spill file, holding nothing per
    document: a local runner's bundle is a worker's share of a whole stage (half the input on
    two workers), so the ids, lengths and provenance it kept for the footer grew with the input
    (~0.6 KB a document: 31 MB for a bundle of 54k documents). The tables and the metadata
    lines wait in unnamed temporary files beside the spill (gone with the process if it
    dies), appended to it when it closes."""

    def __init__(self, path: str, dtype: str):
        self.path = path
        self.dtype = np.dtype(dtype)
        self._high = np.iinfo(self.dtype).max
        self._file = open(path, "wb")
        folder = os.path.dirname(os.path.abspath(path))
        self._lengths = tempfile.TemporaryFile(dir=folder)  # int32 a sequence
        self._counts = tempfile.TemporaryFile(dir=folder)  # int32 a document
        self._rows = tempfile.TemporaryFile(dir=folder)  # a JSON line a document
        self.documents = self.sequences = self.tokens = 0

    def add(self, doc: TokenizedDocument) -> None:
        lengths = []
        for sequence in doc.sequences:
            ids = np.asarray(sequence)
            if ids.size and (int(ids.min()) < 0 or int(ids.max()) > self._high):
                raise ValueError(f"{doc.id}: token ids do not fit {self.dtype}")
            self._file.write(ids.astype(self.dtype, copy=False).tobytes())
            lengths.append(len(ids))
        self._lengths.write(np.asarray(lengths, _INT32).tobytes())
        self._counts.write(_COUNT.pack(len(lengths)))
        # ASCII JSON: a lone surrogate in an id is escaped, and no line holds a raw newline
        row = [doc.id, int(doc.text_bytes), *doc.provenance.values()]
        self._rows.write(json.dumps(row).encode("ascii") + b"\n")
        self.documents += 1
        self.sequences += len(lengths)
        self.tokens += sum(lengths)

    def close(self) -> None:
        footer = json.dumps(
            {
                "dtype": str(self.dtype),
                "tokens": self.tokens,
                "sequences": self.sequences,
                "documents": self.documents,
                "provenance_fields": PROVENANCE_FIELDS,
            }
        ).encode("utf-8")
        for side in (self._lengths, self._counts, self._rows):
            side.seek(0)
            shutil.copyfileobj(side, self._file, 1 << 20)
            side.close()
        self._file.write(footer)
        self._file.write(_FOOTER_TAIL.pack(len(footer), SPILL_MAGIC))
        self._file.close()

    def discard(self) -> None:
        for handle in (self._file, self._lengths, self._counts, self._rows):
            handle.close()
        if os.path.exists(self.path):
            os.remove(self.path)


class SpillFile:
    """A spill file read back: documents by index, in the order written. A document's tokens
    are read when asked for (one pread each), not memory-mapped: a bucket's merge reads its
    documents in id order, all over its spills, and a mapping's fault-around (64 KB a fault)
    made every page of the bucket resident in each merging worker (~115 MB per 256 MB of
    input; unmapping every 2,048 documents still left ~80 MB)."""

    def __init__(self, path: str):
        self._file = open(path, "rb")
        try:
            self._read_layout(path)
        except BaseException:
            self._file.close()
            raise

    def _read_layout(self, path: str) -> None:
        f = self._file
        size = os.fstat(f.fileno()).st_size
        if size < _FOOTER_TAIL.size:
            raise RuntimeError(f"{path}: not a spill file (too short)")
        f.seek(size - _FOOTER_TAIL.size)
        footer_bytes, magic = _FOOTER_TAIL.unpack(f.read(_FOOTER_TAIL.size))
        if magic != SPILL_MAGIC or footer_bytes > size - _FOOTER_TAIL.size:
            raise RuntimeError(f"{path}: not a spill file (bad footer)")
        f.seek(size - _FOOTER_TAIL.size - footer_bytes)
        footer = json.loads(f.read(footer_bytes))
        self._dtype = np.dtype(footer["dtype"])
        tokens, sequences, documents = footer["tokens"], footer["sequences"], footer["documents"]
        end = tokens * self._dtype.itemsize
        tables_end = end + 4 * (sequences + documents)
        rows_end = size - _FOOTER_TAIL.size - footer_bytes
        if tables_end > rows_end:
            raise RuntimeError(f"{path}: {size} bytes, too few for what its footer describes")
        f.seek(end)
        tables = np.frombuffer(f.read(tables_end - end), _INT32)
        lines = f.read(rows_end - tables_end).splitlines()
        if len(lines) != documents:
            raise RuntimeError(f"{path}: {len(lines)} metadata rows for {documents} documents")
        rows = json.loads(b"[" + b",".join(lines) + b"]")  # one parse, not one a document
        self.ids: list[str] = [row[0] for row in rows]
        self.text_bytes: list[int] = [row[1] for row in rows]
        self._provenance_fields: list[str] = footer["provenance_fields"]
        self._provenance: list[list] = [row[2:] for row in rows]
        lengths, counts = tables[:sequences], tables[sequences:]
        self._sequence_offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
        self._document_index = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
        if self._sequence_offsets[-1] != tokens or self._document_index[-1] != sequences:
            raise RuntimeError(f"{path}: its lengths do not add up to its token count")

    def close(self) -> None:
        self._file.close()

    @property
    def num_documents(self) -> int:
        return len(self.ids)

    def document_lengths(self) -> np.ndarray:
        return np.diff(self._sequence_offsets[self._document_index])

    def provenance(self, i: int) -> dict:
        """Document i's Provenance fields by name (its metadata-sidecar row, less id and
        tokens)."""
        return dict(zip(self._provenance_fields, self._provenance[i]))

    def document_sequences(self, i: int) -> list[np.ndarray]:
        first, last = int(self._document_index[i]), int(self._document_index[i + 1])
        bounds = self._sequence_offsets[first : last + 1]  # this document's sequences only
        start, count = int(bounds[0]), int(bounds[-1] - bounds[0])
        size = self._dtype.itemsize
        data = os.pread(self._file.fileno(), count * size, start * size)
        if len(data) != count * size:
            raise RuntimeError(f"{self._file.name}: cut short while it was read")
        tokens = np.frombuffer(data, self._dtype)
        bounds = (bounds - start).tolist()
        return [tokens[bounds[j] : bounds[j + 1]] for j in range(last - first)]


def spill_name(bucket: int, attempt: str) -> str:
    return f"b{bucket:05d}-{attempt}{SPILL_SUFFIX}"


class SpillDoFn(beam.DoFn):
    """Appends each bundle's documents to one spill file per bucket; emits (bucket, spill name)."""

    def __init__(self, output: str, num_buckets: int, dtype: str):
        self.output = output
        self.num_buckets = num_buckets
        self.dtype = dtype

    def setup(self) -> None:
        spill_dir = OutputDir(self.output).child(WORK_DIR).child(SPILL_DIR)
        self.files = BundleFiles(
            spill_dir, "spill-", spill_name, lambda path: SpillWriter(path, self.dtype)
        )

    def start_bundle(self) -> None:
        self.files.start()

    def process(self, doc: TokenizedDocument) -> None:
        self.files.writer(bucket_of(doc.id, self.num_buckets)).add(doc)

    def finish_bundle(self) -> Iterator:
        for bucket, name in self.files.commit():
            yield GlobalWindows.windowed_value((bucket, name))

    def teardown(self) -> None:
        if hasattr(self, "files"):
            self.files.discard()
