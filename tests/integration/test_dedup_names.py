"""The tests of tests/unit/pipelines/dedup/test_dedup_names.py that start a process or run a Beam pipeline (that file
holds the in-process ones and says what they cover)."""

from __future__ import annotations

from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from pipelines.dedup import DedupConfig, Deduplicate
from pipelines.write import reject_record
from tests.helpers.dedup_names import (
    latin1_corpus,
    read_books,
)


@pytest.fixture()
def corpus_dir(tmp_path) -> Path:
    return latin1_corpus(tmp_path / "in")


@pytest.mark.slow
def test_non_utf8_names_pass_through_dedup(corpus_dir, tmp_path):
    docs = read_books(corpus_dir)
    options = PipelineOptions(["--runner", "DirectRunner"])
    with beam.Pipeline(options=options) as p:
        result = p | beam.Create(docs) | Deduplicate(DedupConfig(), str(tmp_path))
        # The two documents hold the same text: the smaller id is kept, the other rejected.
        kept = result.main | "KeptIds" >> beam.Map(lambda d: d.id)
        assert_that(kept, equal_to(["books:caf\\xe9.txt"]), label="Kept")
        rejects = result["rejects"] | "RejectJson" >> beam.Map(
            lambda r: (r.doc_id, r.reason, reject_record(r)[1].encode("utf-8") != b"")
        )
        assert_that(
            rejects,
            equal_to([("books:pages.tar/caf\\xe9.txt", "exact_duplicate", True)]),
            label="Rejected",
        )
