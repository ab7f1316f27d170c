"""Near duplicates, exact-Jaccard verification of the candidate pairs: each pair's larger
document sends its shingle set (packed exactly, shingles.pack_set) to the smaller one, which
keeps the pairs at or above the threshold. Shingle sets are built, from the stashed text
(stash.py), only for the documents in a pair: each bucket's roles say which document sends to
which.

    (candidate edge, None) once per edge (a Distinct's combine's output)
      -> Roles: (bucket of the sender, its receiver) and (bucket of the receiver, RECEIVES)
      -> GroupByKey(bucket), with the bucket's stash file names
      -> PairShingles: the bucket's files read back, shingle sets of the documents with roles
      -> GroupByKey(receiver id)
      -> Jaccard: "edges" (u, v) at or above the threshold, and each end's candidate best match

A bucket's group holds the roles of its documents in candidate pairs (an id and a node or two
each), never the text, and the worker that reads the bucket holds them as a dict while it
streams the files. No side input: a dict side input is read whole by every worker, and the
Python SDK weighs every multimap value it loads (objsize, ~2 ms a lookup; bench/results/
dedup_peers.md).
"""

from __future__ import annotations

from collections.abc import Iterable

import apache_beam as beam
from apache_beam import coders, pvalue, typehints

from pipelines.dedup import exact
from pipelines.dedup.batching import DocBatcher
from pipelines.dedup.config import DedupConfig
from pipelines.dedup.shingles import jaccard, pack_set, shingle_batch, unpack_set
from pipelines.dedup.shuffle import ANY, SendingFn, ShuffleBytes, sending
from pipelines.dedup.stash import StashDir
from pipelines.document import Document, bucket_of

MATCH = typehints.Tuple[typehints.Any, typehints.Tuple[float, typehints.Any]]


def edge_roles(edge):
    """A candidate edge (u, v), u < v: v sends its shingle set to u, and u receives."""
    u, v = edge
    yield v[1], u
    yield u[1], RECEIVES


RECEIVES = "receives"  # the role of a document that other documents send sets to


class RolesFn(SendingFn):
    """(distinct candidate edge (u, v), None) -> (bucket of the document, ("role", (its id,
    edge_roles entry))) for each end, to verification's GroupByKey (stage verify_roles)."""

    def __init__(self, num_buckets: int) -> None:
        # typed Any like the stash names it is grouped with, so both go with one coder
        super().__init__("verify_roles", ANY)
        self._num_buckets = num_buckets

    def process(self, element):
        edge, _ = element
        for doc_id, entry in edge_roles(edge):
            yield self._send((bucket_of(doc_id, self._num_buckets), ("role", (doc_id, entry))))


def _role_order(entry):
    return (0, ()) if entry == RECEIVES else (1, entry)


def bucket_roles(values) -> tuple[dict[str, tuple], list[str]]:
    """A verification group's values -> (document id -> its roles, each once (a receiver of
    many edges is RECEIVES once), sorted; the bucket's stash file names, sorted)."""
    roles: dict[str, set] = {}
    names = []
    for tag, value in values:
        if tag == "stash":
            names.append(value)
        else:
            doc_id, entry = value
            roles.setdefault(doc_id, set()).add(entry)
    table = {doc_id: tuple(sorted(r, key=_role_order)) for doc_id, r in roles.items()}
    return table, sorted(names)


class PairShinglesFn(DocBatcher):
    """(bucket, roles and stash names) -> shingle sets (packed, shingles.pack_set) of the
    bucket's documents in a candidate edge, keyed by the receiver:
    (own id, ("own", (node, set))) for a document others send to, (u id, ("in", (node, set)))
    for each smaller neighbour u it sends to. The bucket's stash files are read only when it
    has roles; other documents cost one dict lookup and are not shingled. It counts the bytes
    it sends to Verify's GroupByKey with its other counts (one "counts" dict a bundle)."""

    def __init__(self, config: DedupConfig, work_dir: str) -> None:
        super().__init__(config)
        self._work_dir = work_dir
        self._bytes = ShuffleBytes("verify", coders.registry.get_coder(ANY))

    def setup(self) -> None:
        self._stash = StashDir(self._work_dir)

    def start_bundle(self) -> None:
        super().start_bundle()
        self._bytes.start_bundle(self._counts)

    def process(self, element):
        _, values = element
        roles, names = bucket_roles(values)
        if not roles:
            return
        for name in names:
            for doc in self._stash.documents(name, wanted=roles):  # the others stay bytes
                yield from self.pair_sets(doc, roles)

    def pair_sets(self, doc: Document, roles: dict):
        """One document and the roles table: its sets, once its batch is full."""
        entries = roles.get(doc.id)  # at most bands x bucket cap entries
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


def verified(distinct, stash, cfg: DedupConfig, counts):
    """(candidate edge, None) once per edge -> main: each end's candidate best match;
    "edges": (u, v) for the pairs at or above the threshold (VerifyFn). `stash`: (the stash
    names PCollection, the work dir, the bucket count)."""
    names, work_dir, num_buckets = stash
    roles = sending(distinct, "Verify/Roles", RolesFn(num_buckets), ANY, counts).sent
    by_bucket = (roles, names) | "Verify/WithStash" >> beam.Flatten()
    shingles = (
        by_bucket
        | "Verify/Stash" >> beam.GroupByKey()
        | "Verify/PairShingles"
        >> beam.ParDo(PairShinglesFn(cfg, work_dir))
        .with_output_types(ANY)
        .with_outputs("counts", main="shingles")
    )
    counts.append(shingles.counts)
    grouped = shingles.shingles | "Verify/Group" >> beam.GroupByKey()
    return sending(grouped, "Verify/Jaccard", VerifyFn(cfg.threshold), MATCH, counts, "edges")
