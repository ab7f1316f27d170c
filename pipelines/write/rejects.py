"""--keep-rejects: every reject, failure and dedup cluster member as sorted JSON lines in
OUTPUT/rejects/rejects-<file>.jsonl, so that an audit can read why each document was dropped."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator

import apache_beam as beam

from pipelines.document import ClusterMember, Failure, Reject
from pipelines.write.output import REJECTS_DIR, OutputDir, normalize_output
from pipelines.write.spill import bucket_of


def reject_record(record: Reject | Failure | ClusterMember) -> tuple[str, str]:
    """(sort key, JSON line) of a reject, a failure or a dedup cluster member, for OUTPUT/rejects/."""
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
    else:
        key = record.doc_id
        data = {
            "kind": "reject",
            "id": record.doc_id,
            "source": record.source,
            "reason": record.reason,
            "detail": record.detail,
            "text": record.text,
        }
    return key, json.dumps(data, ensure_ascii=False)


class _WriteRejectFileDoFn(beam.DoFn):
    def __init__(self, output: str):
        self.output = output

    def process(self, element: tuple[int, Iterable[tuple[str, str]]]) -> Iterator[int]:
        bucket, records = element
        lines = [line for _, line in sorted(records)]
        data = ("\n".join(lines) + "\n").encode("utf-8")
        OutputDir(self.output).child(REJECTS_DIR).write_bytes(f"rejects-{bucket:05d}.jsonl", data)
        yield len(lines)


class WriteRejects(beam.PTransform):
    """Rejects and failures -> OUTPUT/rejects/rejects-<bucket>.jsonl, sorted; -> how many."""

    def __init__(self, output: str, num_files: int):
        super().__init__()
        self.output = normalize_output(output)
        self.num_files = num_files

    def expand(self, records):
        num_files = self.num_files

        def keyed(record):
            key, line = reject_record(record)
            return bucket_of(key, num_files), (key, line)

        return (
            records
            | "Key" >> beam.Map(keyed)
            | "GroupByFile" >> beam.GroupByKey()
            | "WriteFiles" >> beam.ParDo(_WriteRejectFileDoFn(self.output))
            | "Total" >> beam.CombineGlobally(sum)
        )
