"""`Deduplicate`: decontamination, URL, exact and near-duplicate removal as one Beam transform.

    result = docs | Deduplicate(DedupConfig(), work_dir="OUTPUT/_work/dedup", num_buckets=16)
    result.main          # PCollection[Document]: the documents kept
    result["rejects"]    # PCollection[Reject]: each removed document, its reason and text
    result["clusters"]   # PCollection[ClusterMember]: who was removed in favour of whom
    result["counts"]     # PCollection[dict]: per-bundle counts of the bytes shuffled (shuffle.py)

The graph (every step is a Map over bounded batches or a GroupByKey whose groups are streamed;
no step gathers documents, signatures or edges on one worker):

    docs -> [Decontaminate] -> Stash (stash.py): each bundle's documents to one file per bucket
                               of their id; (bucket, file name) when the bundle commits
                            -> Features (batched: fingerprint, URL key, MinHash band hashes)
            -> a small record per document: (node, scope, fingerprint, URL key, band hashes)
    URL:   GroupByKey(URL) of the records with a URL -> the smallest node's record goes on,
           the others are decided (records without a URL go on without a shuffle)
    exact: GroupByKey(partition of the text fingerprint: keyed.py) of the survivors' records,
           in batches -> of each fingerprint, the smallest node's record goes on
    near:  survivors, in batches -> one element per LSH band partition a batch touches (the
           hashes and their nodes: lsh.band_batches, written to the bundle's band file; the
           element is a reference to it: bandfiles.py) -> GroupByKey(band partition) -> each
           bucket's candidate edges (all pairs, or chained to the smallest member in a hot
           bucket) -> Distinct
           -> [verify (verify.py): each edge's larger document sends its shingle set (packed
              exactly, ~25 bits a shingle: shingles.pack_set) to the smaller one; shingle sets
              are built, from each bucket's stash files, only for documents in an edge (the
              roles, grouped by bucket with the file names, say which); GroupByKey(smaller id)
              -> keep J >= threshold]
           -> ConnectedComponents (large-star/small-star) -> (member, smallest member)
    apply: GroupByKey(bucket) of the stash file names and the decisions on the bucket's ids ->
           the bucket's files read back: kept / Reject / ClusterMember

No shuffle carries the text: they move ids, 16-byte fingerprints, references to band batches,
shingle sets only of documents in a candidate pair (a hot bucket's centre receives its
members' sets and sends its own once), and file names. The text is written once, to the stash
files, and read back by bucket where a step needs it (the local runner holds every GroupByKey's
input in the launcher until the run ends, so text crossing a shuffle grew the launcher with the
input). `dedup_shuffle_bytes_<stage>` counts what each stage moves (bench/results/dedup.md:
bytes shuffled per input byte); the step that sends it counts it (shuffle.py), as a separate
counting step would cost a Beam transform for each shuffle.

Each step sees only the documents the steps before it kept, so no document is removed in
favour of one that an earlier step had already removed.
"""

from __future__ import annotations

import collections
import logging
from typing import NamedTuple

import apache_beam as beam
import numpy as np
from apache_beam import coders, pvalue

from pipelines.dedup import exact, lsh
from pipelines.dedup.bandfiles import BandFileWriter, read_chunks
from pipelines.dedup.batching import DocBatcher, emit_windowed
from pipelines.dedup.components import ConnectedComponents
from pipelines.dedup.config import DedupConfig
from pipelines.dedup.decontaminate import CONTAMINATION, Decontaminate
from pipelines.dedup.keyed import fingerprint_key, keyed_batches, smallest_of_repeated, url_key
from pipelines.dedup.minhash import MinHasher, band_hashes
from pipelines.dedup.shingles import shingle_batch
from pipelines.dedup.shuffle import (
    ANY,
    PAIR,
    TO_DISTINCT,
    CountingFn,
    SendingFn,
    ShuffleBytes,
    sending,
)
from pipelines.dedup.stash import MIN_BUCKETS, StashDir, StashDoFn
from pipelines.dedup.verify import verified
from pipelines.document import ClusterMember, Document, Reject, bucket_of
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
# What changes each reason (named in the one line of a run that writes no document).
DROP_FLAGS = {
    CONTAMINATION: "--decontaminate",
    URL_DUPLICATE: "--no-url-dedup",
    EXACT_DUPLICATE: "--no-exact-dedup",
    NEAR_DUPLICATE: "--dedup-threshold or --no-near-dedup",
    DUPLICATE_ID: "the input holds one record twice",
}
_STEP_ORDER = (URL_DUPLICATE, EXACT_DUPLICATE, NEAR_DUPLICATE)
LOG = logging.getLogger(__name__)


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


