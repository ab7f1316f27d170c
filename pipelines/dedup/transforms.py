"""`Deduplicate`: decontamination, URL, exact and near-duplicate removal as one Beam transform.

    result = docs | Deduplicate(DedupConfig())
    result.main          # PCollection[Document]: the documents kept
    result["rejects"]    # PCollection[Reject]: each removed document, its reason and text
    result["clusters"]   # PCollection[ClusterMember]: who was removed in favour of whom

The graph (every step is a Map over bounded batches or a GroupByKey whose groups are streamed;
no step gathers documents, signatures or edges on one worker):

    docs -> [Decontaminate] -> Features (batched: fingerprint, URL key, MinHash signature,
            shingle set) -> small records keyed by id
    URL:   GroupByKey(URL) -> keep smallest -> records without URL duplicates
    exact: GroupByKey(text fingerprint) -> keep smallest -> survivors
    near:  survivors -> one key per LSH band -> GroupByKey(bucket) -> candidate edges (all
           pairs, or chained to the smallest member in a hot bucket) -> Distinct
           -> [verify: join each edge with both shingle sets by id, keep J >= threshold]
           -> ConnectedComponents (large-star/small-star) -> (member, smallest member)
    apply: GroupByKey(id) of documents with their decisions -> kept / Reject / ClusterMember

Each step sees only the documents the steps before it kept, so no document is removed in
favour of one that an earlier step had already removed.
"""

from __future__ import annotations

import dataclasses
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
from pipelines.dedup.shingles import jaccard, shingle_batch
from pipelines.dedup.shuffle import INPUT_BYTES, counted
from pipelines.document import Document, Reject
from pipelines.stats import BundleCounts

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
    """What the dedup steps need of a document (never its text)."""

    node: exact.Node
    scope: str  # "" when dedup runs across sources, else the document's source
    fingerprint: bytes
    url_key: str
    signature: bytes  # uint32 MinHash values; b"" for a document without shingles


class _Decision(NamedTuple):
    reason: str
    kept_id: str
    matched_id: str
    jaccard: float | None


class _FeaturesFn(beam.DoFn):
    """Documents -> (id, _Record), and (id, shingle set bytes) for verification, in batches.

    A batch closes at batch_docs documents or batch_bytes of text, so memory is bounded by the
    batch whatever the bundle; results are per document, so they do not depend on batching.
    """

    def __init__(self, config: DedupConfig) -> None:
        self._config = config

    def setup(self) -> None:
        self._hasher = MinHasher(self._config.num_perm, self._config.seed)

    def start_bundle(self) -> None:
        self._batch: list[Document] = []
        self._batch_chars = 0
        self._counts = BundleCounts()

    def process(self, doc: Document):
        self._batch.append(doc)
        self._batch_chars += len(doc.text)
        if (
            len(self._batch) >= self._config.batch_docs
            or self._batch_chars >= self._config.batch_bytes
        ):
            yield from self._flush()

    def finish_bundle(self):
        for out in self._flush():
            if isinstance(out, pvalue.TaggedOutput):
                yield pvalue.TaggedOutput(out.tag, GlobalWindows.windowed_value(out.value))
            else:
                yield GlobalWindows.windowed_value(out)
        self._counts.drain()

    def _flush(self):
        batch, self._batch, self._batch_chars = self._batch, [], 0
        if not batch:
            return
        cfg = self._config
        signatures = shingles = None
        if cfg.near:
            shingles = shingle_batch([d.text for d in batch], kind=cfg.shingle, n=cfg.ngram)
            signatures = self._hasher.signatures(shingles)
        priority = cfg.source_priority
        for i, doc in enumerate(batch):
            self._counts.inc("dedup_docs_in")
            self._counts.inc(INPUT_BYTES, len(doc.text.encode("utf-8", "surrogatepass")))
            has_shingles = shingles is not None and shingles.offsets[i + 1] > shingles.offsets[i]
            if cfg.near and not has_shingles:
                self._counts.inc("dedup_near_no_shingles")
            record = _Record(
                node=(exact.source_rank(doc.source, priority), doc.id),
                scope=doc.source if cfg.scope == "source" else "",
                fingerprint=exact.text_fingerprint(doc.text) if cfg.exact else b"",
                url_key=exact.normalize_url(doc.url) if cfg.url and doc.url else "",
                signature=signatures[i].tobytes() if has_shingles else b"",
            )
            yield doc.id, record
            if has_shingles and cfg.verify:
                yield pvalue.TaggedOutput("shingles", (doc.id, shingles.of(i).tobytes()))


