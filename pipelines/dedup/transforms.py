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
shuffled per input byte); the step that sends it counts it (shuffle.py), as a separate counting
step would cost a Beam transform for each shuffle.

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
from apache_beam import coders, pvalue, typehints
from apache_beam.transforms.window import GlobalWindows

from pipelines.dedup import exact, lsh
from pipelines.dedup.components import ConnectedComponents
from pipelines.dedup.config import DedupConfig
from pipelines.dedup.decontaminate import CONTAMINATION, Decontaminate
from pipelines.dedup.minhash import MinHasher, band_hashes
from pipelines.dedup.shingles import jaccard, pack_set, shingle_batch, unpack_set
from pipelines.dedup.shuffle import ShuffleBytes
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
    """Documents -> a _Record (as a plain tuple) per document, in batches, sent on to the first
    of `next_stages` that takes it (_Router); the main output without any."""

    def __init__(self, config: DedupConfig, next_stages: tuple[str, ...] = ()) -> None:
        super().__init__(config)
        self._router = _Router(next_stages)

    def start_bundle(self) -> None:
        super().start_bundle()
        self._router.start_bundle(self._counts)

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
            record = _Record(
                node=(exact.source_rank(doc.source, priority), doc.id),
                scope=doc.source if cfg.scope == "source" else "",
                fingerprint=exact.text_fingerprint(doc.text) if cfg.exact else b"",
                url_key=exact.normalize_url(doc.url) if cfg.url and doc.url else "",
                bands=bands[i].tobytes() if has_shingles else b"",
            )
            yield from self._router.send_on(tuple(record))


class _CountingFn(beam.DoFn):
    """A DoFn whose counts go to Beam metrics once per bundle (BundleCounts.drain)."""

    def start_bundle(self) -> None:
        self._counts = BundleCounts()

    def finish_bundle(self) -> None:
        self._counts.drain()


# What each step sends to a GroupByKey (or to the roles side input), typed as Beam inferred it
# when a separate `counted` step sat between them, so that the coder the runner writes it with
# and every dedup_shuffle_bytes_* figure stay the same.
_ANY = typehints.Any
_PAIR = typehints.Tuple[typehints.Any, typehints.Any]
_TO_DISTINCT = typehints.Tuple[typehints.Any, type(None)]  # Beam's Distinct's (element, None)
_MATCH = typehints.Tuple[typehints.Any, typehints.Tuple[float, typehints.Any]]
_RECEIVER = typehints.Tuple[typehints.Any, str]
_ROLE = typehints.Union[_RECEIVER, _PAIR]
APPLY_STAGE = "apply"


class _SendingFn(_CountingFn):
    """A step whose output goes to a GroupByKey of `stage` (a combine's, or the roles side
    input): it counts the bytes it sends there itself (shuffle.ShuffleBytes, tag "counts"),
    one transform fewer than a separate `counted` step (~7 ms of CPU each to build and start,
    whatever the data). Its other counts go to Beam metrics only, as before."""

    def __init__(self, stage: str, sent_type) -> None:
        self._bytes = ShuffleBytes(stage, coders.registry.get_coder(sent_type))

    def start_bundle(self) -> None:
        super().start_bundle()
        self._sent = BundleCounts()  # data as well as metrics, unlike self._counts
        self._bytes.start_bundle(self._sent)

    def finish_bundle(self):
        super().finish_bundle()
        counts = self._sent.drain()
        if counts:
            yield pvalue.TaggedOutput("counts", GlobalWindows.windowed_value(counts))

    def _send(self, element):
        self._bytes.add(element)
        return element


def _sending(pcoll, label: str, fn: _SendingFn, sent_type, counts: list, *tags):
    """pcoll | fn, whose main output ("sent", typed sent_type) goes to a GroupByKey; `tags`:
    its other outputs. Its byte counts join `counts`."""
    out = pcoll | label >> beam.ParDo(fn).with_output_types(sent_type).with_outputs(
        "counts", *tags, main="sent"
    )
    counts.append(out.counts)
    return out


URL_STAGE, EXACT_STAGE, BUCKETS_STAGE = "url", "exact", "lsh_buckets"


