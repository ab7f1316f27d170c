"""Every dedup step's memory is bounded by its batch (or streams its group), not by the corpus:
the traced peak stays flat when the input grows 4x. (bench/bench_dedup_speed.py shows the same
for the worker process of a whole pipeline run.) The steps' DoFns are private to Deduplicate and
are driven here directly: why, a DoFn's own peak is measured without a runner's memory around it."""

from __future__ import annotations

import re

import numpy as np
import pytest

from pipelines.dedup import DedupConfig, transforms
from pipelines.dedup.bandfiles import BandFileWriter
from pipelines.dedup.components import (
    LEAF,
    _SettleFn,
    _StarCheckFn,
    _StarStepFn,
    large_star,
    small_star,
)
from pipelines.dedup.lsh import pack_nodes
from pipelines.dedup.shingles import pack_set, shingle_set
from pipelines.dedup.stash import StashDoFn
from pipelines.dedup.transforms import (
    _BucketEdgesFn,
    _FeaturesFn,
    _KeepSmallestFn,
)
from pipelines.dedup.verify import RECEIVES, PairShinglesFn, VerifyFn
from pipelines.document import Document
from tests.conftest import REPO
from tests.measure import traced_peak

CORPORA = REPO.parent / "shared" / "corpora"


def _paragraph_pool() -> list[str]:
    text = (CORPORA / "books" / "2701-0.txt").read_text(encoding="utf-8")
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text) if len(p) > 300]
    return ["\n\n".join(paragraphs[i : i + 4]) for i in range(0, 800, 4)]


def _drain(iterable) -> int:
    count = 0
    for _ in iterable:
        count += 1
    return count


class _EveryoneReceives:
    """A bucket's roles in which every document is in a candidate pair (the worst case)."""

    def get(self, doc_id):
        return [RECEIVES]


def _features(doc, fn):
    return fn.process(doc)


def _pair_sets(doc, fn):
    return fn.pair_sets(doc, _EveryoneReceives())


@pytest.mark.parametrize(
    "make_fn, step",
    [
        (lambda: _FeaturesFn(DedupConfig(batch_docs=64)), _features),
        (lambda: PairShinglesFn(DedupConfig(batch_docs=64), "unused"), _pair_sets),
    ],
    ids=["features", "pair-shingles"],
)
def test_batched_steps_memory_is_bounded_by_the_batch_not_the_bundle(make_fn, step):
    pool = _paragraph_pool()
    fn = make_fn()
    if isinstance(fn, _FeaturesFn):
        fn.setup()

    def bundle(n_docs: int):
        def run():
            fn.start_bundle()
            docs = (Document(f"books:{i:06d}", "books", pool[i % len(pool)]) for i in range(n_docs))
            outputs = sum(_drain(step(doc, fn)) for doc in docs)
            outputs += _drain(fn.finish_bundle())
            assert outputs == n_docs + 1  # one record (or set) per document, and the counts

        return run

    bundle(64)()  # per-process tables (word characters, lowercase, powers) are built once
    small, large = traced_peak(bundle(300)), traced_peak(bundle(1200))
    assert large < 1.25 * small + (1 << 20), (small, large)


class LazyGroup:
    """A GroupByKey value made on demand, as a runner streams a large group from shuffle."""

    def __init__(self, make, n: int) -> None:
        self.make, self.n = make, n

    def __iter__(self):
        return (self.make(i) for i in range(self.n))


def _node(i: int) -> tuple[int, str]:
    return (0, f"webtext:{(i * 7919) % 1_000_003:07d}")


def _record(i: int) -> tuple:
    """A dedup record (node, scope, fingerprint, URL key, band hashes) as it is shuffled."""
    return (_node(i), "", b"\x01" * 16, "", b"\x02" * 112)


SHINGLES = pack_set(shingle_set(_paragraph_pool()[0][:400]))


