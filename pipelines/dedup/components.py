"""Connected components of the near-duplicate graph, computed in Beam: large-star / small-star.

The algorithm of Kiveris et al., "Connected Components in Map Reduce and Beyond" (SoCC 2014).
Nodes are totally ordered (see exact.Node); each round is two GroupByKeys over the edge set:

- large-star: every node u links each *larger* neighbour to m(u), the smallest of u and its
  neighbours;
- small-star: every node u links itself and each *smaller* neighbour to the smallest of them.

Neither step adds edges (each emits at most one edge per edge it reads), and the graph
contracts until every component is a star around its smallest node, in O(log^2 n) rounds.
A Beam graph is static, so there is no driver loop that looks at the data and decides to stop:
`ConnectedComponents` unrolls `max_rounds` rounds, counts the edges each round rewires
(Beam counters `dedup_cc_round<NN>_changes`: a round that changes nothing means the ones
after it are no-ops), and then checks that the result really is a set of stars. If it is not,
the check FAILS THE PIPELINE with an error that says to raise --dedup-cc-rounds, rather than
keeping a wrong answer: a component split in two would keep two copies of a duplicate.

How many rounds (`rounds_for`): every round and settle pass is a few Beam stages, and each
stage costs ~20-25 ms even when it moves nothing, so the launcher unrolls as many rounds as the
largest possible component needs, not a fixed count: a component has at most as many nodes as
there are documents, which the launcher bounds from the input's size (DedupConfig.cc_rounds).
tests/unit/.../test_dedup_components.py simulates `large_star` / `small_star` on adversarial families
(paths with sorted, reversed, random and bit-reversed labels, complete binary trees, caterpillars,
random sparse graphs; n = 2 .. 2^14): a path with sorted labels is the slowest, halving per
round, ceil(log2 n) rounds; none needs more than n.bit_length() = floor(log2 n) + 1 (a random
search found an 8-node tree that needs 4). `rounds_for(n)` gives that plus ROUNDS_MARGIN, for
graphs slower than any tried (the proven bound is O(log^2 n)). It grows without limit (1 TB
of text in documents of 50 characters: 37), but the launcher unrolls at most
FALLBACK_CC_ROUNDS, 16 (DedupConfig: the bound from bytes is loose); a bigger component fails the run loudly.

Finished components leave the loop: after each round that is a power of two (1, 2, 4, 8, ...;
`settles_after`) and is not the last, a settle pass (two GroupByKeys) finds every component
that is already a star around its smallest node, emits its members and keeps only the other
edges for the rounds after; the answer is the same (a finished star is never changed by another
round), and the edges of the usual small components do not cross all the unrolled rounds'
shuffles. After the last round there is nothing left to save, so no pass runs there.

Every step streams its group twice at most (GroupByKey values can be re-iterated), so a node
with a million neighbours (the centre of a hot bucket) costs time, not memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import apache_beam as beam

from pipelines.dedup.exact import Node
from pipelines.dedup.shuffle import ANY, PAIR, SendingFn, sending

SHUFFLE_STAGE = "components"  # dedup_shuffle_bytes_components: every GroupByKey input here

Edge = tuple[Node, Node]


class ComponentsNotConverged(RuntimeError):
    """The unrolled rounds were not enough for the graph: raise --dedup-cc-rounds."""


# Rounds beyond the slowest graph the simulation found (n.bit_length() rounds for n nodes): each
# round at least halves a path, so 2 more rounds cover a component 4x bigger than the bound.
ROUNDS_MARGIN = 2


def rounds_for(max_nodes: int) -> int:
    """Rounds that make any component of at most `max_nodes` nodes a star (module docstring)."""
    return max(max_nodes, 1).bit_length() + ROUNDS_MARGIN


def large_star(node: Node, neighbors: Iterable[Node]) -> Iterator[tuple[Edge, bool]]:
    """(edge, changed) for each larger neighbour v: the edge (v, m(u)); changed if m(u) != u."""
    smallest = min(node, min(neighbors))
    for v in neighbors:
        if v > node:
            yield (v, smallest), smallest != node


def small_star(node: Node, smaller: Iterable[Node]) -> Iterator[tuple[Edge, bool]]:
    """(edge, changed) linking u and each smaller neighbour to the smallest of them."""
    smallest = min(smaller)
    yield (node, smallest), False
    for v in smaller:
        if v != smallest:
            yield (v, smallest), True


def star_center(node: Node, neighbors: Iterable[Node], rounds: int) -> Node | None:
    """In a converged graph (disjoint stars around their smallest node): the centre a leaf
    belongs to, or None for a centre. Raises ComponentsNotConverged otherwise."""
    center = None
    has_larger = False
    for v in neighbors:
        if v < node:
            if center is not None and v != center:
                raise ComponentsNotConverged(
                    f"near-duplicate components did not converge in {rounds} rounds: document "
                    f"{node[1]!r} still links to {center[1]!r} and {v[1]!r}; rerun with "
                    f"--dedup-cc-rounds {2 * rounds}"
                )
            center = v
        elif v > node:
            has_larger = True
    if center is not None and has_larger:
        raise ComponentsNotConverged(
            f"near-duplicate components did not converge in {rounds} rounds: document "
            f"{node[1]!r} is both a centre and a leaf; rerun with --dedup-cc-rounds {2 * rounds}"
        )
    return center


def settles_after(round_index: int, max_rounds: int) -> bool:
    """Whether finished components leave the loop after this round (see settle_messages): after
    rounds 1, 2, 4, 8, ... but not the last. Most near-duplicate components are stars after a
    round or two, and the few big ones after about log2 of their size; without this every edge
    would cross all the unrolled rounds' shuffles. Each pass costs two GroupByKeys of the open
    edges, so their number grows with the log of the rounds, not with the rounds."""
    return round_index < max_rounds and round_index & (round_index - 1) == 0


LEAF, OPEN = True, False  # settle message tags: a finished leaf, or an edge that stays open


def settle_messages(node: Node, neighbors: Iterable[Node]) -> Iterator[tuple[Node, object]]:
    """A node's view of the graph -> (key, message) for the smaller end of each of its edges.

    A node with no smaller neighbour may be a finished star's centre: it tells itself (None).
    A node whose neighbours are all one smaller node c is a finished leaf if c is such a
    centre: it tells c (LEAF, node), once whatever the edge's copies. Any other node tells each
    smaller neighbour (OPEN, node), once per copy of the edge. Every edge {a, b}, a < b,
    reaches a exactly through b's message, so settle_star sees all of a centre's edges."""
    smaller, more_than_one, has_larger = None, False, False
    for v in neighbors:
        if v < node:
            if smaller is not None and v != smaller:
                more_than_one = True
            smaller = v
        elif v > node:
            has_larger = True
    if smaller is None:
        yield node, None
    elif not more_than_one and not has_larger:
        yield smaller, (LEAF, node)
    else:
        for v in neighbors:
            if v < node:
                yield v, (OPEN, node)


def settle_star(node: Node, messages: Iterable[object]) -> tuple[bool, Iterator[Node]]:
    """(finished, the larger ends of node's edges): finished when node is a centre and every
    edge comes from a finished leaf, so its component is exactly this star around it, its
    smallest node. Two passes over the group, which is never held."""
    center = any(m is None for m in messages)
    finished = center and all(m is None or m[0] is LEAF for m in messages)
    return finished, (m[1] for m in messages if m is not None)


# Each step whose output goes to a GroupByKey counts the bytes it sends there itself
# (shuffle.SendingFn, stage "components"), one transform fewer for each of the ~20 GroupByKeys
# of the unrolled rounds. Its output is typed as Beam inferred it when a `counted` step sat
# between them, so the coder (and every dedup_shuffle_bytes_components figure) is the same:
# the star steps' edges are pairs; BothWays', Tell's and the open edges' elements are Any.


class _TellFn(SendingFn):
    """(node, neighbours) -> settle_messages, for the settle pass's second GroupByKey."""

    def __init__(self) -> None:
        super().__init__(SHUFFLE_STAGE, ANY)

    def process(self, element):
        for message in settle_messages(*element):
            yield self._send(message)


class _SettleFn(SendingFn):
    """(node, messages) -> main: (leaf, centre) of a finished star; "open": the other edges,
    both ways, for the next round."""

    def __init__(self) -> None:
        super().__init__(SHUFFLE_STAGE, ANY)

    def process(self, element):
        node, messages = element
        finished, others = settle_star(node, messages)
        for other in others:
            if finished:
                yield other, node
            else:
                yield beam.pvalue.TaggedOutput("open", self._send((other, node)))
                yield beam.pvalue.TaggedOutput("open", self._send((node, other)))


class _BothWaysFn(SendingFn):
    def __init__(self) -> None:
        super().__init__(SHUFFLE_STAGE, ANY)

    def process(self, edge: Edge):
        yield self._send(edge)
        yield self._send((edge[1], edge[0]))


class _StarStepFn(SendingFn):
    """One step of a round over (node, neighbours). large-star's edges (v, m) already have the
    larger node first, the key small-star groups by; small-star's edges go out both ways, as
    the next large-star (or the final check) groups every edge under both its nodes."""

    def __init__(self, step, round_index: int, both_ways: bool) -> None:
        super().__init__(SHUFFLE_STAGE, PAIR)
        self._step = step
        self._counter = f"dedup_cc_round{round_index:02d}_changes"
        self._both_ways = both_ways

    def process(self, element):
        node, neighbors = element
        changes = 0
        for edge, changed in self._step(node, neighbors):
            changes += changed
            yield self._send(edge)
            if self._both_ways:
                yield self._send((edge[1], edge[0]))
        self._counts.inc(self._counter, changes)  # Beam metrics only, not the shuffle counts


class _StarCheckFn(beam.DoFn):
    def __init__(self, rounds: int) -> None:
        self._rounds = rounds

    def process(self, element):
        node, neighbors = element
        center = star_center(node, neighbors, self._rounds)
        if center is not None:
            yield node, center


class ConnectedComponents(beam.PTransform):
    """PCollection[(Node, Node)] undirected edges -> PCollection[(Node, Node)]: (member, the
    smallest node of its component) for every node in an edge that is not that smallest node.
    """

    def __init__(self, max_rounds: int, counts: list | None = None) -> None:
        super().__init__()
        if max_rounds < 1:
            raise ValueError(f"max_rounds must be >= 1, not {max_rounds}")
        self._max_rounds = max_rounds
        self._counts = [] if counts is None else counts

    def expand(self, edges):
        edges = sending(edges, "BothWays", _BothWaysFn(), ANY, self._counts).sent
        finished = []
        for r in range(1, self._max_rounds + 1):
            for name, step, both_ways in (
                ("LargeStar", large_star, False),
                ("SmallStar", small_star, True),
            ):
                grouped = edges | f"Round{r}/{name}/Group" >> beam.GroupByKey()
                fn = _StarStepFn(step, r, both_ways)
                edges = sending(grouped, f"Round{r}/{name}/Link", fn, PAIR, self._counts).sent
            if settles_after(r, self._max_rounds):
                grouped = edges | f"Round{r}/Settle/Group" >> beam.GroupByKey()
                tell = _TellFn()
                messages = sending(grouped, f"Round{r}/Settle/Tell", tell, ANY, self._counts).sent
                settled = (
                    messages
                    | f"Round{r}/Settle/Stars" >> beam.GroupByKey()
                    | f"Round{r}/Settle/Split"
                    >> beam.ParDo(_SettleFn()).with_outputs("open", "counts", main="finished")
                )
                self._counts.append(settled.counts)
                finished.append(settled.finished)
                edges = settled.open
        checked = (
            edges
            | "Check/Group" >> beam.GroupByKey()
            | "Check/Stars" >> beam.ParDo(_StarCheckFn(self._max_rounds))
        )
        return (*finished, checked) | "AllMembers" >> beam.Flatten()