class _Router:
    """Sends a _Record tuple on to the first of `stages` that takes it, as the output tagged
    with that stage, counting what it sends (ShuffleBytes): URL_STAGE and EXACT_STAGE take
    (_url_key or _fingerprint_key) (key, record) where the key function gives one (a record
    without a URL skips the URL step); BUCKETS_STAGE takes (bucket key, node) for each LSH band,
    or nothing for a document without shingles. A record no stage is left for is the main
    output. The step that makes or keeps a record routes it itself: a keying step in front of
    each GroupByKey would be one more Beam transform each (~7 ms of CPU to build and start)."""

    def __init__(self, stages: tuple[str, ...]) -> None:
        self._stages = tuple(stages)
        self._bytes = {
            stage: ShuffleBytes(stage, coders.registry.get_coder(_SENT_TYPES[stage]))
            for stage in self._stages
        }

    def start_bundle(self, counts: BundleCounts) -> None:
        """`counts`: the DoFn's BundleCounts that it emits as data."""
        for sent in self._bytes.values():
            sent.start_bundle(counts)

    def send_on(self, record: tuple):
        for stage in self._stages:
            if stage == BUCKETS_STAGE:
                yield from self._to_buckets(record)
                return
            keyed = _KEY_FNS[stage](record)
            if keyed is not None:
                self._bytes[stage].add(keyed)
                yield pvalue.TaggedOutput(stage, keyed)
                return
        yield record

    def _to_buckets(self, record: tuple):
        record = _Record._make(record)
        if not record.bands:
            return
        sent = self._bytes[BUCKETS_STAGE]
        for key in lsh.bucket_keys(record.scope, np.frombuffer(record.bands, dtype=np.uint64)):
            sent.add((key, record.node))
            yield pvalue.TaggedOutput(BUCKETS_STAGE, (key, record.node))


class _KeepSmallestFn(_SendingFn):
    """(group key, record tuples) -> the record of the group's smallest node (every copy of it,
    for an id read twice), with `cleared` fields emptied, sent on to the first of
    `next_stages` that takes it (_Router; the main output without any); "decisions": (removed
    id, ("dec", _Decision)) for every other member, apply's input (counted). Two passes over
    the group, which is never held."""

    def __init__(
        self,
        reason: str,
        similarity: float | None,
        cleared: dict,
        next_stages: tuple[str, ...] = (),
    ) -> None:
        super().__init__(APPLY_STAGE, _ANY)
        self._reason = reason
        self._similarity = similarity
        self._cleared = cleared
        self._router = _Router(next_stages)

    def start_bundle(self) -> None:
        super().start_bundle()
        self._router.start_bundle(self._sent)

    def process(self, element):
        _, records = element
        kept = min(record[0] for record in records)
        for record in records:
            node = record[0]
            if node == kept:
                yield from self._router.send_on(
                    tuple(_Record._make(record)._replace(**self._cleared))
                )
            else:
                decision = _Decision(self._reason, kept[1], kept[1], self._similarity)
                yield pvalue.TaggedOutput("decisions", self._send((node[1], ("dec", decision))))


class _BucketEdgesFn(_SendingFn):
    """(bucket key, members) -> (candidate edge, None), the input of Beam's Distinct's combine;
    the edge is what is counted, as it was when Distinct's own step made the pair."""

    def __init__(self, max_pairs_members: int) -> None:
        super().__init__("candidate_edges", _ANY)
        self._max_pairs_members = max_pairs_members

    def process(self, element):
        _, members = element
        hot, edges = lsh.bucket_edges(members, self._max_pairs_members)
        self._counts.inc("dedup_hot_buckets", int(hot))
        for edge in edges:
            self._counts.inc("dedup_candidate_edges")
            yield self._send(edge), None


def _edge_roles(edge):
    """A candidate edge (u, v), u < v, as side-input entries: v sends its shingle set to u."""
    u, v = edge
    yield v[1], u


RECEIVES = "receives"  # the side-input entry of a document that other documents send sets to


class _RolesFn(_SendingFn):
    """(distinct candidate edge (u, v), None) -> "senders": _edge_roles; main: (u id, None),
    for the distinct receivers. Both are the roles side input's (stage verify_roles); a
    receiver id is counted as it was before it was paired for Distinct."""

    def __init__(self) -> None:
        super().__init__("verify_roles", _ANY)

    def process(self, element):
        edge, _ = element
        for role in _edge_roles(edge):
            yield pvalue.TaggedOutput("senders", self._send(role))
        yield self._send(edge[0][1]), None


class _ReceiversFn(_SendingFn):
    """(distinct receiver id, None) -> (id, RECEIVES), for the roles side input."""

    def __init__(self) -> None:
        super().__init__("verify_roles", _ANY)

    def process(self, element):
        yield self._send((element[0], RECEIVES))