@pytest.mark.parametrize(
    "make_fn, make_value",
    [
        (lambda: _KeepSmallestFn("exact_duplicate", 1.0, {"fingerprint": b""}, 16), _record),
        (lambda: _StarStepFn(large_star, 1, False), lambda i: _node(i + 1)),
        (lambda: _StarStepFn(small_star, 1, True), _node),
        (lambda: _StarCheckFn(4), lambda i: _node(i + 10**6)),
        (_SettleFn, lambda i: None if i == 0 else (LEAF, _node(i + 10**6))),
        (
            lambda: VerifyFn(0.8),
            lambda i: ("own", (_node(0), SHINGLES)) if i == 0 else ("in", (_node(i), SHINGLES)),
        ),
    ],
    ids=[
        "keep-smallest",
        "large-star",
        "small-star",
        "star-check",
        "settle-star",
        "verify",
    ],
)
def test_grouped_steps_stream_their_group(make_fn, make_value):
    fn = make_fn()

    def group(size: int):
        def run():
            if hasattr(fn, "start_bundle"):
                fn.start_bundle()
            _drain(fn.process(((0, "webtext:0000000"), LazyGroup(make_value, size))))

        return run

    group(500)()
    small, large = traced_peak(group(3_000)), traced_peak(group(12_000))
    # 12k members held at once would be ~1.5 MB; streamed, the peak does not grow.
    assert large < 1.25 * small + 256 * 1024, (small, large)


def test_the_lsh_step_holds_one_band_partition_and_chains_a_hot_bucket(tmp_path):
    # A group of the LSH step is one band partition: its entries (8 bytes of hash and a node
    # each), read back from the band files its references name, are held, sorted by hash, so
    # its peak grows with the partition, by well under 200 bytes an entry; a hot bucket among
    # them (every member one hash) is chained to its smallest member, n - 1 edges, never the
    # n(n - 1)/2 pairs.
    writer = BandFileWriter(str(tmp_path))
    refs = [
        writer.write(
            np.full(500, 7, dtype=np.uint64).tobytes(),
            pack_nodes([_node(500 * c + i) for i in range(500)]),
        )
        for c in range(12_000 // 500)
    ]
    writer.close()
    fn = _BucketEdgesFn(100, str(tmp_path))

    def partition(size: int):
        def run():
            fn.start_bundle()
            group = LazyGroup(refs.__getitem__, size // 500)
            assert _drain(fn.process((b"\x00\x00\x00", group))) == size - 1

        return run

    partition(500)()
    small, large = traced_peak(partition(3_000)), traced_peak(partition(12_000))
    assert large - small < 200 * 9_000, (small, large)
    assert fn._counts.drain()["dedup_hot_buckets"] == 1


def test_the_check_would_catch_a_step_that_materialises_its_group():
    def materialising(size: int):
        return lambda: sorted(LazyGroup(_node, size))

    small, large = traced_peak(materialising(3_000)), traced_peak(materialising(12_000))
    assert large > 3 * small


def test_apply_streams_its_buckets_stash_files(tmp_path):
    # A bucket's documents come back from its stash files a frame at a time: the peak does not
    # grow with the bucket (4x the documents), though every tenth document is removed, so the
    # bucket's decisions (ids) are held.
    pool = _paragraph_pool()

    def bucket(n_docs: int):
        work = tmp_path / f"work{n_docs}"
        stash = StashDoFn(str(work), 1)
        stash.setup()
        stash.start_bundle()
        for i in range(n_docs):
            stash.process(Document(f"books:{i:06d}", "books", pool[i % len(pool)]))
        names = [out.value[1] for out in stash.finish_bundle()]
        decision = transforms._Decision("exact_duplicate", "books:000000", "books:000000", 1.0)
        values = [*names, *(("dec", (f"books:{i:06d}", decision)) for i in range(1, n_docs, 10))]
        fn = transforms._ApplyFn(str(work))
        fn.setup()

        def run():
            fn.start_bundle()
            removed = len(range(1, n_docs, 10))  # a reject and a cluster row each
            assert _drain(fn.process((0, values))) == n_docs + removed

        return run

    small, large = bucket(300), bucket(1200)
    small()
    small, large = traced_peak(small), traced_peak(large)
    assert large < 1.25 * small + 256 * 1024, (small, large)
