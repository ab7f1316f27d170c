"""Near duplicates, exact-Jaccard verification of the candidate pairs: each pair's larger
document sends its shingle set (packed exactly, shingles.pack_set) to the smaller one, which
keeps the pairs at or above the threshold. Shingle sets are built, from the documents again,
only for the documents in a pair: a side input, the roles table, says which document sends to
which.

    (candidate edge, None) once per edge (a Distinct's combine's output)
      -> Roles: each edge's sender -> its receiver, and the receiver -> RECEIVES
      -> RolesTable (a combine): document id -> its roles, each once
      -> PairShingles (documents, the table as a dict side input) -> GroupByKey(receiver id)
      -> Jaccard: "edges" (u, v) at or above the threshold, and each end's candidate best match

The table is a dict side input (read once per bundle and worker), not a multimap looked up per
document: the Python SDK's state cache weighs every multimap value it loads (objsize walks the
value's references, ~2 ms a lookup), which cost more than all of dedup's other work together
(profile in bench/results/dedup_peers.md). A worker holds the table: an id and a node or two
for each document in a candidate pair.
"""

from __future__ import annotations

from collections.abc import Iterable

import apache_beam as beam
from apache_beam import coders, pvalue, typehints

from pipelines.dedup import exact
from pipelines.dedup.batching import DocBatcher
from pipelines.dedup.config import DedupConfig
from pipelines.dedup.shingles import jaccard, pack_set, shingle_batch, unpack_set
from pipelines.dedup.shuffle import ANY, PAIR, SendingFn, ShuffleBytes, sending
from pipelines.document import Document

MATCH = typehints.Tuple[typehints.Any, typehints.Tuple[float, typehints.Any]]


def edge_roles(edge):
    """A candidate edge (u, v), u < v, as side-input entries: v sends its shingle set to u."""
    u, v = edge
    yield v[1], u


RECEIVES = "receives"  # the side-input entry of a document that other documents send sets to


class RolesFn(SendingFn):
    """(distinct candidate edge (u, v), None) -> edge_roles, and (u id, RECEIVES), to the roles
    table's combine (stage verify_roles)."""

    def __init__(self) -> None:
        super().__init__("verify_roles", PAIR)

    def process(self, element):
        edge, _ = element
        for role in edge_roles(edge):
            yield self._send(role)
        yield self._send((edge[0][1], RECEIVES))


def _role_order(entry):
    return (0, ()) if entry == RECEIVES else (1, entry)


class RolesTableFn(beam.CombineFn):
    """A document's roles, each once (a receiver of many edges is RECEIVES once), sorted."""

    def create_accumulator(self):
        return set()

    def add_input(self, accumulator, entry):
        accumulator.add(entry)
        return accumulator

    def merge_accumulators(self, accumulators):
        merged = set()
        for accumulator in accumulators:
            merged |= accumulator
        return merged

    def extract_output(self, accumulator):
        return tuple(sorted(accumulator, key=_role_order))


class PairShinglesFn(DocBatcher):
    """Documents -> shingle sets (packed, shingles.pack_set) of the documents in a candidate
    edge, keyed by the receiver:
    (own id, ("own", (node, set))) for a document others send to, (u id, ("in", (node, set)))
    for each smaller neighbour u it sends to. `roles` (the roles table, a dict side input) holds,
    per document in an edge, RECEIVES and/or the nodes it sends to; other documents cost one
    dict lookup and are not shingled. It counts the bytes it sends to Verify's GroupByKey with its
    other counts (one "counts" dict a bundle)."""

    def __init__(self, config: DedupConfig) -> None:
        super().__init__(config)
        self._bytes = ShuffleBytes("verify", coders.registry.get_coder(ANY))

    def start_bundle(self) -> None:
        super().start_bundle()
        self._bytes.start_bundle(self._counts)

    def process(self, doc: Document, roles):
        try:
            entries = roles[doc.id]  # at most bands x bucket cap entries
        except KeyError:  # in no candidate pair
            return
        if entries:
            yield from self._add(doc, entries)

    def _flush_batch(self, batch):
        cfg = self._config
        shingles = shingle_batch([d.text for d, _ in batch], kind=cfg.shingle, n=cfg.ngram)
        for i, (doc, entries) in enumerate(batch):
            self._counts.inc("dedup_pair_shingle_sets")
            node = (exact.source_rank(doc.source, cfg.source_priority), doc.id)
            value = (node, pack_set(shingles.of(i)))
            for entry in entries:
                sent = (doc.id, ("own", value)) if entry == RECEIVES else (entry[1], ("in", value))
                self._bytes.add(sent)
                yield sent


def own_shingles(values: Iterable[tuple[str, object]], doc_id: str):
    """The receiver's own (node, set) in a verify group; the senders' are streamed by the caller."""
    for tag, value in values:
        if tag == "own":
            return value
    raise AssertionError(f"document {doc_id!r} is in a candidate pair but has no shingle set")


class VerifyFn(SendingFn):
    """(u id, [("own", (u, set of u)), ("in", (v, set of v)), ...]) -> for every sender v with
    J >= threshold: "edges": (u, v), for the components; main: (u id, (J, v id)) and
    (v id, (J, u id)), each end's candidate for its best match (counted: stage best_match).
    Two passes over the group, which is never held."""

    def __init__(self, threshold: float) -> None:
        super().__init__("best_match", MATCH)
        self._threshold = threshold

    def process(self, element):
        doc_id, values = element
        u, mine = own_shingles(values, doc_id)
        mine = unpack_set(mine)
        for tag, value in values:
            if tag != "in":
                continue
            v, theirs = value
            similarity = jaccard(unpack_set(theirs), mine)
            self._counts.inc("dedup_pairs_verified")
            if similarity >= self._threshold:
                self._counts.inc("dedup_pairs_similar")
                yield pvalue.TaggedOutput("edges", (u, v))
                yield self._send((u[1], (similarity, v[1])))
                yield self._send((v[1], (similarity, u[1])))


def verified(distinct, docs, cfg: DedupConfig, counts):
    """(candidate edge, None) once per edge -> main: each end's candidate best match;
    "edges": (u, v) for the pairs at or above the threshold (VerifyFn)."""
    roles = sending(distinct, "Verify/Roles", RolesFn(), PAIR, counts).sent
    table = roles | "Verify/RolesTable" >> beam.CombinePerKey(RolesTableFn())
    shingles = docs | "Verify/PairShingles" >> beam.ParDo(
        PairShinglesFn(cfg), beam.pvalue.AsDict(table)
    ).with_output_types(ANY).with_outputs("counts", main="shingles")
    counts.append(shingles.counts)
    grouped = shingles.shingles | "Verify/Group" >> beam.GroupByKey()
    return sending(grouped, "Verify/Jaccard", VerifyFn(cfg.threshold), MATCH, counts, "edges")