class _PairShinglesFn(_DocBatcher):
    """Documents -> shingle sets (packed, shingles.pack_set) of the documents in a candidate
    edge, keyed by the receiver:
    (own id, ("own", (node, set))) for a document others send to, (u id, ("in", (node, set)))
    for each smaller neighbour u it sends to. `roles` (a multimap side input) holds, per
    document in an edge, RECEIVES and/or the nodes it sends to; other documents cost one
    lookup and are not shingled. It counts the bytes it sends to Verify's GroupByKey with its
    other counts (one "counts" dict a bundle)."""

    def __init__(self, config: DedupConfig) -> None:
        super().__init__(config)
        self._bytes = ShuffleBytes("verify", coders.registry.get_coder(_ANY))

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


def _own_shingles(values: Iterable[tuple[str, object]], doc_id: str):
    """The receiver's own (node, set) in a verify group; the senders' are streamed by the caller."""
    for tag, value in values:
        if tag == "own":
            return value
    raise AssertionError(f"document {doc_id!r} is in a candidate pair but has no shingle set")


class _VerifyFn(_SendingFn):
    """(u id, [("own", (u, set of u)), ("in", (v, set of v)), ...]) -> for every sender v with
    J >= threshold: "edges": (u, v), for the components; main: (u id, (J, v id)) and
    (v id, (J, u id)), each end's candidate for its best match (counted: stage best_match).
    Two passes over the group, which is never held."""

    def __init__(self, threshold: float) -> None:
        super().__init__("best_match", _MATCH)
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
                yield pvalue.TaggedOutput("edges", (u, v))
                yield self._send((u[1], (similarity, v[1])))
                yield self._send((v[1], (similarity, u[1])))


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


class _ApplyInputFn(_SendingFn):
    """One input of apply's GroupByKey: element (or keyed(element)) = (key, value) ->
    (key, (tag, value)), counted (stage apply). A GroupByKey of these, tags mixed, is a
    CoGroupByKey whose groups stay iterables (CoGroupByKey builds a list per tag, which a hot
    key could not afford)."""

    def __init__(self, tag: str, keyed=None) -> None:
        super().__init__(APPLY_STAGE, _ANY)
        self._tag = tag
        self._keyed = keyed

    def process(self, element):
        key, value = element if self._keyed is None else self._keyed(element)
        yield self._send((key, (self._tag, value)))


def _keyed_doc(doc: Document):
    return doc.id, _doc_row(doc)


def _keyed_reject(reject: Reject):
    return reject.doc_id, reject


def _near_decision(member):
    """(member, the smallest node of its component) -> (member id, its _Decision)."""
    node, kept = member
    return node[1], _Decision(NEAR_DUPLICATE, kept[1], kept[1], None)


def _url_key(record):
    """The key carries the scope and URL key, so the grouped record goes without the URL; None
    for a record without a URL."""
    if record[3]:
        return f"{record[1]}\x00{record[3]}", record[:3] + ("",) + record[4:]
    return None


def _fingerprint_key(record):
    """The key carries the scope and fingerprint, so the grouped record goes without the latter."""
    key = record[1].encode("utf-8", "surrogatepass") + b"\x00" + record[2]
    return key, (record[0], record[1], b"", "", record[4])


