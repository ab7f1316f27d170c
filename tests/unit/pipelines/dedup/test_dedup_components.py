"""Large-star / small-star connected components: the steps, their convergence, and the Beam
transform (unrolled rounds, convergence counters, loud failure when the rounds are too few)."""

from __future__ import annotations

import collections
import random

import apache_beam as beam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.dedup.components import (
    ROUNDS_MARGIN,
    ComponentsNotConverged,
    ConnectedComponents,
    large_star,
    rounds_for,
    settles_after,
    small_star,
    star_center,
)
from tests.helpers.dedup_components import neighbours, node, run_rounds, settle, union_find_min


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


def rounds_to_stars(pairs) -> int:
    """The rounds after which the pipeline's final check (star_center on every node) passes,
    for the undirected edges `pairs` of integer labels, in memory. Rounds run until one changes
    nothing; a set of stars never changes again, so the check runs backwards from there. The
    steps compare integer labels (fast); the check gets (rank, id) nodes, as in the pipeline."""
    edges = [e for a, b in pairs for e in ((a, b), (b, a))]
    after = []  # the edges after each round
    changed = True
    while changed:
        stepped, changed = [], False
        for u, nbrs in neighbours(edges).items():
            for e, c in large_star(u, nbrs):
                stepped.append(e)
                changed |= c
        edges = []
        for u, nbrs in neighbours(stepped).items():
            for e, c in small_star(u, nbrs):
                edges += (e, (e[1], e[0]))
                changed |= c
        after.append(edges)
    first = len(after)
    while first > 1 and _are_stars(after[first - 2]):
        first -= 1
    assert _are_stars(after[first - 1])
    return first


def _are_stars(edges) -> bool:
    try:
        for u, nbrs in neighbours(((0, u), (0, v)) for u, v in edges).items():
            star_center(u, nbrs, 0)
    except ComponentsNotConverged:
        return False
    return True


def adversarial_graphs(n: int, rng: random.Random):
    """(family, undirected edges over labels 0..n-1) for the families rounds_for is calibrated on."""
    bits = (n - 1).bit_length()

    def path(labels):
        return list(zip(labels, labels[1:]))

    def shuffled():
        labels = list(range(n))
        rng.shuffle(labels)
        return labels

    yield "path, sorted labels", path(list(range(n)))
    yield "path, reversed labels", path(list(range(n))[::-1])
    yield "path, random labels", path(shuffled())
    reversed_bits = (int(format(i, f"0{bits}b")[::-1], 2) if bits else 0 for i in range(1 << bits))
    yield "path, bit-reversed labels", path([x for x in reversed_bits if x < n])
    labels = shuffled()
    yield (
        "complete binary tree, random labels",
        [(labels[(i - 1) // 2], labels[i]) for i in range(1, n)],
    )
    labels, spine = shuffled(), max(1, n // 2)
    yield (
        "caterpillar",
        path(labels[:spine]) + [(labels[i % spine], labels[spine + i]) for i in range(n - spine)],
    )
    labels = shuffled()
    tree = [(labels[rng.randrange(i)], labels[i]) for i in range(1, n)]
    extra = [(rng.randrange(n), rng.randrange(n)) for _ in range(n // 2)]
    yield "random sparse graph", tree + [(a, b) for a, b in extra if a != b]


# 2 .. 2^14; the largest size is most of the test's few seconds.
CALIBRATION_SIZES = (2, 3, 5, 8, 13, 64, 100, 1000, 1 << 14)


def test_rounds_for_covers_every_adversarial_family_with_a_margin():
    rng = random.Random(21)
    for n in CALIBRATION_SIZES:
        needed = {name: rounds_to_stars(edges) for name, edges in adversarial_graphs(n, rng)}
        for name, rounds in needed.items():
            assert rounds <= n.bit_length(), (n, name, rounds)  # the calibration in the docstring
            assert rounds_for(n) >= rounds + ROUNDS_MARGIN, (n, name, rounds)
        if n & (n - 1) == 0:  # a sorted path of 2^k halves each round: k rounds, a tight bound
            assert needed["path, sorted labels"] == n.bit_length() - 1
    # The slowest graph a random search found: 8 nodes that need n.bit_length() = 4 rounds.
    tree = [(0, 7), (1, 4), (2, 6), (3, 4), (3, 6), (5, 6), (5, 7)]
    assert rounds_to_stars(tree) == 4 and rounds_for(8) >= 4 + ROUNDS_MARGIN


def test_rounds_for_is_monotone_and_grows_past_the_former_fixed_16():
    counts = [rounds_for(n) for n in range(0, 70_000)]
    assert counts == sorted(counts) and counts[0] >= 1
    assert rounds_for(23) == 7  # five short documents: the bound preprocess computes for them
    big = [rounds_for(10**k) for k in range(5, 16)]
    assert big == sorted(big)
    assert rounds_for(10**12 // 50) == 37 > 16  # 1 TB of text in documents of 50 characters


@pytest.mark.parametrize("max_rounds", [1, 2, 3, 5, 7, 16, 37])
def test_settle_passes_run_after_powers_of_two_and_never_after_the_last_round(max_rounds):
    settled = [r for r in range(1, max_rounds + 1) if settles_after(r, max_rounds)]
    assert settled == [r for r in (1, 2, 4, 8, 16, 32) if r < max_rounds]


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


def test_every_groupbykey_input_is_counted_with_its_own_coder():
    """Each step feeding a GroupByKey counts what it sends (shuffle.ShuffleBytes) with the coder
    of the PCollection it sends it in, the coder the runner writes the shuffle with: the figures
    are those a separate counting step on that PCollection would give."""
    from apache_beam import coders

    pipeline = beam.Pipeline()
    _ = pipeline | beam.Create([(node(1), node(2))]) | ConnectedComponents(5)
    checked = []

    class Visitor(beam.pipeline.PipelineVisitor):
        def visit_transform(self, applied):
            if isinstance(applied.transform, beam.GroupByKey):
                sent = applied.inputs[0]
                counting = sent.producer.transform.fn._bytes
                assert counting._coder == coders.registry.get_coder(sent.element_type)
                checked.append(applied.full_label)

    pipeline.visit(Visitor())
    assert len(checked) == 5 * 2 + 3 * 2 + 1  # rounds, settles after 1, 2 and 4, the check
