"""`Deduplicate`: decontamination, URL, exact and near-duplicate removal as one Beam transform.

    result = docs | Deduplicate(DedupConfig())
    result.main          # PCollection[Document]: the documents kept
    result["rejects"]    # PCollection[Reject]: each removed document, its reason and text
    result["clusters"]   # PCollection[ClusterMember]: who was removed in favour of whom
    result["counts"]     # PCollection[dict]: per-bundle counts of the bytes shuffled (shuffle.py)

The graph (every step is a Map over bounded batches or a GroupByKey whose groups are streamed;
no step gathers documents, signatures or edges on one worker):

    docs -> [Decontaminate] -> Features (batched: fingerprint, URL key, MinHash band hashes)
            -> a small record per document: (node, scope, fingerprint, URL key, band hashes)
    URL:   GroupByKey(URL) of the records with a URL -> the smallest node's record goes on,
           the others are decided (records without a URL go on without a shuffle)
    exact: GroupByKey(text fingerprint) of the survivors -> the smallest node's record goes on
    near:  survivors -> one key per LSH band -> GroupByKey(bucket) -> candidate edges (all
           pairs, or chained to the smallest member in a hot bucket) -> Distinct
           -> [verify: each edge's larger document sends its shingle set (packed exactly,
              ~25 bits a shingle: shingles.pack_set) to the smaller one;
              shingle sets are built, from the documents again, only for documents in an edge
              (a side input says which); GroupByKey(smaller id) -> keep J >= threshold]
           -> ConnectedComponents (large-star/small-star) -> (member, smallest member)
    apply: GroupByKey(id) of documents with their decisions -> kept / Reject / ClusterMember

The text crosses a shuffle once, in apply (zstd-compressed); the steps before it move ids,
16-byte fingerprints and band hashes, and shingle sets only of documents in a candidate pair (a
hot bucket's centre receives its members' sets and sends its own once).
`dedup_shuffle_bytes_<stage>` counts what each stage moves (bench/results/dedup.md: bytes
shuffled per input byte).

Each step sees only the documents the steps before it kept, so no document is removed in
favour of one that an earlier step had already removed.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Iterable
from typing import NamedTuple

import apache_beam as beam
import numpy as np
from apache_beam import pvalue
from apache_beam.transforms.window import GlobalWindows

from pipelines.dedup import exact, lsh
from pipelines.dedup.components import ConnectedComponents
from pipelines.dedup.config import DedupConfig
from pipelines.dedup.decontaminate import CONTAMINATION, Decontaminate
from pipelines.dedup.minhash import MinHasher, band_hashes
from pipelines.dedup.shingles import jaccard, pack_set, shingle_batch, unpack_set
from pipelines.dedup.shuffle import counted
from pipelines.document import Document, Reject
from pipelines.stats import DEDUP_INPUT_BYTES, BundleCounts

URL_DUPLICATE = "url_duplicate"
EXACT_DUPLICATE = "exact_duplicate"
NEAR_DUPLICATE = "near_duplicate"
DUPLICATE_ID = "duplicate_id"
# Every reason a Reject from Deduplicate can carry, and the counter each removal increments.
REMOVAL_COUNTERS = {
    CONTAMINATION: "dedup_contamination_removed",
    URL_DUPLICATE: "dedup_url_removed",
    EXACT_DUPLICATE: "dedup_exact_removed",
    NEAR_DUPLICATE: "dedup_near_dup_removed",
    DUPLICATE_ID: "dedup_duplicate_id_removed",
}
REASONS = tuple(REMOVAL_COUNTERS)
_STEP_ORDER = (URL_DUPLICATE, EXACT_DUPLICATE, NEAR_DUPLICATE)
LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ClusterMember:
    """One removed document of a duplicate group (the --keep-rejects audit row).

    kept_id is the group's kept document; matched_id the document this one was found to
    duplicate (for near-duplicates, its most similar verified neighbour, which may itself be a
    removed member of the same component); jaccard their exact similarity (1.0 for exact
    copies; None where it was not computed: URL duplicates, or --dedup-no-verify).
    """

    kept_id: str
    removed_id: str
    removed_source: str
    reason: str
    matched_id: str
    jaccard: float | None


class _Record(NamedTuple):
    """What the dedup steps need of a document (never its text). It crosses shuffles as a plain
    tuple (a NamedTuple would be pickled with its class name)."""

    node: exact.Node
    scope: str  # "" when dedup runs across sources, else the document's source
    fingerprint: bytes  # b"" once the exact step is done with it
    url_key: str  # "" once the URL step is done with it
    bands: bytes  # uint64 LSH band hashes; b"" for a document without shingles


class _Decision(NamedTuple):
    reason: str
    kept_id: str
    matched_id: str
    jaccard: float | None


def _emit_windowed(outputs):
    """finish_bundle must give its outputs a window; dedup runs in the global window."""
    for out in outputs:
        if isinstance(out, pvalue.TaggedOutput):
            yield pvalue.TaggedOutput(out.tag, GlobalWindows.windowed_value(out.value))
        else:
            yield GlobalWindows.windowed_value(out)


class _DocBatcher(beam.DoFn):
    """Buffers documents (with a payload each) into batches that close at batch_docs documents
    or batch_bytes of text, so memory is bounded by the batch whatever the bundle; subclasses
    turn a batch into outputs in _flush_batch. Results are per document, so batching does not
    change them."""

    def __init__(self, config: DedupConfig) -> None:
        self._config = config

    def start_bundle(self) -> None:
        self._batch: list = []
        self._batch_chars = 0
        self._counts = BundleCounts()

    def _add(self, doc: Document, payload=None):
        self._batch.append((doc, payload))
        self._batch_chars += len(doc.text)
        if (
            len(self._batch) >= self._config.batch_docs
            or self._batch_chars >= self._config.batch_bytes
        ):
            yield from self._flush()

    def finish_bundle(self):
        yield from _emit_windowed(self._flush())
        counts = self._counts.drain()
        if counts:
            yield pvalue.TaggedOutput("counts", GlobalWindows.windowed_value(counts))

    def _flush(self):
        batch, self._batch, self._batch_chars = self._batch, [], 0
        if batch:
            yield from self._flush_batch(batch)

    def _flush_batch(self, batch):
        raise NotImplementedError


class _FeaturesFn(_DocBatcher):
    """Documents -> a _Record (as a plain tuple) per document, in batches."""

    def setup(self) -> None:
        self._hasher = MinHasher(self._config.num_perm, self._config.seed)

    def process(self, doc: Document):
        yield from self._add(doc)

    def _flush_batch(self, batch):
        cfg = self._config
        bands = shingles = None
        if cfg.near:
            shingles = shingle_batch([d.text for d, _ in batch], kind=cfg.shingle, n=cfg.ngram)
            bands = band_hashes(self._hasher.signatures(shingles), cfg.bands, cfg.rows)
        priority = cfg.source_priority
        for i, (doc, _) in enumerate(batch):
            self._counts.inc("dedup_docs_in")
            self._counts.inc(DEDUP_INPUT_BYTES, len(doc.text.encode("utf-8", "surrogatepass")))
            has_shingles = shingles is not None and shingles.offsets[i + 1] > shingles.offsets[i]
            if cfg.near and not has_shingles:
                self._counts.inc("dedup_near_no_shingles")
            yield tuple(
                _Record(
                    node=(exact.source_rank(doc.source, priority), doc.id),
                    scope=doc.source if cfg.scope == "source" else "",
                    fingerprint=exact.text_fingerprint(doc.text) if cfg.exact else b"",
                    url_key=exact.normalize_url(doc.url) if cfg.url and doc.url else "",
                    bands=bands[i].tobytes() if has_shingles else b"",
                )
            )


class _KeepSmallestFn(beam.DoFn):
    """(group key, record tuples) -> main: the record of the group's smallest node (every copy
    of it, for an id read twice), with `cleared` fields emptied; "decisions": (removed id,
    _Decision) for every other member. Two passes over the group, which is never held."""

    def __init__(self, reason: str, similarity: float | None, cleared: dict) -> None:
        self._reason = reason
        self._similarity = similarity
        self._cleared = cleared

    def process(self, element):
        _, records = element
        kept = min(record[0] for record in records)
        for record in records:
            node = record[0]
            if node == kept:
                yield tuple(_Record._make(record)._replace(**self._cleared))
            else:
                yield pvalue.TaggedOutput(
                    "decisions",
                    (node[1], _Decision(self._reason, kept[1], kept[1], self._similarity)),
                )


class _BandKeysFn(beam.DoFn):
    """_Record tuple -> (bucket key, node), one per band, for documents with shingles."""

    def process(self, record):
        record = _Record._make(record)
        if not record.bands:
            return
        for key in lsh.bucket_keys(record.scope, np.frombuffer(record.bands, dtype=np.uint64)):
            yield key, record.node


class _CountingFn(beam.DoFn):
    """A DoFn whose counts go to Beam metrics once per bundle (BundleCounts.drain)."""

    def start_bundle(self) -> None:
        self._counts = BundleCounts()

    def finish_bundle(self) -> None:
        self._counts.drain()


class _BucketEdgesFn(_CountingFn):
    def __init__(self, max_pairs_members: int) -> None:
        self._max_pairs_members = max_pairs_members

    def process(self, element):
        _, members = element
        hot, edges = lsh.bucket_edges(members, self._max_pairs_members)
        self._counts.inc("dedup_hot_buckets", int(hot))
        for edge in edges:
            self._counts.inc("dedup_candidate_edges")
            yield edge


def _edge_roles(edge):
    """A candidate edge (u, v), u < v, as side-input entries: v sends its shingle set to u."""
    u, v = edge
    yield v[1], u


RECEIVES = "receives"  # the side-input entry of a document that other documents send sets to


class _PairShinglesFn(_DocBatcher):
    """Documents -> shingle sets (packed, shingles.pack_set) of the documents in a candidate
    edge, keyed by the receiver:
    (own id, ("own", (node, set))) for a document others send to, (u id, ("in", (node, set)))
    for each smaller neighbour u it sends to. `roles` (a multimap side input) holds, per
    document in an edge, RECEIVES and/or the nodes it sends to; other documents cost one
    lookup and are not shingled."""

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
                if entry == RECEIVES:
                    yield doc.id, ("own", value)
                else:
                    yield entry[1], ("in", value)


def _own_shingles(values: Iterable[tuple[str, object]], doc_id: str):
    """The receiver's own (node, set) in a verify group; the senders' are streamed by the caller."""
    for tag, value in values:
        if tag == "own":
            return value
    raise AssertionError(f"document {doc_id!r} is in a candidate pair but has no shingle set")


class _VerifyFn(_CountingFn):
    """(u id, [("own", (u, set of u)), ("in", (v, set of v)), ...]) -> (u, v, J) for every
    sender v with J >= threshold. Two passes over the group, which is never held."""

    def __init__(self, threshold: float) -> None:
        self._threshold = threshold

    def process(self, element):
        doc_id, values = element
        u, mine = _own_shingles(values, doc_id)
        mine = unpack_set(mine)
        for tag, value in values:
            if tag != "in":
                continue
            v, theirs = value
            similarity = jaccard(unpack_set(theirs), mine)
            self._counts.inc("dedup_pairs_verified")
            if similarity >= self._threshold:
                self._counts.inc("dedup_pairs_similar")
                yield u, v, similarity


# Texts of this many characters or more cross apply's shuffle zstd-compressed (level 1, through
# pyarrow, which the pipelines already depend on: ~2x smaller for prose at ~10 ms of CPU a MB,
# a third of zlib's cost for the same ratio; bench/results/dedup.md). Below it the frame and a
# short text's poor ratio would save next to nothing. Beam's coders do not compress, and the
# text is most of what dedup shuffles.
COMPRESS_MIN_CHARS = 256


@functools.cache
def _zstd():
    import pyarrow  # imported here: only runs with dedup pay for it

    return pyarrow.Codec("zstd", compression_level=1)


def _doc_row(doc: Document) -> tuple:
    """A Document as a plain tuple for the apply shuffle, less its id, which is the key (a
    dataclass would be pickled with its class and field names, ~130 bytes a document); a long
    text as (UTF-8 size, zstd bytes), a short one as the str."""
    text = doc.text
    if len(text) >= COMPRESS_MIN_CHARS:
        raw = text.encode("utf-8")
        text = (len(raw), _zstd().compress(raw, asbytes=True))
    return doc.source, text, doc.url, doc.title, dict(doc.meta)


def _row_doc(doc_id: str, row: tuple) -> Document:
    """_doc_row's inverse."""
    source, text, *rest = row
    if isinstance(text, tuple):
        size, packed = text
        text = _zstd().decompress(packed, decompressed_size=size, asbytes=True).decode("utf-8")
    return Document(doc_id, source, text, *rest)