_KEY_FNS = {URL_STAGE: _url_key, EXACT_STAGE: _fingerprint_key}
# What _Router sends to each stage, typed as the keying steps' outputs were (see _ANY)
_SENT_TYPES = {URL_STAGE: _ANY, EXACT_STAGE: _ANY, BUCKETS_STAGE: _PAIR}


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
        counts = []
        joined = []  # apply's inputs, (id, (tag, value)) each: "doc", "dec", "rej" and "match"
        if self._decontaminate is not None:
            cut = docs | "Decontaminate" >> self._decontaminate
            docs = cut.docs
            counts.append(cut.counts)
            rejects = _ApplyInputFn("rej", _keyed_reject)
            joined.append(_sending(cut.rejects, "KeyRejects", rejects, _ANY, counts).sent)
        keyed_docs = _ApplyInputFn("doc", _keyed_doc)
        joined.append(_sending(docs, "KeyDocs", keyed_docs, _ANY, counts).sent)

        # Each record goes to the first keep-one step that takes it, from the step that makes it
        # (Features) or keeps it (a KeepSmallest): _Router.
        stages = tuple(
            stage
            for stage, on in (
                (URL_STAGE, cfg.url),
                (EXACT_STAGE, cfg.exact),
                (BUCKETS_STAGE, cfg.near),
            )
            if on
        )
        features = docs | "Features" >> beam.ParDo(_FeaturesFn(cfg, stages)).with_outputs(
            "counts", *stages, main="records"
        )
        counts.append(features.counts)
        sent = {stage: [features[stage]] for stage in stages}
        for label, stage, reason, similarity, cleared in (
            ("URL", URL_STAGE, URL_DUPLICATE, None, {"url_key": ""}),
            ("Exact", EXACT_STAGE, EXACT_DUPLICATE, 1.0, {"fingerprint": b"", "url_key": ""}),
        ):
            if stage not in stages:
                continue
            later = stages[stages.index(stage) + 1 :]
            keyed = sent[stage]
            keyed = keyed[0] if len(keyed) == 1 else keyed | f"{label}/Sent" >> beam.Flatten()
            kept = (
                keyed
                | f"{label}/Group" >> beam.GroupByKey()
                | f"{label}/KeepSmallest"
                >> beam.ParDo(_KeepSmallestFn(reason, similarity, cleared, later)).with_outputs(
                    "decisions", "counts", *later, main="records"
                )
            )
            counts.append(kept.counts)
            joined.append(kept.decisions)
            for next_stage in later:
                sent[next_stage].append(kept[next_stage])

        if cfg.near:
            # typed as the band keys were when a step of their own made them (see _ANY)
            buckets = sent[BUCKETS_STAGE] | "Near/BandKeys" >> beam.Flatten().with_output_types(
                _PAIR
            )
            candidates = buckets | "Near/Buckets" >> beam.GroupByKey()
            bucket_edges = _BucketEdgesFn(cfg.max_pairs_members)
            # Beam's Distinct, less its two maps: the step before pairs each edge with None,
            # the step after takes the keys.
            distinct = _sending(
                candidates, "Near/Candidates", bucket_edges, _TO_DISTINCT, counts
            ).sent | "Near/DistinctEdges" >> beam.CombinePerKey(lambda vs: None)
            if cfg.verify:
                verified = self._verified(distinct, docs, cfg, counts)
                best = verified.sent | "Near/BestMatch" >> beam.CombinePerKey(max)
                match = _ApplyInputFn("match")
                joined.append(_sending(best, "Near/TagMatch", match, _ANY, counts).sent)
                edges = verified.edges
            else:
                edges = distinct | "Near/DistinctEdges/Keys" >> beam.Keys()
            rounds = cfg.with_rounds_for(None).cc_rounds  # launchers size them to the input
            LOG.info("dedup: %d connected-components rounds", rounds)
            members = edges | "Near/Components" >> ConnectedComponents(rounds, counts)
            decide = _ApplyInputFn("dec", _near_decision)
            joined.append(_sending(members, "Near/Decide", decide, _ANY, counts).sent)

        applied = (
            joined
            | "Apply/Flatten" >> beam.Flatten()
            | "Apply/Group" >> beam.GroupByKey()
            | "Apply/Decide"
            >> beam.ParDo(_ApplyFn()).with_outputs("rejects", "clusters", main="main")
        )
        return DedupOutputs(
            applied.main,
            applied.rejects,
            applied.clusters,
            counts | "ShuffleCounts" >> beam.Flatten(),
        )

    @staticmethod
    def _verified(distinct, docs, cfg: DedupConfig, counts):
        """(candidate edge, None) once per edge -> main: each end's candidate best match;
        "edges": (u, v) for the pairs at or above the threshold (_VerifyFn)."""
        roles = _sending(distinct, "Verify/Roles", _RolesFn(), _TO_DISTINCT, counts, "senders")
        distinct_receivers = roles.sent | "Verify/DistinctReceivers" >> beam.CombinePerKey(
            lambda vs: None
        )
        receivers = _sending(
            distinct_receivers, "Verify/Receivers", _ReceiversFn(), _RECEIVER, counts
        ).sent
        # typed as the roles were typed when a `counted` step made them, so that the side
        # input's coder is the same
        all_roles = (
            roles.senders,
            receivers,
        ) | "Verify/AllRoles" >> beam.Flatten().with_output_types(_ROLE)
        shingles = docs | "Verify/PairShingles" >> beam.ParDo(
            _PairShinglesFn(cfg), beam.pvalue.AsMultiMap(all_roles)
        ).with_output_types(_ANY).with_outputs("counts", main="shingles")
        counts.append(shingles.counts)
        grouped = shingles.shingles | "Verify/Group" >> beam.GroupByKey()
        return _sending(
            grouped, "Verify/Jaccard", _VerifyFn(cfg.threshold), _MATCH, counts, "edges"
        )