class _FeaturesFn(DocBatcher):
    """Documents -> a _Record (as a plain tuple) per document, in batches, sent on to the first
    of `next_stages` that takes it (_Router); the main output without any."""

    def __init__(
        self, config: DedupConfig, next_stages: tuple[str, ...] = (), work_dir: str | None = None
    ) -> None:
        super().__init__(config)
        self._router = _Router(next_stages, work_dir)

    def start_bundle(self) -> None:
        super().start_bundle()
        self._router.start_bundle(self._counts)

    def finish_bundle(self):
        yield from super().finish_bundle()
        self._router.close()

    def setup(self) -> None:
        self._hasher = MinHasher(self._config.num_perm, self._config.seed)

    def process(self, doc: Document):
        yield from self._add(doc)

    def _flush_batch(self, batch):
        cfg = self._config
        bands = shingles = None
        if cfg.near:
            texts = [d.text for d, _ in batch]
            shingles = shingle_batch(texts, kind=cfg.shingle, n=cfg.ngram, unique=False)
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
        yield from self._router.flush()


URL_STAGE, EXACT_STAGE, BUCKETS_STAGE, APPLY_STAGE = "url", "exact", "lsh_buckets", "apply"


class _Router:
    """Sends a _Record tuple on to the first of `stages` that takes it, as the output tagged
    with that stage, counting what it sends (ShuffleBytes): URL_STAGE and EXACT_STAGE take
    (url_key or fingerprint_key, keyed.py) (key, record) where the key function gives one (a
    record without a URL skips the URL step), EXACT_STAGE's waiting for `flush` to send them
    in batches by key partition (keyed.py); BUCKETS_STAGE takes the record's band hashes, which wait
    until `flush` writes the waiting records' as band batches (lsh.band_batches: one per band
    partition a batch touches, not one per band and document) to the bundle's band file in
    `work_dir` and sends their references (bandfiles.py; `close` completes the file when the
    bundle ends); a document without shingles goes to no bucket. A record no stage is left for
    is the main output. The step that makes or keeps a record routes it itself: a keying step in
    front of each GroupByKey would be one more Beam transform each (~7 ms of CPU to build and
    start)."""

    def __init__(self, stages: tuple[str, ...], work_dir: str | None = None) -> None:
        self._stages = tuple(stages)
        if BUCKETS_STAGE in self._stages and work_dir is None:
            raise ValueError("the LSH step's band files need a work_dir")
        self._work_dir = work_dir
        self._bytes = {
            stage: ShuffleBytes(stage, coders.registry.get_coder(_SENT_TYPES[stage]))
            for stage in self._stages
        }
        self._waiting: list[_Record] = []  # records whose band hashes flush sends
        self._keyed: list[tuple] = []  # (key, record) bound for EXACT_STAGE, sent by flush

    def start_bundle(self, counts: BundleCounts) -> None:
        """`counts`: the DoFn's BundleCounts that it emits as data."""
        for sent in self._bytes.values():
            sent.start_bundle(counts)
        self._waiting, self._keyed = [], []
        self._bands = BandFileWriter(self._work_dir) if BUCKETS_STAGE in self._stages else None

    def close(self) -> None:
        if self._bands is not None:
            self._bands.close()

    def send_on(self, record: tuple):
        for stage in self._stages:
            if stage == BUCKETS_STAGE:
                record = _Record._make(record)
                if record.bands:
                    self._waiting.append(record)
                return
            keyed = _KEY_FNS[stage](record)
            if keyed is not None and stage == EXACT_STAGE:  # sent in batches (keyed.py)
                self._keyed.append(keyed)
                return
            if keyed is not None:
                self._bytes[stage].add(keyed)
                yield pvalue.TaggedOutput(stage, keyed)
                return
        yield record

    @property
    def waiting(self) -> int:
        return len(self._waiting) + len(self._keyed)

    def flush(self):
        """The exact step's keyed batches and the band batches of the waiting records, scope by
        scope."""
        for element in keyed_batches(self._keyed):
            self._bytes[EXACT_STAGE].add(element)
            yield pvalue.TaggedOutput(EXACT_STAGE, element)
        self._keyed = []
        waiting, self._waiting = self._waiting, []
        by_scope: dict[str, list[_Record]] = {}
        for record in waiting:
            by_scope.setdefault(record.scope, []).append(record)
        sent = self._bytes.get(BUCKETS_STAGE)
        for scope, records in sorted(by_scope.items()):
            packed = b"".join(record.bands for record in records)
            hashes = np.frombuffer(packed, dtype=np.uint64).reshape(len(records), -1)
            for key, chunk in lsh.band_batches(scope, [r.node for r in records], hashes):
                element = (key, self._bands.write(*chunk))
                sent.add(element)
                yield pvalue.TaggedOutput(BUCKETS_STAGE, element)


