"""--keep-rejects: the audit files, sorted JSON lines under OUTPUT/rejects/.

- `rejects-<n>.jsonl`: every dropped document (with its URL where the source has one), every
  record that could not be read, and every removed duplicate with its cluster;
- `parts_removed-<n>.jsonl`: the parts a source cut from documents it kept (a book's title
  page and contents): no drop, so never among the rejects, with the cut text bounded to
  PARTS_REMOVED_TEXT_CHARS characters a record (`truncated` says where it was cut).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator

import apache_beam as beam

from pipelines.document import PARTS_REMOVED, ClusterMember, Failure, Reject
from pipelines.write.output import REJECTS_DIR, OutputDir, normalize_output
from pipelines.write.spill import bucket_of

REJECTS_FILE = "rejects"
PARTS_REMOVED_FILE = "parts_removed"
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


class _WriteRejectFileDoFn(beam.DoFn):
    def __init__(self, output: str):
        self.output = output

    def process(self, element: tuple[tuple[str, int], Iterable[tuple[str, str]]]) -> Iterator:
        (kind, bucket), records = element
        lines = [line for _, line in sorted(records)]
        data = ("\n".join(lines) + "\n").encode("utf-8")
        OutputDir(self.output).child(REJECTS_DIR).write_bytes(f"{kind}-{bucket:05d}.jsonl", data)
        # stats.json's rejects_written counts the records of the rejects files only
        yield len(lines) if kind == REJECTS_FILE else 0


class WriteRejects(beam.PTransform):
    """Audit records -> OUTPUT/rejects/{rejects,parts_removed}-<bucket>.jsonl, sorted; -> how
    many rejects (parts-removed records not counted: they are no drops)."""

    def __init__(self, output: str, num_files: int):
        super().__init__()
        self.output = normalize_output(output)
        self.num_files = num_files

    def expand(self, records):
        num_files = self.num_files

        def keyed(record):
            key, line = reject_record(record)
            return (audit_file(record), bucket_of(key, num_files)), (key, line)

        return (
            records
            | "Key" >> beam.Map(keyed)
            | "GroupByFile" >> beam.GroupByKey()
            | "WriteFiles" >> beam.ParDo(_WriteRejectFileDoFn(self.output))
            | "Total" >> beam.CombineGlobally(sum)
        )