class _ApplyFn(_CountingFn):
    """(id, [("doc", _doc_row), ("dec", _Decision), ("rej", Reject), ("match", (J, id))])
    -> main: Document | "rejects": Reject | "clusters": ClusterMember."""

    def process(self, element):
        doc_id, values = element
        docs, decisions, rejects, match = [], {}, [], None
        for tag, value in values:
            if tag == "doc":
                docs.append(_row_doc(doc_id, value))
            elif tag == "dec":
                decisions[value.reason] = value
            elif tag == "rej":
                rejects.append(value)
            else:
                match = value
        for reject in rejects:  # decontamination removed it before any dedup step saw it
            self._counts.inc(REMOVAL_COUNTERS[reject.reason])
            yield pvalue.TaggedOutput("rejects", reject)
        if not docs:
            if decisions:
                raise AssertionError(f"dedup decided on {doc_id!r}, which is not in the input")
            return
        # Ids are unique by contract; the same record read twice keeps one copy, deterministically.
        docs.sort(key=lambda d: (d.text, d.url, d.source, d.title))
        for extra in docs[1:]:
            self._counts.inc(REMOVAL_COUNTERS[DUPLICATE_ID])
            yield pvalue.TaggedOutput(
                "rejects",
                Reject(
                    doc_id,
                    extra.source,
                    DUPLICATE_ID,
                    f"document id {doc_id!r} occurs twice",
                    extra.text,
                ),
            )
        doc = docs[0]
        reason = next((r for r in _STEP_ORDER if r in decisions), None)
        if reason is None:
            self._counts.inc("dedup_kept")
            yield doc
            return
        decision = decisions[reason]
        if reason == NEAR_DUPLICATE and match is not None:
            decision = decision._replace(jaccard=match[0], matched_id=match[1])
        detail = f"kept={decision.kept_id}"
        if decision.matched_id != decision.kept_id:
            detail += f" matched={decision.matched_id}"
        if decision.jaccard is not None:
            detail += f" jaccard={decision.jaccard:.4f}"
        self._counts.inc(REMOVAL_COUNTERS[reason])
        yield pvalue.TaggedOutput("rejects", Reject(doc.id, doc.source, reason, detail, doc.text))
        yield pvalue.TaggedOutput(
            "clusters",
            ClusterMember(
                decision.kept_id, doc.id, doc.source, reason, decision.matched_id, decision.jaccard
            ),
        )