class _KeepSmallestFn(beam.DoFn):
    """(group key, nodes) -> (removed id, _Decision) for every node but the smallest."""

    def __init__(self, reason: str, similarity: float | None) -> None:
        self._reason = reason
        self._similarity = similarity

    def process(self, element):
        _, nodes = element
        kept, removed = exact.keep_smallest(nodes)
        for node in removed:
            yield node[1], _Decision(self._reason, kept[1], kept[1], self._similarity)


class _BandKeysFn(beam.DoFn):
    """(id, _Record) -> (bucket key, node), one per band, for documents with a signature."""

    def __init__(self, bands: int, rows: int) -> None:
        self._bands, self._rows = bands, rows

    def process(self, element):
        _, record = element
        if not record.signature:
            return
        signature = np.frombuffer(record.signature, dtype=np.uint32)[None, :]
        for key in lsh.bucket_keys(
            record.scope, band_hashes(signature, self._bands, self._rows)[0]
        ):
            yield key, record.node


class _BucketEdgesFn(beam.DoFn):
    def __init__(self, max_pairs_members: int) -> None:
        self._max_pairs_members = max_pairs_members

    def start_bundle(self) -> None:
        self._counts = BundleCounts()

    def process(self, element):
        _, members = element
        hot, edges = lsh.bucket_edges(members, self._max_pairs_members)
        self._counts.inc("dedup_hot_buckets", int(hot))
        for edge in edges:
            self._counts.inc("dedup_candidate_edges")
            yield edge

    def finish_bundle(self) -> None:
        self._counts.drain()


def _shingles_and(values: Iterable[tuple[str, object]], doc_id: str) -> bytes:
    """The one shingle set ("s") in a joined group; the other values are streamed by the caller."""
    for tag, value in values:
        if tag == "s":
            return value
    raise AssertionError(f"document {doc_id!r} is in a candidate pair but has no shingle set")


class _HalfEdgeFn(beam.DoFn):
    """(u id, [("s", shingles of u), ("e", (u, v)), ...]) -> (v id, (u, v, shingles of u))."""

    def process(self, element):
        doc_id, values = element
        if not any(tag == "e" for tag, _ in values):
            return
        shingles = _shingles_and(values, doc_id)
        for tag, value in values:
            if tag == "e":
                yield value[1][1], (value[0], value[1], shingles)


class _VerifyFn(beam.DoFn):
    """(v id, [("s", shingles of v), ("h", (u, v, shingles of u)), ...]) -> (u, v, J) for J >=
    threshold."""

    def __init__(self, threshold: float) -> None:
        self._threshold = threshold

    def start_bundle(self) -> None:
        self._counts = BundleCounts()

    def process(self, element):
        doc_id, values = element
        if not any(tag == "h" for tag, _ in values):
            return
        mine = np.frombuffer(_shingles_and(values, doc_id), dtype=np.uint32)
        for tag, value in values:
            if tag != "h":
                continue
            u, v, theirs = value
            similarity = jaccard(np.frombuffer(theirs, dtype=np.uint32), mine)
            self._counts.inc("dedup_pairs_verified")
            if similarity >= self._threshold:
                self._counts.inc("dedup_pairs_similar")
                yield u, v, similarity

    def finish_bundle(self) -> None:
        self._counts.drain()


class _ApplyFn(beam.DoFn):
    """(id, [("doc", Document), ("dec", _Decision), ("rej", Reject), ("match", (J, id))])
    -> main: Document | "rejects": Reject | "clusters": ClusterMember."""

    def start_bundle(self) -> None:
        self._counts = BundleCounts()

    def process(self, element):
        doc_id, values = element
        docs, decisions, rejects, match = [], {}, [], None
        for tag, value in values:
            if tag == "doc":
                docs.append(value)
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

    def finish_bundle(self) -> None:
        self._counts.drain()


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


def _without(label: str, records, decisions, stage, counts):
    """The records that no decision removed (a join on the document id)."""

    def keep(element):
        doc_id, values = element
        values = list(values)  # one record and at most one decision per id
        if not any(tag == "dec" for tag, _ in values):
            for tag, value in values:
                if tag == "rec":
                    yield doc_id, value

    return _join(
        label, {"rec": records, "dec": decisions}, stage, counts
    ) | f"{label}/Keep" >> beam.FlatMap(keep)


