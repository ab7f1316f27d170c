"""The tests of tests/unit/pipelines/dedup/test_dedup_stash.py that start a process or run a Beam pipeline (that file
holds the in-process ones and says what they cover)."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from pipelines.dedup import DedupConfig, Deduplicate
from pipelines.document import Document
from tests.shard_fixtures import book_paragraphs


def test_an_id_read_twice_keeps_one_copy_whatever_the_bundles(tmp_path):
    # The same id with two texts arrives in two bundles (two stash files of one bucket): the
    # copy kept is the one that sorts first by text, as before the text waited in files.
    paragraphs = book_paragraphs()
    first = Document("books:twice", "books", paragraphs[40])
    second = Document("books:twice", "books", paragraphs[41])
    other = Document("books:once", "books", paragraphs[42])
    kept_text = min(first.text, second.text)
    options = PipelineOptions(["--runner", "DirectRunner"])
    with beam.Pipeline(options=options) as p:
        one = p | "One" >> beam.Create([first, other])
        two = p | "Two" >> beam.Create([second])
        docs = (one, two) | beam.Flatten()
        result = docs | Deduplicate(DedupConfig(), str(tmp_path / "work"))
        kept = result.main | "Kept" >> beam.Map(lambda d: (d.id, d.text))
        assert_that(kept, equal_to([("books:twice", kept_text), (other.id, other.text)]))
        rejects = result["rejects"] | "Rejected" >> beam.Map(lambda r: (r.doc_id, r.reason))
        assert_that(rejects, equal_to([("books:twice", "duplicate_id")]), label="Rejects")
