"""The clean stage's Beam transform cleans its documents in batches: a document whose cleaning
raises is counted as clean_error and the rest of its batch is kept or dropped as when cleaned
alone (the batched functions themselves: tests/unit/pipelines/clean/test_language_batch.py)."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from pipelines.clean import CleanConfig, clean_document
from pipelines.clean.transforms import Clean
from pipelines.document import Document, Reject
from tests.helpers.language_batch import break_one, failure_docs


def test_the_clean_stage_counts_a_raising_document_and_keeps_the_others(monkeypatch):
    docs = failure_docs()
    config = CleanConfig()
    expected = [clean_document(doc, config) for doc in docs]
    victim = break_one(monkeypatch, docs)
    kept = [r.id for d, r in zip(docs, expected) if isinstance(r, Document) and d is not victim]
    rejected = [r for d, r in zip(docs, expected) if isinstance(r, Reject) and d is not victim]
    assert kept and rejected

    pipeline = beam.Pipeline(options=PipelineOptions(["--runner", "DirectRunner"]))
    out = pipeline | beam.Create(docs) | Clean(config)
    assert_that(out["documents"] | "Ids" >> beam.Map(lambda d: d.id), equal_to(kept), "kept")
    counts = (
        out["counts"]
        | beam.FlatMap(lambda c: c.items())
        | beam.CombinePerKey(sum)
        | beam.Filter(lambda kv: kv[0].startswith(("failed_", "dropped_")))
    )
    dropped: dict[str, int] = {}
    for reject in rejected:
        dropped[f"dropped_{reject.reason}"] = dropped.get(f"dropped_{reject.reason}", 0) + 1
    assert_that(counts, equal_to([("failed_clean_error", 1), *dropped.items()]), "counts")
    pipeline.run().wait_until_finish()