def _url_key(element):
    _, record = element
    if record.url_key:
        yield f"{record.scope}\x00{record.url_key}", record.node


def _fingerprint_key(element):
    _, record = element
    yield record.scope.encode("utf-8") + b"\x00" + record.fingerprint, record.node


def _best_matches(edge):
    u, v, similarity = edge
    yield u[1], (similarity, v[1])
    yield v[1], (similarity, u[1])


class Deduplicate(beam.PTransform):
    """PCollection[Document] -> main (kept Documents), "rejects" (Reject), "clusters"
    (ClusterMember). See the module docstring for the steps and DedupConfig for settings."""

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
            pre_rejects = cut.rejects | "KeyRejects" >> beam.Map(lambda r: (r.doc_id, r))

        features = docs | "Features" >> beam.ParDo(_FeaturesFn(cfg)).with_outputs(
            "shingles", main="records"
        )
        survivors = features.records
        if cfg.url:
            url_decisions = (
                counted(survivors | "URL/Key" >> beam.FlatMap(_url_key), "URL", "url", counts)
                | "URL/Group" >> beam.GroupByKey()
                | "URL/KeepSmallest" >> beam.ParDo(_KeepSmallestFn(URL_DUPLICATE, None))
            )
            decisions.append(url_decisions)
            survivors = _without("URL/Survivors", survivors, url_decisions, "url_survivors", counts)
        if cfg.exact:
            exact_decisions = (
                counted(
                    survivors | "Exact/Key" >> beam.FlatMap(_fingerprint_key),
                    "Exact",
                    "exact",
                    counts,
                )
                | "Exact/Group" >> beam.GroupByKey()
                | "Exact/KeepSmallest" >> beam.ParDo(_KeepSmallestFn(EXACT_DUPLICATE, 1.0))
            )
            decisions.append(exact_decisions)
            survivors = _without(
                "Exact/Survivors", survivors, exact_decisions, "exact_survivors", counts
            )

        joined = {"doc": docs | "KeyDocs" >> beam.Map(lambda d: (d.id, d))}
        if cfg.near:
            edges = (
                counted(
                    survivors | "Near/BandKeys" >> beam.ParDo(_BandKeysFn(cfg.bands, cfg.rows)),
                    "Near/Buckets",
                    "lsh_buckets",
                    counts,
                )
                | "Near/Buckets" >> beam.GroupByKey()
            )
            edges = (
                counted(
                    edges | "Near/Candidates" >> beam.ParDo(_BucketEdgesFn(cfg.max_pairs_members)),
                    "Near/Distinct",
                    "candidate_edges",
                    counts,
                )
                | "Near/DistinctEdges" >> beam.Distinct()
            )
            if cfg.verify:
                edges = self._verified(edges, features.shingles, cfg.threshold, counts)
                joined["match"] = counted(
                    edges | "Near/MatchBoth" >> beam.FlatMap(_best_matches),
                    "Near/BestMatch",
                    "best_match",
                    counts,
                ) | "Near/BestMatch" >> beam.CombinePerKey(max)
                edges = edges | "Near/DropJaccard" >> beam.Map(lambda e: (e[0], e[1]))
            decisions.append(
                edges
                | "Near/Components" >> ConnectedComponents(cfg.cc_rounds, counts)
                | "Near/Decide"
                >> beam.MapTuple(
                    lambda node, kept: (node[1], _Decision(NEAR_DUPLICATE, kept[1], kept[1], None))
                )
            )

        if decisions:
            joined["dec"] = decisions | "AllDecisions" >> beam.Flatten()
        if pre_rejects is not None:
            joined["rej"] = pre_rejects
        return _join("Apply", joined, "apply", counts) | "Apply/Decide" >> beam.ParDo(
            _ApplyFn()
        ).with_outputs("rejects", "clusters", main="main")

    @staticmethod
    def _verified(edges, shingles, threshold: float, counts):
        by_u = edges | "Verify/KeyByU" >> beam.Map(lambda e: (e[0][1], e))
        half = _join(
            "Verify/U", {"s": shingles, "e": by_u}, "verify_u", counts
        ) | "Verify/HalfEdges" >> beam.ParDo(_HalfEdgeFn())
        return _join(
            "Verify/V", {"s": shingles, "h": half}, "verify_v", counts
        ) | "Verify/Jaccard" >> beam.ParDo(_VerifyFn(threshold))
