"""The tests of tests/unit/pipelines/dedup/test_dedup_components.py that start a process or run a Beam pipeline (that file
holds the in-process ones and says what they cover)."""

from __future__ import annotations

import collections
import random

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from pipelines.dedup.components import (
    ConnectedComponents,
)
from tests.helpers.dedup_components import node, run_rounds, union_find_min


def _beam_components(edges, max_rounds):
    options = PipelineOptions(["--runner", "DirectRunner"])
    pipeline = beam.Pipeline(options=options)
    result = pipeline | beam.Create(edges) | ConnectedComponents(max_rounds)
    return pipeline, result


@pytest.mark.slow
def test_beam_components_and_their_round_counters():
    # Two components: a shuffled path of 40 documents, and a hot-bucket star of 30.
    ids = list(range(40))
    random.Random(3).shuffle(ids)
    edges = [(node(ids[i]), node(ids[i + 1])) for i in range(39)]
    edges += [(node(100), node(100 + k)) for k in range(1, 31)]
    expected = {x: m for x, m in union_find_min(edges).items() if x != m}
    pipeline, result = _beam_components(edges, max_rounds=8)
    assert_that(result, equal_to(list(expected.items())))
    run = pipeline.run()
    run.wait_until_finish()
    counters = collections.Counter()  # summed over the steps that report each name
    for c in run.metrics().query(MetricsFilter().with_namespace("pipelines"))["counters"]:
        counters[c.key.metric.name] += c.committed
    changing = sorted(n for n, value in counters.items() if value and n.startswith("dedup_cc_"))
    # Rounds are numbered from 1; once a round changes nothing the rest are no-ops.
    needed = len(changing)
    assert changing == [f"dedup_cc_round{r:02d}_changes" for r in range(1, needed + 1)]
    assert needed == run_rounds(edges, 8)[1] <= 6
    # The star is finished after round 1 and leaves; the path crosses every round (three
    # elements an edge: both ways to large-star, once to small-star) and the check.
    path_bytes = counters["dedup_shuffle_bytes_components"]
    assert 8 * 3 * 39 * 10 < path_bytes < 8 * 3 * len(edges) * 10 * 5


@pytest.mark.slow
def test_beam_components_fail_loudly_when_rounds_are_too_few():
    ids = list(range(200))
    random.Random(5).shuffle(ids)
    edges = [(node(ids[i]), node(ids[i + 1])) for i in range(199)]
    pipeline, _ = _beam_components(edges, max_rounds=1)
    with pytest.raises(Exception, match="did not converge in 1 rounds"):
        pipeline.run().wait_until_finish()