def _join(
    label: str, inputs: dict[str, beam.PCollection], stage: str, counts: list
) -> beam.PCollection:
    """(key, [(tag, value), ...]) of keyed PCollections: a CoGroupByKey whose groups stay
    iterables (CoGroupByKey builds a list per tag, which a hot key could not afford)."""
    tagged = [
        pcoll | f"{label}/Tag-{tag}" >> beam.Map(lambda kv, t: (kv[0], (t, kv[1])), tag)
        for tag, pcoll in inputs.items()
    ]
    flat = tagged | f"{label}/Flatten" >> beam.Flatten()
    return counted(flat, label, stage, counts) | f"{label}/Group" >> beam.GroupByKey()


def _keep_smallest(label, stage, records, key_fn, reason, similarity, cleared, counts):
    """(survivors, decisions) of one keep-smallest step: records with a key are grouped by it,
    the smallest of each group goes on; records without one go on without a shuffle."""
    keyed = records | f"{label}/Key" >> beam.FlatMap(key_fn).with_outputs("keyed", "unkeyed")
    grouped = counted(keyed.keyed, label, stage, counts) | f"{label}/Group" >> beam.GroupByKey()
    kept = grouped | f"{label}/KeepSmallest" >> beam.ParDo(
        _KeepSmallestFn(reason, similarity, cleared)
    ).with_outputs("decisions", main="kept")
    survivors = (keyed.unkeyed, kept.kept) | f"{label}/Survivors" >> beam.Flatten()
    return survivors, kept.decisions