class _KeepSmallestFn(SendingFn):
    """(group key, record tuples) -> the record of the group's smallest node (every copy of it,
    for an id read twice), with `cleared` fields emptied, sent on to the first of
    `next_stages` that takes it (_Router; the main output without any); "decisions": (bucket of
    the removed id, ("dec", (removed id, _Decision))) for every other member, apply's input
    (counted). Two passes over the group, which is never held. Records bound for the LSH step
    leave as band batches of `batch_docs` records, the rest at the bundle's end."""

    def __init__(
        self,
        reason: str,
        similarity: float | None,
        cleared: dict,
        num_buckets: int,
        next_stages: tuple[str, ...] = (),
        batch_docs: int = DedupConfig.batch_docs,
        work_dir: str | None = None,
    ) -> None:
        super().__init__(APPLY_STAGE, ANY)
        self._num_buckets = num_buckets
        self._reason = reason
        self._similarity = similarity
        self._cleared = cleared
        self._router = _Router(next_stages, work_dir)
        self._batch_docs = batch_docs

    def start_bundle(self) -> None:
        super().start_bundle()
        self._router.start_bundle(self._sent)

    def finish_bundle(self):
        yield from emit_windowed(self._router.flush())
        self._router.close()
        yield from super().finish_bundle()

    def process(self, element):
        _, records = element
        kept = min(record[0] for record in records)
        for record in records:
            yield from self._decide(record, kept)
        if self._router.waiting >= self._batch_docs:  # band batches of batch_docs documents
            yield from self._router.flush()

    def _decide(self, record, kept):
        """`record` goes on if its node is `kept`, else is decided removed in favour of it."""
        node = record[0]
        if node == kept:
            yield from self._router.send_on(tuple(_Record._make(record)._replace(**self._cleared)))
        else:
            decision = _Decision(self._reason, kept[1], kept[1], self._similarity)
            bucket = bucket_of(node[1], self._num_buckets)
            sent = self._send((bucket, ("dec", (node[1], decision))))
            yield pvalue.TaggedOutput("decisions", sent)


class _KeepSmallestOfBatchesFn(_KeepSmallestFn):
    """_KeepSmallestFn over a key partition's batches of (key, record) pairs (keyed.py)."""

    def process(self, element):
        _, batches = element
        smallest = smallest_of_repeated(batches)
        for batch in batches:
            for key, record in batch:
                yield from self._decide(record, smallest.get(key, record[0]))
            if self._router.waiting >= self._batch_docs:
                yield from self._router.flush()


class _BucketEdgesFn(SendingFn):
    """(band partition key, references to its (hashes, nodes) chunks in band files) ->
    (candidate edge, None) for the members of each bucket (lsh.bucket_members), the input of
    Beam's Distinct's combine; the edge is what is counted, as it was when Distinct's own step
    made the pair."""

    def __init__(self, max_pairs_members: int, work_dir: str) -> None:
        super().__init__("candidate_edges", ANY)
        self._max_pairs_members = max_pairs_members
        self._work_dir = work_dir

    def process(self, element):
        _, refs = element
        for members in lsh.bucket_members(read_chunks(self._work_dir, refs)):
            hot, edges = lsh.bucket_edges(members, self._max_pairs_members)
            self._counts.inc("dedup_hot_buckets", int(hot))
            for edge in edges:
                self._counts.inc("dedup_candidate_edges")
                yield self._send(edge), None


