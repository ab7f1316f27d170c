"""Shingles, MinHash signatures and LSH band hashes on real book text."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from pipelines.dedup import minhash, shingles
from pipelines.dedup.minhash import MinHasher, band_hashes, candidate_probability
from tests.helpers.dedup_minhash import BOOKS, book


def paragraphs(name: str, min_words: int = 60) -> list[str]:
    return [p.strip() for p in re.split(r"\n\s*\n", book(name)) if len(p.split()) >= min_words]


def edit_words(text: str, edits: int, seed: int) -> str:
    words = text.split()
    rng = random.Random(seed)
    for i in rng.sample(range(len(words)), edits):
        words[i] = f"edit{rng.randrange(10**6)}"
    return " ".join(words)


@pytest.mark.parametrize("name", ["2701-0.txt", "Candide-fr.txt", "46-0.txt"])
def test_words_are_the_regex_words(name):
    text = book(name)
    codes = shingles.code_points(text)
    starts, ends = shingles.word_spans(codes)
    lowered = text.lower()
    assert [lowered[s:e] for s, e in zip(starts, ends)] == re.findall(r"\w+", lowered)


def test_word_hashes_equal_exactly_for_equal_words():
    text = book("2701-0.txt")
    codes = shingles.code_points(text)
    starts, ends = shingles.word_spans(codes)
    hashes = shingles.hash_spans(codes, starts, ends).tolist()
    lowered = text.lower()
    by_word: dict[str, set[int]] = {}
    for s, e, h in zip(starts, ends, hashes):
        by_word.setdefault(lowered[s:e], set()).add(h)
    assert all(len(v) == 1 for v in by_word.values())  # position-independent
    assert len({next(iter(v)) for v in by_word.values()}) == len(by_word)  # no collisions


def test_overlong_words_and_lone_surrogates_hash():
    long_word = "x" * 500
    text = f"start {long_word} middle {long_word} end \udcff"
    codes = shingles.code_points(text)
    starts, ends = shingles.word_spans(codes)
    h = shingles.hash_spans(codes, starts, ends)
    assert h[1] == h[3] and h[1] != h[0]


def test_batch_shingles_equal_single_document_shingles():
    docs = paragraphs("2701-0.txt")[:40] + ["", "three words only", "¡¿!"]
    batch = shingles.shingle_batch(docs)
    for i, doc in enumerate(docs):
        assert np.array_equal(batch.of(i), shingles.shingle_set(doc))
    assert len(batch.of(40)) == 0 and len(batch.of(42)) == 0
    assert len(batch.of(41)) == 1  # fewer words than the shingle size: one shingle of all


@pytest.mark.parametrize("kind, n", [("word", 5), ("char", 9)])
def test_unsorted_shingles_hold_each_documents_set_with_repeats_and_sign_alike(kind, n):
    # Features signs shingles in text order, repeats kept (no sort): each document's multiset
    # has exactly its set's members, and the signatures and band hashes are the same bits.
    docs = paragraphs("2701-0.txt")[:40] + ["", "three words only", "¡¿!", book("11-0.txt")]
    docs.insert(5, "x y")  # a short document before longer ones: its one shingle stays in place
    unique = shingles.shingle_batch(docs, kind=kind, n=n)
    in_order = shingles.shingle_batch(docs, kind=kind, n=n, unique=False)
    assert len(in_order.hashes) > len(unique.hashes)  # real text repeats some shingles
    for i in range(len(docs)):
        assert np.array_equal(np.unique(in_order.of(i)), unique.of(i)), i
    hasher = MinHasher(112, 1)
    assert np.array_equal(hasher.signatures(in_order), hasher.signatures(unique))


def test_shingles_ignore_case_punctuation_and_whitespace():
    text = paragraphs("46-0.txt")[3]
    noisy = re.sub(r"\s+", "  \n ", text.upper()).replace(",", " ;")
    assert np.array_equal(shingles.shingle_set(text), shingles.shingle_set(noisy))


def test_char_shingles():
    a = "The quick brown fox jumps over the lazy dog."
    b = "the QUICK brown fox -- jumps over the lazy dog"
    sa, sb = shingles.shingle_set(a, kind="char", n=9), shingles.shingle_set(b, kind="char", n=9)
    assert np.array_equal(sa, sb)
    # "the quick brown fox jumps over the lazy dog": 43 characters, 35 distinct 9-grams
    assert len(sa) == 35
    assert (
        shingles.jaccard(
            sa, shingles.shingle_set("a different sentence entirely", kind="char", n=9)
        )
        < 0.05
    )


def test_jaccard():
    a = np.array([1, 2, 3, 4], dtype=np.uint32)
    b = np.array([3, 4, 5], dtype=np.uint32)
    assert shingles.jaccard(a, b) == pytest.approx(2 / 5)
    assert shingles.jaccard(a[:0], b[:0]) == 1.0


def test_packed_shingle_sets_come_back_exactly_and_smaller():
    # Real sets: every paragraph of a Gutenberg book, and every book at once (more shingles
    # than two pack chunks hold); edge sets at both ends of uint32.
    sets = [shingles.shingle_set(p) for p in paragraphs("1952-0.txt", min_words=1)]
    sets.append(shingles.shingle_set("\n".join(p.read_text("utf-8") for p in BOOKS.glob("*.txt"))))
    assert len(sets[-1]) > 2 * shingles._PACK_CHUNK
    sets += [
        np.zeros(0, dtype=np.uint32),
        np.array([0], dtype=np.uint32),
        np.array([2**32 - 1], dtype=np.uint32),
        np.array([0, 2**32 - 1], dtype=np.uint32),
        np.arange(2**32 - 70_000, 2**32, dtype=np.uint64).astype(np.uint32),
    ]
    for values in sets:
        unpacked = shingles.unpack_set(shingles.pack_set(values))
        assert unpacked.dtype == np.uint32 and np.array_equal(unpacked, values)
    # ~27 bits a value at 100 values, ~25 at 500, instead of 32; the Jaccard stays exact.
    sized = [s for s in sets if len(s) >= 100]
    assert len(sized) > 10
    assert all(len(shingles.pack_set(s)) < 0.9 * 4 * len(s) for s in sized)
    a, b = sets[-6], sets[0]
    roundtrip = shingles.jaccard(
        shingles.unpack_set(shingles.pack_set(a)), shingles.unpack_set(shingles.pack_set(b))
    )
    assert roundtrip == shingles.jaccard(a, b)


def test_signatures_match_the_formula_and_skip_empty_sets():
    sets = [shingles.shingle_set(p) for p in paragraphs("11-0.txt", 30)[:25]] + [
        np.empty(0, np.uint32)
    ]
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in sets])])
    batch = shingles.ShingleBatch(np.concatenate(sets), offsets)
    sig = MinHasher(112, seed=7).signatures(batch)
    a, b = minhash.permutation_parameters(112, 7)
    for i, s in enumerate(sets[:-1]):
        expected = ((a[:, None].astype(np.uint64) * s + b[:, None]) % (1 << 32)).min(axis=1)
        assert np.array_equal(sig[i], expected)
    assert (sig[-1] == minhash.EMPTY).all()


def test_signatures_of_a_batch_past_one_chunk_match_the_formula():
    """Issue 27 (a mutation survivor): the chunked path, a batch of more shingles than one
    chunk holds, with documents straddling the chunk borders, an empty set among them and a
    document alone longer than a chunk (a whole book)."""
    sets = [shingles.shingle_set(p) for p in paragraphs("2701-0.txt", 30)[:60]]
    sets.insert(20, np.empty(0, np.uint32))
    sets.append(shingles.shingle_set(book("11-0.txt")))
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in sets])])
    assert offsets[-1] > 3 * minhash._CHUNK and len(sets[-1]) > minhash._CHUNK
    batch = shingles.ShingleBatch(np.concatenate(sets), offsets)
    sig = MinHasher(16, seed=3).signatures(batch)
    a, b = minhash.permutation_parameters(16, 3)
    for i, s in enumerate(sets):
        if len(s) == 0:
            assert (sig[i] == minhash.EMPTY).all()
            continue
        expected = ((a[:, None].astype(np.uint64) * s + b[:, None]) % (1 << 32)).min(axis=1)
        assert np.array_equal(sig[i], expected), i


def test_one_permutation_is_the_fewest():
    one = MinHasher(1, seed=3).signatures(shingles.shingle_batch([book("1952-0.txt")[:2000]]))
    assert one.shape == (1, 1) and one[0, 0] != minhash.EMPTY
    for bad in (0, -1):
        with pytest.raises(ValueError, match="num_perm must be >= 1"):
            MinHasher(bad, seed=3)


def _splitmix64_finaliser(h: int) -> int:
    """splitmix64's finaliser (Steele et al.), on a Python int, mod 2^64."""
    mask = (1 << 64) - 1
    h ^= h >> 30
    h = (h * 0xBF58476D1CE4E5B9) & mask
    h ^= h >> 27
    h = (h * 0x94D049BB133111EB) & mask
    return h ^ (h >> 31)


