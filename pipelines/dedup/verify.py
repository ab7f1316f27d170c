"""Near duplicates, exact-Jaccard verification of the candidate pairs: each pair's larger
document sends its shingle set (packed exactly, shingles.pack_set) to the smaller one, which
keeps the pairs at or above the threshold. Shingle sets are built, from the documents again,
only for the documents in a pair: a multimap side input, the roles, says which document sends
to which.

    (candidate edge, None) once per edge (a Distinct's combine's output)
      -> Roles: each edge's sender -> its receiver; each receiver once (Distinct)
      -> PairShingles (documents, roles side input) -> GroupByKey(receiver id)
      -> Jaccard: "edges" (u, v) at or above the threshold, and each end's candidate best match
"""

from __future__ import annotations

from collections.abc import Iterable

import apache_beam as beam
from apache_beam import coders, pvalue, typehints

from pipelines.dedup import exact
from pipelines.dedup.batching import DocBatcher
from pipelines.dedup.config import DedupConfig
from pipelines.dedup.shingles import jaccard, pack_set, shingle_batch, unpack_set
from pipelines.dedup.shuffle import ANY, PAIR, TO_DISTINCT, SendingFn, ShuffleBytes, sending
from pipelines.document import Document

MATCH = typehints.Tuple[typehints.Any, typehints.Tuple[float, typehints.Any]]
RECEIVER = typehints.Tuple[typehints.Any, str]
ROLE = typehints.Union[RECEIVER, PAIR]


def edge_roles(edge):
    """A candidate edge (u, v), u < v, as side-input entries: v sends its shingle set to u."""
    u, v = edge
    yield v[1], u


RECEIVES = "receives"  # the side-input entry of a document that other documents send sets to


class RolesFn(SendingFn):
    """(distinct candidate edge (u, v), None) -> "senders": edge_roles; main: (u id, None),
    for the distinct receivers. Both are the roles side input's (stage verify_roles); a
    receiver id is counted as it was before it was paired for Distinct."""

    def __init__(self) -> None:
        super().__init__("verify_roles", ANY)

    def process(self, element):
        edge, _ = element
        for role in edge_roles(edge):
            yield pvalue.TaggedOutput("senders", self._send(role))
        yield self._send(edge[0][1]), None


class ReceiversFn(SendingFn):
    """(distinct receiver id, None) -> (id, RECEIVES), for the roles side input."""

    def __init__(self) -> None:
        super().__init__("verify_roles", ANY)

    def process(self, element):
        yield self._send((element[0], RECEIVES))


class PairShinglesFn(DocBatcher):
    """Documents -> shingle sets (packed, shingles.pack_set) of the documents in a candidate
    edge, keyed by the receiver:
    (own id, ("own", (node, set))) for a document others send to, (u id, ("in", (node, set)))
    for each smaller neighbour u it sends to. `roles` (a multimap side input) holds, per
    document in an edge, RECEIVES and/or the nodes it sends to; other documents cost one
    lookup and are not shingled. It counts the bytes it sends to Verify's GroupByKey with its
    other counts (one "counts" dict a bundle)."""

    def __init__(self, config: DedupConfig) -> None:
        super().__init__(config)
        self._bytes = ShuffleBytes("verify", coders.registry.get_coder(ANY))

    def start_bundle(self) -> None:
        super().start_bundle()
        self._bytes.start_bundle(self._counts)

    def process(self, doc: Document, roles):
        entries = list(roles[doc.id])  # at most bands x bucket cap entries
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
    roles = sending(distinct, "Verify/Roles", RolesFn(), TO_DISTINCT, counts, "senders")
    distinct_receivers = roles.sent | "Verify/DistinctReceivers" >> beam.CombinePerKey(
        lambda vs: None
    )
    receivers = sending(
        distinct_receivers, "Verify/Receivers", ReceiversFn(), RECEIVER, counts
    ).sent
    # typed as the roles were typed when a `counted` step made them, so that the side
    # input's coder is the same
    all_roles = (
        roles.senders,
        receivers,
    ) | "Verify/AllRoles" >> beam.Flatten().with_output_types(ROLE)
    shingles = docs | "Verify/PairShingles" >> beam.ParDo(
        PairShinglesFn(cfg), beam.pvalue.AsMultiMap(all_roles)
    ).with_output_types(ANY).with_outputs("counts", main="shingles")
    counts.append(shingles.counts)
    grouped = shingles.shingles | "Verify/Group" >> beam.GroupByKey()
    return sending(grouped, "Verify/Jaccard", VerifyFn(cfg.threshold), MATCH, counts, "edges")