class _ApplyFn(CountingFn):
    """(bucket, [("stash", file name), ("dec", (id, _Decision)), ("rej", (id, Reject)),
    ("match", (id, (J, id)))]) -> main: Document | "rejects": Reject | "clusters":
    ClusterMember, for every document of the bucket's stash files. The bucket's decisions and
    ids are held (a bucket is ~64 MB of input); its documents are streamed from the files,
    except those of an id read twice, which are held until the copy to keep is known."""

    def __init__(self, work_dir: str) -> None:
        self._work_dir = work_dir

    def setup(self) -> None:
        self._stash = StashDir(self._work_dir)

    def process(self, element):
        _, values = element
        names, decisions, matches = [], {}, {}
        for tag, value in values:
            if tag == "stash":
                names.append(value)
            elif tag == "dec":
                doc_id, decision = value
                decisions.setdefault(doc_id, {})[decision.reason] = decision
            elif tag == "match":
                doc_id, match = value
                matches[doc_id] = match
            else:  # "rej": decontamination removed it before any dedup step saw it
                reject = value[1]
                self._counts.inc(REMOVAL_COUNTERS[reject.reason])
                yield pvalue.TaggedOutput("rejects", reject)
        names.sort()
        seen = collections.Counter(i for name in names for i in self._stash.ids(name))
        unknown = decisions.keys() - seen.keys()
        if unknown:
            raise AssertionError(f"dedup decided on {min(unknown)!r}, which is not in the input")
        twice: dict[str, list[Document]] = {i: [] for i, n in seen.items() if n > 1}
        for name in names:
            for doc in self._stash.documents(name):
                if doc.id in twice:
                    twice[doc.id].append(doc)
                else:
                    yield from self._decide(doc, decisions.get(doc.id), matches.get(doc.id))
        for doc_id, docs in sorted(twice.items()):
            yield from self._one_of_copies(doc_id, docs, decisions, matches)

    def _one_of_copies(self, doc_id, docs, decisions, matches):
        """Ids are unique by contract; the same record read twice keeps one copy,
        deterministically."""
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
                    url=extra.url,
                ),
            )
        yield from self._decide(docs[0], decisions.get(doc_id), matches.get(doc_id))

    def _decide(self, doc: Document, decisions: dict | None, match):
        reason = next((r for r in _STEP_ORDER if r in (decisions or ())), None)
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
        yield pvalue.TaggedOutput(
            "rejects", Reject(doc.id, doc.source, reason, detail, doc.text, url=doc.url)
        )
        yield pvalue.TaggedOutput(
            "clusters",
            ClusterMember(
                decision.kept_id, doc.id, doc.source, reason, decision.matched_id, decision.jaccard
            ),
        )


class _ApplyInputFn(SendingFn):
    """One input of apply's GroupByKey: element (or keyed(element)) = (id, value) ->
    (bucket of id, (tag, (id, value))), counted (stage apply). A GroupByKey of these and the
    stash names, tags mixed, is a CoGroupByKey whose groups stay iterables (CoGroupByKey builds
    a list per tag, which a big bucket could not afford)."""

    def __init__(self, tag: str, num_buckets: int, keyed=None) -> None:
        super().__init__(APPLY_STAGE, ANY)
        self._tag = tag
        self._num_buckets = num_buckets
        self._keyed = keyed

    def process(self, element):
        doc_id, value = element if self._keyed is None else self._keyed(element)
        yield self._send((bucket_of(doc_id, self._num_buckets), (self._tag, (doc_id, value))))


def _keyed_reject(reject: Reject):
    return reject.doc_id, reject


def _near_decision(member):
    """(member, the smallest node of its component) -> (member id, its _Decision)."""
    node, kept = member
    return node[1], _Decision(NEAR_DUPLICATE, kept[1], kept[1], None)


