"""Exact-text fingerprints, URL canonical forms, the keep rule, and LSH bucket edges."""

from __future__ import annotations

import collections
import gzip
import json

import numpy as np
import pytest

from pipelines.dedup import exact, lsh
from tests.conftest import REPO

CORPORA = REPO.parent / "shared" / "corpora"
WEBTEXT = CORPORA / "web" / "text" / "webtext_train_10"


def test_fingerprint_ignores_case_and_whitespace_only():
    text = (WEBTEXT / "4.txt").read_text(encoding="utf-8")
    same = "  " + text.upper().replace(" ", " \t\n ") + "\n"
    assert exact.text_fingerprint(text) == exact.text_fingerprint(same)
    assert exact.text_fingerprint(text) != exact.text_fingerprint(text.replace(".", "!", 1))
    assert len(exact.text_fingerprint(text)) == 16


def test_fingerprints_of_the_webtext_sample_are_distinct():
    texts = [p.read_text(encoding="utf-8") for p in sorted(WEBTEXT.glob("*.txt"))]
    assert len({exact.text_fingerprint(t) for t in texts}) == len(texts) == 10


@pytest.mark.parametrize(
    "a, b",
    [
        ("http://www.Example.com/a/b/", "https://example.com/a/b"),
        ("http://example.com:80/x?b=2&a=1", "http://example.com/x?a=1&b=2"),
        ("http://example.com/x?utm_source=tw&id=3#section", "http://example.com/x?id=3"),
        ("http://example.com/x?a=1&amp;b=2", "http://example.com/x?a=1&b=2"),
        ("example.com/page", "http://example.com/page"),
        ("http://example.com", "http://example.com/"),
    ],
)
def test_url_forms_of_the_same_page_are_equal(a, b):
    assert exact.normalize_url(a) == exact.normalize_url(b)


@pytest.mark.parametrize(
    "a, b",
    [
        ("http://example.com/a", "http://example.com/b"),
        ("http://example.com/x?id=1", "http://example.com/x?id=2"),
        ("http://example.com:8080/", "http://example.com/"),
        ("http://a.example.com/", "http://example.com/"),
    ],
)
def test_different_pages_stay_different(a, b):
    assert exact.normalize_url(a) != exact.normalize_url(b)


def test_real_url_list_variants_fold_and_distinct_pages_stay_apart():
    # The WebText-style URL list is already unique: canonical forms must not merge any two of
    # its pages, and the variants a crawl produces (https, www., trailing slash, tracking
    # parameters, &amp;) must fold back onto them.
    with gzip.open(CORPORA / "web" / "urls" / "RS_v2_2005-12.urk.json-00.gz", "rt") as f:
        urls = [json.loads(line)["u"].strip() for line in f]
    canonical = [exact.normalize_url(u) for u in urls]
    assert len(set(canonical)) == len(set(urls)) == 2179
    assert any("&amp;" in u for u in urls) and not any("&amp;" in c for c in canonical)
    variants = []
    for u in urls:
        v = u.replace("http://", "https://www.", 1) if "://www." not in u else u
        v += ("&" if "?" in v else "?") + "utm_source=feed"
        variants.append(v)
    assert [exact.normalize_url(v) for v in variants] == canonical
    assert exact.normalize_url("") == "" and exact.normalize_url("http://[::1") != ""


def test_keep_smallest_uses_rank_then_id():
    nodes = [(1, "webtext:b"), (0, "wikipedia:z"), (1, "webtext:a"), (0, "wikipedia:y")]
    kept, removed = exact.keep_smallest(nodes)
    assert kept == (0, "wikipedia:y")
    assert sorted(removed) == [(0, "wikipedia:z"), (1, "webtext:a"), (1, "webtext:b")]
    assert exact.source_rank("wikipedia", ("wikipedia", "books")) == 0
    assert exact.source_rank("webtext", ("wikipedia", "books")) == 2


def test_band_batches_separate_scopes_and_bands():
    h = np.array([[5, 5, 7]], dtype=np.uint64)
    keys = [key for key, _ in lsh.band_batches("", [(0, "d")], h)]
    assert len(set(keys)) == 3  # same hash in bands 0 and 1: different buckets
    assert set(keys).isdisjoint(key for key, _ in lsh.band_batches("books", [(0, "d")], h))


def test_band_batches_regroup_into_the_buckets_of_documents_sharing_a_band_hash():
    # Real paragraphs, some with lightly edited copies, signed as Features signs them, sent in
    # two batches: every bucket (band, hash) with two or more documents comes out of its band
    # partition's group once, with exactly its members, and one element per band partition a
    # batch touches crosses the shuffle, not one per band and document.
    from pipelines.dedup.minhash import MinHasher, band_hashes
    from pipelines.dedup.shingles import shingle_batch

    text = (CORPORA / "books" / "2701-0.txt").read_text(encoding="utf-8-sig")
    paragraphs = [p for p in text.replace("\r\n", "\n").split("\n\n") if len(p.split()) > 40]
    texts = paragraphs[:300] + [p.replace(" the ", " a ", 1) for p in paragraphs[:300:3]]
    nodes = [(i % 2, f"books:{i:04d}") for i in range(len(texts))]
    bands = band_hashes(MinHasher(112, 1).signatures(shingle_batch(texts)), 14, 8)
    expected = {}
    for node, row in zip(nodes, bands):
        for band, h in enumerate(row.tolist()):
            expected.setdefault((band, h), set()).add(node)
    expected = collections.Counter(frozenset(m) for m in expected.values() if len(m) > 1)
    assert len(expected) >= 90  # nearly every copy shares a band with its original
    groups = {}
    half = len(texts) // 2
    for batch in (slice(0, half), slice(half, None)):
        sent = list(lsh.band_batches("", nodes[batch], bands[batch]))
        assert len(sent) <= 14 * lsh.PARTITIONS < 14 * half
        for key, chunk in sent:
            groups.setdefault(key, []).append(chunk)
    found = [frozenset(m) for chunks in groups.values() for m in lsh.bucket_members(chunks)]
    assert collections.Counter(found) == expected


def test_packed_nodes_give_back_every_node():
    nodes = [(0, "books:moby"), (3, "wiki:Zürich – 東京"), (1000, ""), (2, "web:\udce9 byte")]
    packed = lsh.pack_nodes(nodes)
    assert [lsh.PackedNodes(packed)[i] for i in range(len(nodes))] == nodes
    assert len(lsh.PackedNodes(lsh.pack_nodes([]))) == 0


def test_small_bucket_links_all_pairs():
    members = [(0, f"d{i}") for i in (3, 1, 2)]
    hot, edges = lsh.bucket_edges(members, max_pairs_members=3)
    assert not hot
    assert list(edges) == [((0, "d1"), (0, "d2")), ((0, "d1"), (0, "d3")), ((0, "d2"), (0, "d3"))]


class _Reiterable:
    """A GroupByKey value that is never a list: produces members lazily, counts passes."""

    def __init__(self, n: int) -> None:
        self.n, self.passes = n, 0

    def __iter__(self):
        self.passes += 1
        return ((0, f"doc{(i * 7919) % self.n:07d}") for i in range(self.n))


def test_hot_bucket_is_chained_to_its_smallest_member_in_two_streamed_passes():
    members = _Reiterable(50_000)
    hot, edges = lsh.bucket_edges(members, max_pairs_members=100)
    edges = list(edges)
    assert hot
    assert len(edges) == 49_999
    assert {u for u, _ in edges} == {(0, "doc0000000")}
    assert len({v for _, v in edges}) == 49_999
    assert members.passes == 3  # the head, the minimum, the edges: never a list of 50k