def test_band_hashes_equal_a_transcription_of_their_rule():
    """A band's hash starts at its 1-based number; per row h = finaliser(h * 2^64/phi + value)
    mod 2^64. Pinned by rule, not by value: a changed constant or step regroups every bucket."""
    sets = [shingles.shingle_set(p) for p in paragraphs("11-0.txt", 30)[:4]]
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in sets])])
    sig = MinHasher(12, seed=5).signatures(shingles.ShingleBatch(np.concatenate(sets), offsets))
    got = band_hashes(sig, bands=3, rows=4)
    golden = 0x9E3779B97F4A7C15  # 2^64 / the golden ratio, rounded to odd
    for d in range(len(sets)):
        for band in range(3):
            h = band + 1
            for r in range(4):
                h = _splitmix64_finaliser((h * golden + int(sig[d, band * 4 + r])) % (1 << 64))
            assert int(got[d, band]) == h


def test_estimates_track_exact_jaccard_on_edited_real_text():
    hasher = MinHasher(112, seed=1)
    errors = []
    for k, para in enumerate(paragraphs("2701-0.txt", 120)[:60]):
        copy = edit_words(para, edits=1 + k % 12, seed=k)
        sa, sb = shingles.shingle_set(para), shingles.shingle_set(copy)
        batch = shingles.shingle_batch([para, copy])
        sig = hasher.signatures(batch)
        errors.append(minhash.estimate_jaccard(sig[0], sig[1]) - shingles.jaccard(sa, sb))
    errors = np.array(errors)
    # 112 permutations: standard error sqrt(J(1-J)/112) <= 0.047 per pair
    assert abs(errors.mean()) < 0.02
    assert np.abs(errors).max() < 0.2
    assert np.sqrt((errors**2).mean()) < 0.06


def test_band_hashes_agree_exactly_where_bands_agree():
    sig = np.tile(np.arange(112, dtype=np.uint32), (2, 1))
    sig[1, 8:] += 1  # only band 0 (values 0..7) is the same
    h = band_hashes(sig, bands=14, rows=8)
    assert h.shape == (2, 14)
    assert h[0, 0] == h[1, 0] and (h[0, 1:] != h[1, 1:]).all()
    # the same values in another band hash differently (band index is part of the hash)
    same = np.tile(np.arange(8, dtype=np.uint32), 14)[None, :]
    assert len(set(band_hashes(same, 14, 8)[0].tolist())) == 14
    with pytest.raises(ValueError, match="fewer than"):
        band_hashes(sig, bands=20, rows=13)


def test_candidate_probability_s_curve():
    assert candidate_probability(0.8, 14, 8) == pytest.approx(0.924, abs=1e-3)
    assert candidate_probability(0.9, 14, 8) > 0.999
    assert candidate_probability(0.5, 14, 8) < 0.06
    assert candidate_probability(0.8, 20, 13) == pytest.approx(0.678, abs=1e-3)