def _url_key(record):
    """The key carries the scope and URL key, so the grouped record goes without the URL."""
    if record[3]:
        yield pvalue.TaggedOutput(
            "keyed", (f"{record[1]}\x00{record[3]}", record[:3] + ("",) + record[4:])
        )
    else:
        yield pvalue.TaggedOutput("unkeyed", record)


def _fingerprint_key(record):
    """The key carries the scope and fingerprint, so the grouped record goes without the latter."""
    key = record[1].encode("utf-8", "surrogatepass") + b"\x00" + record[2]
    yield pvalue.TaggedOutput("keyed", (key, (record[0], record[1], b"", "", record[4])))


def _best_matches(edge):
    u, v, similarity = edge
    yield u[1], (similarity, v[1])
    yield v[1], (similarity, u[1])


class DedupOutputs(NamedTuple):
    """Deduplicate's outputs, by attribute or by name: result.main, result["rejects"]."""

    main: beam.PCollection
    rejects: beam.PCollection
    clusters: beam.PCollection
    counts: beam.PCollection

    def __getitem__(self, key):
        return getattr(self, key) if isinstance(key, str) else tuple.__getitem__(self, key)


class Deduplicate(beam.PTransform):
    """PCollection[Document] -> main (kept Documents), "rejects" (Reject), "clusters"
    (ClusterMember), "counts" (per-bundle dicts of shuffle and input bytes, to merge into a
    run's stats). See the module docstring for the steps and DedupConfig for settings."""

    def __init__(self, config: DedupConfig | None = None) -> None:
        super().__init__()
        self.config = config or DedupConfig()
        decontamination = self.config.decontamination
        # Built here so that evaluation files are matched on the launcher (a typo fails early).
        self._decontaminate = Decontaminate(decontamination) if decontamination else None

    def expand(self, docs):
        cfg = self.config
        decisions, pre_rejects, counts = [], None, []
        if self._decontaminate is not None:
            cut = docs | "Decontaminate" >> self._decontaminate
            docs = cut.docs
            counts.append(cut.counts)
            pre_rejects = cut.rejects | "KeyRejects" >> beam.Map(lambda r: (r.doc_id, r))

        features = docs | "Features" >> beam.ParDo(_FeaturesFn(cfg)).with_outputs(
            "counts", main="records"
        )
        counts.append(features.counts)
        survivors = features.records
        if cfg.url:
            survivors, url_decisions = _keep_smallest(
                "URL", "url", survivors, _url_key, URL_DUPLICATE, None, {"url_key": ""}, counts
            )
            decisions.append(url_decisions)
        if cfg.exact:
            survivors, exact_decisions = _keep_smallest(
                "Exact",
                "exact",
                survivors,
                _fingerprint_key,
                EXACT_DUPLICATE,
                1.0,
                {"fingerprint": b"", "url_key": ""},
                counts,
            )
            decisions.append(exact_decisions)

        joined = {"doc": docs | "KeyDocs" >> beam.Map(lambda d: (d.id, _doc_row(d)))}
        if cfg.near:
            buckets = survivors | "Near/BandKeys" >> beam.ParDo(_BandKeysFn())
            candidates = (
                counted(buckets, "Near/Buckets", "lsh_buckets", counts)
                | "Near/Buckets" >> beam.GroupByKey()
                | "Near/Candidates" >> beam.ParDo(_BucketEdgesFn(cfg.max_pairs_members))
            )
            edges = (
                counted(candidates, "Near/DistinctEdges", "candidate_edges", counts)
                | "Near/DistinctEdges" >> beam.Distinct()
            )
            if cfg.verify:
                edges = self._verified(edges, docs, cfg, counts)
                matches = edges | "Near/MatchBoth" >> beam.FlatMap(_best_matches)
                joined["match"] = counted(
                    matches, "Near/BestMatch", "best_match", counts
                ) | "Near/BestMatch" >> beam.CombinePerKey(max)
                edges = edges | "Near/DropJaccard" >> beam.Map(lambda e: (e[0], e[1]))
            rounds = cfg.with_rounds_for(None).cc_rounds  # launchers size them to the input
            LOG.info("dedup: %d connected-components rounds", rounds)
            decisions.append(
                edges
                | "Near/Components" >> ConnectedComponents(rounds, counts)
                | "Near/Decide"
                >> beam.MapTuple(
                    lambda node, kept: (node[1], _Decision(NEAR_DUPLICATE, kept[1], kept[1], None))
                )
            )

        if decisions:
            joined["dec"] = decisions | "AllDecisions" >> beam.Flatten()
        if pre_rejects is not None:
            joined["rej"] = pre_rejects
        applied = _join("Apply", joined, "apply", counts) | "Apply/Decide" >> beam.ParDo(
            _ApplyFn()
        ).with_outputs("rejects", "clusters", main="main")
        return DedupOutputs(
            applied.main,
            applied.rejects,
            applied.clusters,
            counts | "ShuffleCounts" >> beam.Flatten(),
        )

    @staticmethod
    def _verified(edges, docs, cfg: DedupConfig, counts):
        """Candidate edges -> (u, v, J) for the pairs at or above the threshold."""
        senders = edges | "Verify/Senders" >> beam.FlatMap(_edge_roles)
        receiver_ids = edges | "Verify/ReceiverIds" >> beam.Map(lambda e: e[0][1])
        receivers = (
            counted(receiver_ids, "Verify/DistinctReceivers", "verify_roles", counts)
            | "Verify/DistinctReceivers" >> beam.Distinct()
            | "Verify/Receivers" >> beam.Map(lambda doc_id: (doc_id, RECEIVES))
        )
        roles = counted(
            (senders, receivers) | "Verify/Roles" >> beam.Flatten(),
            "Verify/Roles",
            "verify_roles",
            counts,
        )
        shingles = docs | "Verify/PairShingles" >> beam.ParDo(
            _PairShinglesFn(cfg), beam.pvalue.AsMultiMap(roles)
        ).with_outputs("counts", main="shingles")
        counts.append(shingles.counts)
        return (
            counted(shingles.shingles, "Verify/Group", "verify", counts)
            | "Verify/Group" >> beam.GroupByKey()
            | "Verify/Jaccard" >> beam.ParDo(_VerifyFn(cfg.threshold))
        )
