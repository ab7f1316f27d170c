"""--keep-rejects: the audit files, sorted JSON lines under OUTPUT/rejects/.

- `rejects-<n>.jsonl`: every dropped document (with its URL where the source has one), every
  record that could not be read, and every removed duplicate with its cluster;
- `parts_removed-<n>.jsonl`: the parts a source cut from documents it kept (a book's title
  page and contents): no drop, so never among the rejects, with the cut text bounded to
  PARTS_REMOVED_TEXT_CHARS characters a record (`truncated` says where it was cut).

Each bundle appends its records' lines to files of its own in the run's work area; a
GroupByKey hands each audit file the names of its bundles' files, and one worker sorts their
lines by key and copies them in, holding only the keys.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from typing import BinaryIO

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows

from pipelines.document import PARTS_REMOVED, ClusterMember, Failure, Reject
from pipelines.output import (
    REJECTS_DIR,
    WORK_DIR,
    BundleFiles,
    OutputDir,
    normalize_output,
)
from pipelines.write.spill import bucket_of

REJECTS_FILE = "rejects"
PARTS_REMOVED_FILE = "parts_removed"
# The bundles' files of audit lines, in the run's work area until the run ends.
REJECTS_WORK_DIR = "rejects"
_LINES_SUFFIX = ".lines"
# A book's front matter runs to a few thousand characters; the audit shows what was cut, not
# whole chapters a faulty rule might take.
PARTS_REMOVED_TEXT_CHARS = 2000


def audit_file(record: Reject | Failure | ClusterMember) -> str:
    """Which audit file a record belongs in (its name without the number)."""
    if isinstance(record, Reject) and record.reason == PARTS_REMOVED:
        return PARTS_REMOVED_FILE
    return REJECTS_FILE


def reject_record(record: Reject | Failure | ClusterMember) -> tuple[str, str]:
    """(sort key, JSON line) of an audit record, for OUTPUT/rejects/."""
    if isinstance(record, ClusterMember):
        key = f"{record.removed_id}#cluster"
        data = {"kind": "cluster", **dataclasses.asdict(record)}
    elif isinstance(record, Failure):
        key = record.location
        data = {
            "kind": "failure",
            "location": record.location,
            "reason": record.reason,
            "detail": record.detail,
        }
    elif record.reason == PARTS_REMOVED:
        key = record.doc_id
        text = record.text[:PARTS_REMOVED_TEXT_CHARS]
        data = {
            "kind": PARTS_REMOVED,
            "id": record.doc_id,
            "source": record.source,
            "parts": record.detail,
            "text": text,
            "truncated": len(text) < len(record.text),
        }
    else:
        key = record.doc_id
        data = {
            "kind": "reject",
            "id": record.doc_id,
            "source": record.source,
            "reason": record.reason,
            "detail": record.detail,
            "url": record.url,
            "text": record.text,
        }
    return key, json.dumps(data, ensure_ascii=False)


class _LinesWriter:
    """One bundle's lines of one audit file, each after its sort key (BundleFiles' writer)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._file = open(path, "wb")

    def add(self, key: str, line: str) -> None:
        # ASCII JSON holds no tab: the first one ends the key
        self._file.write(json.dumps(key).encode("ascii") + b"\t" + line.encode("utf-8") + b"\n")

    def close(self) -> None:
        self._file.close()

    def discard(self) -> None:
        self._file.close()
        if os.path.exists(self.path):
            os.remove(self.path)


def _lines_name(target: tuple[str, int], attempt: str) -> str:
    kind, bucket = target
    return f"{kind}-{bucket:05d}-{attempt}{_LINES_SUFFIX}"


