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
    settle_messages,
    settle_star,
    small_star,
    star_center,
)
from tests.measure import find_root


def node(i: int) -> tuple[int, str]:
    return (i % 2, f"doc{i:05d}")


def union_find_min(edges):
    """Reference: each node of an edge -> the smallest node of its component."""
    parent = {}
    for u, v in edges:
        ru, rv = find_root(parent, u), find_root(parent, v)
        if ru != rv:
            parent[max(ru, rv)] = min(ru, rv)
    return {x: find_root(parent, x) for x in list(parent)}


def neighbours(edges) -> dict:
    """node -> the nodes its edges point to, as a GroupByKey hands them to a star step."""
    groups = collections.defaultdict(list)
    for u, v in edges:
        groups[u].append(v)
    return groups


def run_rounds(edges, max_rounds, settle_after=()):
    """The Beam graph's rounds, in memory: returns ({leaf: centre}, rounds that changed edges).
    After each round in settle_after, finished stars leave (settle)."""
    edges = [e for u, v in edges for e in ((u, v), (v, u))]
    changed_rounds = 0
    result = {}
    for r in range(1, max_rounds + 1):
        changes = 0
        stepped = []
        for u, nbrs in neighbours(edges).items():
            for e, c in large_star(u, nbrs):
                stepped.append(e)
                changes += c
        edges = []
        for u, nbrs in neighbours(stepped).items():
            for e, c in small_star(u, nbrs):
                edges += [e, (e[1], e[0])]
                changes += c
        changed_rounds += changes > 0
        if r in settle_after:
            finished, edges = settle(edges)
            result.update(finished)
        if not changes:
            break
    for u, nbrs in neighbours(edges).items():
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
    # Finished stars leaving after some rounds change nothing, whichever rounds those are.
    assert run_rounds(edges, max_rounds=30, settle_after=(1, 2, 4, 8))[0] == expected
    assert run_rounds(edges, max_rounds=30, settle_after=range(1, 31))[0] == expected


@pytest.mark.parametrize("length", [10, 1000])
def test_a_shuffled_path_converges_in_logarithmic_rounds(length):
    ids = list(range(length))
    random.Random(length).shuffle(ids)
    path = [(node(ids[i]), node(ids[i + 1])) for i in range(length - 1)]
    result, rounds = run_rounds(path, max_rounds=40)
    smallest = min(node(i) for i in ids)
    assert result == {node(i): smallest for i in ids if node(i) != smallest}
    assert rounds <= {10: 4, 1000: 10}[length]


def settle(edges):
    """One settle pass in memory over directed edges: ({leaf: centre} finished, open edges)."""
    by_node, by_key = collections.defaultdict(list), collections.defaultdict(list)
    for u, v in edges:
        by_node[u].append(v)
    for u, nbrs in by_node.items():
        for key, message in settle_messages(u, nbrs):
            by_key[key].append(message)
    finished, still_open = {}, []
    for key, messages in by_key.items():
        done, others = settle_star(key, messages)
        for other in others:
            if done:
                finished[other] = key
            else:
                still_open += [(other, key), (key, other)]
    return finished, still_open


def test_settle_finishes_whole_stars_and_keeps_every_other_edge():
    a, b, c, d, e, f, g = (node(i) for i in (0, 2, 4, 6, 8, 10, 12))
    star = [(a, b), (a, c), (a, d)]  # a star around its smallest node: finished
    chain = [(e, f), (f, g)]  # a path whose middle node links two: not a star yet
    both = [x for u, v in star + chain for x in ((u, v), (v, u))]
    finished, still_open = settle(both + both[:2])  # a duplicated edge: still one member each
    assert finished == {b: a, c: a, d: a}
    assert collections.Counter(still_open) == collections.Counter(
        x for u, v in chain for x in ((u, v), (v, u))
    )
    # A leaf whose centre has another, impure neighbour stays open with its whole component.
    graph = [x for u, v in [(a, b), (a, c), (c, d), (b, g)] for x in ((u, v), (v, u))]
    finished, still_open = settle(graph)
    assert finished == {} and collections.Counter(still_open) == collections.Counter(graph)


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
