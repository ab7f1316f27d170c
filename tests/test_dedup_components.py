"""Large-star / small-star connected components: the steps, their convergence, and the Beam
transform (unrolled rounds, convergence counters, loud failure when the rounds are too few)."""

from __future__ import annotations

import collections
import random

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.dedup.components import (
    ComponentsNotConverged,
    ConnectedComponents,
    large_star,
    small_star,
    star_center,
)


def node(i: int) -> tuple[int, str]:
    return (i % 2, f"doc{i:05d}")


def union_find_min(edges):
    """Reference: each node of an edge -> the smallest node of its component."""
    parent = {}

    def find(x):
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for u, v in edges:
        ru, rv = find(u), find(v)
        if ru != rv:
            parent[max(ru, rv)] = min(ru, rv)
    return {x: find(x) for x in list(parent)}


def run_rounds(edges, max_rounds):
    """The Beam graph's rounds, in memory: returns ({leaf: centre}, rounds that changed edges)."""
    edges = [e for u, v in edges for e in ((u, v), (v, u))]
    changed_rounds = 0
    for _ in range(max_rounds):
        changes = 0
        groups = collections.defaultdict(list)
        for u, v in edges:
            groups[u].append(v)
        stepped = []
        for u, nbrs in groups.items():
            for e, c in large_star(u, nbrs):
                stepped.append(e)
                changes += c
        groups = collections.defaultdict(list)
        for u, v in stepped:
            groups[u].append(v)
        edges = []
        for u, nbrs in groups.items():
            for e, c in small_star(u, nbrs):
                edges += [e, (e[1], e[0])]
                changes += c
        changed_rounds += changes > 0
        if not changes:
            break
    groups = collections.defaultdict(list)
    for u, v in edges:
        groups[u].append(v)
    result = {}
    for u, nbrs in groups.items():
        center = star_center(u, nbrs, max_rounds)
        if center is not None:
            result[u] = center
    return result, changed_rounds


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), max_size=80))
def test_rounds_find_the_union_find_components(pairs):
    edges = [(node(a), node(b)) for a, b in pairs if a != b]
    expected = {x: m for x, m in union_find_min(edges).items() if x != m}
    assert run_rounds(edges, max_rounds=30)[0] == expected


@pytest.mark.parametrize("length", [10, 1000])
def test_a_shuffled_path_converges_in_logarithmic_rounds(length):
    ids = list(range(length))
    random.Random(length).shuffle(ids)
    path = [(node(ids[i]), node(ids[i + 1])) for i in range(length - 1)]
    result, rounds = run_rounds(path, max_rounds=40)
    smallest = min(node(i) for i in ids)
    assert result == {node(i): smallest for i in ids if node(i) != smallest}
    assert rounds <= {10: 4, 1000: 10}[length]


def test_star_center_names_what_did_not_converge():
    a, b, c = (0, "a"), (0, "b"), (1, "a")
    assert star_center(c, [a], 3) == a
    assert star_center(a, [b, c], 3) is None
    with pytest.raises(ComponentsNotConverged, match="--dedup-cc-rounds 6"):
        star_center(c, [a, b], 3)
    with pytest.raises(ComponentsNotConverged, match="both a centre and a leaf"):
        star_center(b, [a, c], 3)


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
    # Every round's two GroupByKeys and the check's one move both directions of each edge.
    assert counters["dedup_shuffle_bytes_components"] > (2 * 8 + 1) * 2 * len(edges) * 10


@pytest.mark.slow
def test_beam_components_fail_loudly_when_rounds_are_too_few():
    ids = list(range(200))
    random.Random(5).shuffle(ids)
    edges = [(node(ids[i]), node(ids[i + 1])) for i in range(199)]
    pipeline, _ = _beam_components(edges, max_rounds=1)
    with pytest.raises(Exception, match="did not converge in 1 rounds"):
        pipeline.run().wait_until_finish()