class _SpillRejectsDoFn(beam.DoFn):
    """Audit records -> their lines appended to one file per bundle and audit file
    ((kind, bucket)) under OUTPUT/_work/rejects/; ((kind, bucket), file name) for each when the
    bundle commits (BundleFiles, as spill files are written). The lines wait in files, not in a
    shuffle: the local runner holds a GroupByKey's input in the launcher, so the dropped
    documents' text (16 MB at 1 GB of web text) grew it with the input. The launcher removes
    the work area when the run ends."""

    def __init__(self, output: str, num_files: int):
        self.output = output
        self.num_files = num_files

    def setup(self) -> None:
        folder = OutputDir(self.output).child(WORK_DIR).child(REJECTS_WORK_DIR)
        folder.makedirs()
        self._files = BundleFiles(folder, "rejects-", _lines_name, _LinesWriter)

    def start_bundle(self) -> None:
        self._files.start()

    def process(self, record: Reject | Failure | ClusterMember) -> None:
        key, line = reject_record(record)
        self._files.writer((audit_file(record), bucket_of(key, self.num_files))).add(key, line)

    def finish_bundle(self) -> Iterator:
        for target, name in self._files.commit():
            yield GlobalWindows.windowed_value((target, name))

    def teardown(self) -> None:
        if hasattr(self, "_files"):
            self._files.discard()


Line = tuple[str, int, int, int]  # sort key, file number, offset, length (its newline included)


def _lines(number: int, f: BinaryIO) -> Iterator[Line]:
    offset = 0
    for raw in f:  # a binary file splits at b"\n" only, which JSON escapes inside strings
        tab = raw.index(b"\t")
        yield json.loads(raw[:tab]), number, offset + tab + 1, len(raw) - tab - 1
        offset += len(raw)


def _line_order(files: Sequence[BinaryIO]) -> list[Line]:
    """Every line of the bundle files, in key order; lines of equal keys (a record read twice)
    in the order of their text, so the file is the same whatever the bundles were. Only the
    keys and where the lines are stay in memory."""
    order = sorted((line for n, f in enumerate(files) for line in _lines(n, f)), key=lambda t: t[0])
    i = 0
    while i < len(order):
        k = i + 1
        while k < len(order) and order[k][0] == order[i][0]:
            k += 1
        if k - i > 1:
            order[i:k] = sorted(order[i:k], key=lambda t: _read(files, t))
        i = k
    return order


def _read(files: Sequence[BinaryIO], line: Line) -> bytes:
    _, number, offset, length = line
    data = os.pread(files[number].fileno(), length, offset)
    if len(data) != length:
        raise RuntimeError(f"{files[number].name}: cut short while it was read")
    return data


class _WriteRejectFileDoFn(beam.DoFn):
    """((kind, bucket), bundle file names) -> OUTPUT/rejects/<kind>-<bucket>.jsonl, its lines
    sorted by key and copied from the bundle files a line at a time; -> how many records."""

    def __init__(self, output: str):
        self.output = output

    def setup(self) -> None:
        self._out = OutputDir(self.output)
        self._work = self._out.child(WORK_DIR).child(REJECTS_WORK_DIR)

    def process(self, element: tuple[tuple[str, int], Iterable[str]]) -> Iterator:
        (kind, bucket), names = element
        with (
            tempfile.TemporaryDirectory(prefix="rejects-") as local,
            contextlib.ExitStack() as files,
        ):
            opened = []
            for name in sorted(names):
                path = self._work.path(name)
                if not self._work.is_local:
                    path = os.path.join(local, name)
                    self._work.get_file(name, path)
                opened.append(files.enter_context(open(path, "rb")))
            order = _line_order(opened)

            def write(out: BinaryIO) -> None:
                for line in order:
                    out.write(_read(opened, line))

            self._out.child(REJECTS_DIR).write_with(f"{kind}-{bucket:05d}.jsonl", write)
        # stats.json's rejects_written counts the records of the rejects files only
        yield len(order) if kind == REJECTS_FILE else 0


class WriteRejects(beam.PTransform):
    """Audit records -> OUTPUT/rejects/{rejects,parts_removed}-<bucket>.jsonl, sorted; -> how
    many rejects (parts-removed records not counted: they are no drops). What crosses the
    shuffle is the names of per-bundle files, not the records."""

    def __init__(self, output: str, num_files: int):
        super().__init__()
        self.output = normalize_output(output)
        self.num_files = num_files

    def expand(self, records):
        return (
            records
            | "Spill" >> beam.ParDo(_SpillRejectsDoFn(self.output, self.num_files))
            | "GroupByFile" >> beam.GroupByKey()
            | "WriteFiles" >> beam.ParDo(_WriteRejectFileDoFn(self.output))
            | "Total" >> beam.CombineGlobally(sum)
        )
