"""The tests of tests/unit/pipelines/sources/wikipedia/test_sources_wikipedia.py that start a process or run a Beam pipeline (that file
holds the in-process ones and says what they cover)."""

from __future__ import annotations

import pytest

from pipelines.document import Document
from pipelines.sources.wikipedia.wikipedia import plan, read
from tests.conftest import REPO

WIKIPEDIA = REPO.parent / "shared" / "corpora" / "wikipedia"
ENWIKI_BZ2 = WIKIPEDIA / "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"


# --- Beam counters -----------------------------------------------------------------------------


@pytest.mark.slow
def test_skips_are_counted_in_beam_metrics():
    import apache_beam as beam
    from apache_beam.metrics.metric import MetricsFilter

    pipeline = beam.Pipeline(runner="DirectRunner")
    _ = (
        pipeline
        | beam.Create(plan(str(ENWIKI_BZ2), {}))
        | beam.FlatMap(read)
        | beam.Filter(lambda item: isinstance(item, Document))
    )
    result = pipeline.run()
    result.wait_until_finish()
    counters = {
        c.key.metric.name: c.committed
        for c in result.metrics().query(MetricsFilter().with_namespace("pipelines"))["counters"]
    }
    assert counters["wikipedia_pages"] == 206
    assert counters["wikipedia_skipped_redirect"] == 99
    assert counters["wikipedia_skipped_namespace"] == 1
    assert counters["wikipedia_skipped_disambiguation"] == 8