_KEY_FNS = {URL_STAGE: url_key, EXACT_STAGE: fingerprint_key}
# What _Router sends to each stage, typed as the keying steps' outputs were (see ANY)
_SENT_TYPES = {URL_STAGE: ANY, EXACT_STAGE: ANY, BUCKETS_STAGE: PAIR}


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

    def __init__(self, config: DedupConfig, work_dir: str, num_buckets: int = MIN_BUCKETS) -> None:
        """`work_dir`: where the text waits while dedup decides (stash.py; the caller removes
        it when the run ends); `num_buckets`: how many groups the text is read back in
        (stash.stash_buckets of the input's size)."""
        super().__init__()
        self.config = config
        self.work_dir = work_dir
        self.num_buckets = num_buckets
        decontamination = self.config.decontamination
        # Built here so that evaluation files are matched on the launcher (a typo fails early).
        self._decontaminate = Decontaminate(decontamination) if decontamination else None

    def expand(self, docs):
        cfg = self.config
        buckets = self.num_buckets
        counts = []
        # apply's inputs, (bucket, (tag, value)) each: "stash", "dec", "rej" and "match"
        joined = []
        if self._decontaminate is not None:
            cut = docs | "Decontaminate" >> self._decontaminate
            docs = cut.docs
            counts.append(cut.counts)
            rejects = _ApplyInputFn("rej", buckets, _keyed_reject)
            joined.append(sending(cut.rejects, "KeyRejects", rejects, ANY, counts).sent)
        # The text waits in files; their names go to apply's group and verification's, counted
        # once for each (stage "stash": how many there are depends on the runner's bundles).
        readers = 2 if cfg.near and cfg.verify else 1
        sent = ShuffleBytes("stash", coders.registry.get_coder(ANY))
        stashed = docs | "Stash" >> beam.ParDo(
            StashDoFn(self.work_dir, buckets, sent, readers)
        ).with_output_types(ANY).with_outputs("counts", main="names")
        counts.append(stashed.counts)
        joined.append(stashed.names)

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
        features = docs | "Features" >> beam.ParDo(
            _FeaturesFn(cfg, stages, self.work_dir)
        ).with_outputs("counts", *stages, main="records")
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
            keep = _KeepSmallestOfBatchesFn if stage == EXACT_STAGE else _KeepSmallestFn
            kept = (
                keyed
                | f"{label}/Group" >> beam.GroupByKey()
                | f"{label}/KeepSmallest"
                >> beam.ParDo(
                    keep(reason, similarity, cleared, buckets, later, cfg.batch_docs, self.work_dir)
                ).with_outputs("decisions", "counts", *later, main="records")
            )
            counts.append(kept.counts)
            joined.append(kept.decisions)
            for next_stage in later:
                sent[next_stage].append(kept[next_stage])

        if cfg.near:
            # typed as the band keys were when a step of their own made them (see ANY)
            band_keys = sent[BUCKETS_STAGE] | "Near/BandKeys" >> beam.Flatten().with_output_types(
                PAIR
            )
            candidates = band_keys | "Near/Buckets" >> beam.GroupByKey()
            bucket_edges = _BucketEdgesFn(cfg.max_pairs_members, self.work_dir)
            # Beam's Distinct, less its two maps: the step before pairs each edge with None,
            # the step after takes the keys.
            distinct = sending(
                candidates, "Near/Candidates", bucket_edges, TO_DISTINCT, counts
            ).sent | "Near/DistinctEdges" >> beam.CombinePerKey(lambda vs: None)
            if cfg.verify:
                stash = (stashed.names, self.work_dir, buckets)
                checked = verified(distinct, stash, cfg, counts)
                best = checked.sent | "Near/BestMatch" >> beam.CombinePerKey(max)
                match = _ApplyInputFn("match", buckets)
                joined.append(sending(best, "Near/TagMatch", match, ANY, counts).sent)
                edges = checked.edges
            else:
                edges = distinct | "Near/DistinctEdges/Keys" >> beam.Keys()
            rounds = cfg.with_rounds_for(None).cc_rounds  # launchers size them to the input
            LOG.info("dedup: %d connected-components rounds", rounds)
            members = edges | "Near/Components" >> ConnectedComponents(rounds, counts)
            decide = _ApplyInputFn("dec", buckets, _near_decision)
            joined.append(sending(members, "Near/Decide", decide, ANY, counts).sent)

        applied = (
            joined
            | "Apply/Flatten" >> beam.Flatten()
            | "Apply/Group" >> beam.GroupByKey()
            | "Apply/Decide"
            >> beam.ParDo(_ApplyFn(self.work_dir)).with_outputs("rejects", "clusters", main="main")
        )
        return DedupOutputs(
            applied.main,
            applied.rejects,
            applied.clusters,
            counts | "ShuffleCounts" >> beam.Flatten(),
        )
