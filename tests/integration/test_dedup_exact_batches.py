"""A corpus without duplicates takes none of dedup's pair, verify or components work (the exact
step's batched shuffle and the rest: tests/unit/pipelines/dedup/test_dedup_exact_batches.py)."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from pipelines.dedup import DedupConfig, Deduplicate
from pipelines.document import Document
from tests.helpers.dedup_corpus import paragraphs_of_book


def test_distinct_documents_take_no_pair_verify_or_components_work(tmp_path):
    paragraphs = [p for p in paragraphs_of_book("2701-0.txt") if len(p) > 300][:300]
    docs = [Document(f"books:{i:04d}", "books", p) for i, p in enumerate(paragraphs)]
    pipeline = beam.Pipeline(options=PipelineOptions(["--runner", "DirectRunner"]))
    result = pipeline | beam.Create(docs) | Deduplicate(DedupConfig(), str(tmp_path))
    assert_that(result.main | beam.Map(lambda d: d.id), equal_to([d.id for d in docs]))
    run = pipeline.run()
    run.wait_until_finish()
    counters = {
        c.key.metric.name: c.committed for c in run.metrics().query()["counters"] if c.committed
    }
    assert counters["dedup_docs_in"] == len(docs) == counters["dedup_kept"]
    for work in (
        "dedup_candidate_edges",
        "dedup_pair_shingle_sets",
        "dedup_pairs_verified",
        "dedup_exact_removed",
        "dedup_near_dup_removed",
    ):
        assert work not in counters
    assert not [name for name in counters if name.startswith("dedup_cc_round")]
