"""Words, word hashes and shingle sets, vectorised in numpy over a whole batch of documents.

A document's shingle set is the set of 32-bit hashes of its word n-grams (default 5 words) or
character n-grams. MinHash estimates the Jaccard similarity of two such sets, and the optional
verification step computes it exactly from the same sets, so both see the same notion of
similarity.

Words are runs of Unicode word characters (what `re.findall(r"\\w+", text.lower())` finds),
found with one table lookup per code point over the whole batch, and hashed with a polynomial
prefix hash (one multiply and one cumulative sum per code point): no regex call and no Python
hash call per word, and the same words as the regex (tests check this on real books). Every
hash is a fixed function of the text (splitmix64-style mixing, xxhash for overlong words), so
results are identical on every process and machine.

Two distinct shingles collide in 32 bits with probability 2^-32: between two documents of
1,000 shingles that is ~2e-4 spurious matches, a Jaccard error below 1e-6.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Sequence

import numpy as np
import xxhash

SHINGLE_KINDS = ("word", "char")

_U64 = np.uint64
_MIX1 = _U64(0xBF58476D1CE4E5B9)
_MIX2 = _U64(0x94D049BB133111EB)
_GOLDEN = _U64(0x9E3779B97F4A7C15)
_SHINGLE_MULT = _U64(0xD6E8FEB86659FD93)
_S30, _S27, _S31, _S32 = _U64(30), _U64(27), _U64(31), _U64(32)
# Words are hashed with a polynomial prefix hash (one multiply and one cumulative sum per code
# point, O(1) per word) over windows of at most this many code points; a word longer than
# _MAX_VECTOR_WORD (a URL, base64) is rare and is hashed with xxhash instead.
_WINDOW = 1 << 18
_MAX_VECTOR_WORD = 64
_BASE = _U64(0x100000001B3)  # odd, so it is invertible mod 2^64
_SEPARATOR = " "  # between documents of a batch: not a word character, so words never join


def _all_code_points() -> str:
    """Every code point in order, surrogates (never word characters) replaced by NULs. Decoded
    from one array: 7 ms, where joining 1.1M chr() calls took 125 ms of every worker's start."""
    codes = np.arange(0x110000, dtype=np.uint32)
    codes[0xD800:0xE000] = 0
    return codes.tobytes().decode("utf-32-le")


@functools.cache
def word_char_table() -> np.ndarray:
    """bool[0x110000]: True where the code point is a regex `\\w` character (Python semantics)."""
    table = np.zeros(0x110000, dtype=bool)
    # Word characters come in long runs, so a regex over all code points fills this quickly.
    for run in re.finditer(r"\w+", _all_code_points()):
        table[run.start() : run.end()] = True
    return table


@functools.cache
def lowercase_table() -> np.ndarray:
    """uint32[0x110000]: each code point's lowercase (its first character when lowercasing
    gives two, as for U+0130). A gather through this is ~2x faster than str.lower() on
    non-ASCII text, and keeps positions aligned with the original text."""
    chars = _all_code_points()
    dotted = 0x130  # the one code point whose lowercase is two characters: "i" + U+0307
    lowered = chars[:dotted].lower() + "i" + chars[dotted + 1 :].lower()
    assert len(lowered) == len(chars)
    return np.frombuffer(lowered.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


def mix64(h: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, in place on a uint64 array (wrapping arithmetic)."""
    h ^= h >> _S30
    h *= _MIX1
    h ^= h >> _S27
    h *= _MIX2
    h ^= h >> _S31
    return h


def code_points(text: str) -> np.ndarray:
    """The text as uint32 code points: index i is text[i] (word spans are text positions)."""
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


def word_spans(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of every maximal run of word characters in `codes` (half-open)."""
    is_word = word_char_table()[codes].view(np.int8)
    edges = np.diff(is_word, prepend=np.int8(0), append=np.int8(0))
    return np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)


@functools.cache
def _power_tables() -> tuple[np.ndarray, np.ndarray]:
    """_BASE^i and _BASE^-i mod 2^64 for i < _WINDOW (2 MiB each, built once per process)."""
    inverse = _U64(pow(int(_BASE), -1, 1 << 64))
    tables = []
    for base in (_BASE, inverse):
        powers = np.full(_WINDOW, base, dtype=_U64)
        powers[0] = 1
        tables.append(np.cumprod(powers))
    return tables[0], tables[1]


def _hash_window(codes: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Prefix-hash the spans of one window (codes[0] is the first span's first code point),
    case-insensitively."""
    powers, inverse_powers = _power_tables()
    terms = lowercase_table()[codes].astype(_U64)
    terms += _U64(1)  # so that a zero code point still counts
    terms *= powers[: len(terms)]
    prefix = np.zeros(len(terms) + 1, dtype=_U64)
    np.cumsum(terms, out=prefix[1:])
    # sum over the span of (c_j + 1) * B^(j - start): the same value wherever the span sits.
    raw = prefix[ends] - prefix[starts]
    raw *= inverse_powers[starts]
    return raw


def hash_spans(codes: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each span codes[start:end], equal for spans equal up to case, wherever
    they sit."""
    lengths = ends - starts
    out = np.empty(len(starts), dtype=_U64)
    short = np.flatnonzero(lengths <= _MAX_VECTOR_WORD)
    short_starts, short_ends = starts[short], ends[short]
    first = 0
    while first < len(short):
        base = short_starts[first]
        last = int(np.searchsorted(short_ends, base + _WINDOW, side="right"))
        rows = short[first:last]
        out[rows] = _hash_window(
            codes[base : short_ends[last - 1]],
            short_starts[first:last] - base,
            short_ends[first:last] - base,
        )
        first = last
    for row in np.flatnonzero(lengths > _MAX_VECTOR_WORD):
        out[row] = xxhash.xxh3_64_intdigest(
            lowercase_table()[codes[starts[row] : ends[row]]].tobytes()
        )
    out ^= lengths.astype(_U64) * _GOLDEN
    return mix64(out)


@dataclasses.dataclass(frozen=True)
class ShingleBatch:
    """The shingle sets of a batch of documents: doc i's set is hashes[offsets[i]:offsets[i+1]]
    (uint32), sorted and unique, or, from shingle_batch(unique=False), in text order with
    repeats (MinHash takes minima, which repeats and order do not change)."""

    hashes: np.ndarray
    offsets: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def of(self, i: int) -> np.ndarray:
        return self.hashes[self.offsets[i] : self.offsets[i + 1]]

    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)


def _ngram_hashes(unit_hashes: np.ndarray, n: int) -> np.ndarray:
    """Order-sensitive 64-bit hash of every window of n consecutive unit hashes."""
    count = len(unit_hashes) - n + 1
    if count <= 0:
        return np.empty(0, dtype=_U64)
    h = unit_hashes[:count].copy()
    for t in range(1, n):
        h *= _SHINGLE_MULT
        h += unit_hashes[t : t + count]
    return mix64(h)


def _batch_codes(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """All texts' code points in one array (separated so no word spans two documents), and the
    offset of each text's first code point."""
    lengths = [len(t) for t in texts]
    codes = code_points(_SEPARATOR.join(texts))
    starts = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(np.asarray(lengths, dtype=np.int64) + len(_SEPARATOR), out=starts[1:])
    return codes, starts


def _units(texts: Sequence[str], kind: str) -> tuple[np.ndarray, np.ndarray]:
    """Per-unit 64-bit hashes of the batch (words, or characters of the word stream) and the
    index of each unit's document."""
    codes, text_starts = _batch_codes(texts)
    starts, ends = word_spans(codes)
    doc_of_word = np.searchsorted(text_starts, starts, side="right") - 1
    if kind == "word":
        return hash_spans(codes, starts, ends), doc_of_word
    # Character shingles run over the words joined by single spaces: punctuation and runs of
    # whitespace do not count, as for word shingles.
    lengths = ends - starts
    same_doc_next = np.zeros(len(starts), dtype=bool)
    same_doc_next[:-1] = doc_of_word[1:] == doc_of_word[:-1]
    unit_counts = lengths + same_doc_next  # a space after each word but a document's last
    total = int(unit_counts.sum())
    unit_starts = np.zeros(len(starts), dtype=np.int64)
    np.cumsum(unit_counts[:-1], out=unit_starts[1:])
    chars = np.full(total, ord(" "), dtype=np.uint64)
    char_doc = np.repeat(doc_of_word, unit_counts)
    position_in_word = np.arange(total) - np.repeat(unit_starts, unit_counts)
    source = np.repeat(starts, unit_counts) + position_in_word
    is_char = position_in_word < np.repeat(lengths, unit_counts)
    chars[is_char] = lowercase_table()[codes[source[is_char]]]
    return mix64(chars * _GOLDEN + _GOLDEN), char_doc


def _sorted_unique(values: np.ndarray) -> np.ndarray:
    # np.unique's hash-based path is ~50x slower than sort + compare on these arrays.
    values = np.sort(values)
    keep = np.ones(len(values), dtype=bool)
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]


def shingle_batch(
    texts: Sequence[str], *, kind: str = "word", n: int = 5, unique: bool = True
) -> ShingleBatch:
    """The shingle set of every text, computed for the whole batch at once; with unique=False
    each text's shingles in text order, repeats kept: enough for MinHash, and it skips the
    sort that is a fifth of the signing step's CPU.

    A text with fewer than n units (but at least one) gets a single shingle of all its units, so
    very short documents still match their copies; a text with no word characters gets an empty
    set (near-duplicate detection skips it; exact dedup still sees it).
    """
    if kind not in SHINGLE_KINDS:
        raise ValueError(f"shingle kind must be one of {SHINGLE_KINDS}, not {kind!r}")
    if n < 1:
        raise ValueError(f"shingle size must be >= 1, not {n}")
    unit_hashes, unit_doc = _units(texts, kind)
    grams = _ngram_hashes(unit_hashes, n)
    gram_doc = unit_doc[: len(grams)]
    valid = gram_doc == unit_doc[n - 1 : n - 1 + len(grams)]
    grams, gram_doc = grams[valid], gram_doc[valid]

    # Documents with 1..n-1 units: one shingle of everything they have.
    unit_counts = np.bincount(unit_doc, minlength=len(texts))
    short_docs = np.flatnonzero((unit_counts > 0) & (unit_counts < n))
    if len(short_docs):
        unit_starts = np.concatenate([[0], np.cumsum(unit_counts)])
        extra = np.array(
            [
                _ngram_hashes(unit_hashes[unit_starts[d] : unit_starts[d + 1]], unit_counts[d])[0]
                for d in short_docs
            ],
            dtype=_U64,
        )
        grams = np.concatenate([grams, extra])
        gram_doc = np.concatenate([gram_doc, short_docs])
        if not unique:  # back in document order
            order = np.argsort(gram_doc, kind="stable")
            grams, gram_doc = grams[order], gram_doc[order]

    if not unique:
        offsets = np.searchsorted(gram_doc, np.arange(len(texts) + 1))
        return ShingleBatch(
            hashes=(grams >> _S32).astype(np.uint32), offsets=offsets.astype(np.int64)
        )
    # Sort by (document, hash) and drop repeats: one vectorised unique for the whole batch.
    keys = (gram_doc.astype(_U64) << _S32) | (grams >> _S32)
    keys = _sorted_unique(keys)
    offsets = np.searchsorted(keys >> _S32, np.arange(len(texts) + 1, dtype=_U64))
    return ShingleBatch(
        hashes=(keys & _U64(0xFFFFFFFF)).astype(np.uint32), offsets=offsets.astype(np.int64)
    )


def shingle_set(text: str, *, kind: str = "word", n: int = 5) -> np.ndarray:
    """One text's shingle set (sorted unique uint32): the same as its row of a batch."""
    return shingle_batch([text], kind=kind, n=n).of(0)


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Exact Jaccard similarity of two sorted unique arrays (1.0 for two empty sets)."""
    if len(a) == 0 and len(b) == 0:
        return 1.0
    inter = len(np.intersect1d(a, b, assume_unique=True))
    return inter / (len(a) + len(b) - inter)


# Shingle sets cross the verification shuffle packed (Elias-Fano): a sorted set of n 32-bit
# hashes splits each value into its low `l` bits, stored as they are, and its high bits, stored
# as unary gaps (n + 2^(32-l) bits at most). With l ~ log2(2^32 / n) that is ~l + 2 bits a value
# instead of 32 (~25 bits for a 500-word document), and the set comes back exactly, so the
# Jaccard computed from it is the same. Chunks of _PACK_CHUNK values (a multiple of 8) keep each
# chunk's low bits byte-aligned and the temporary bit matrix bounded.
_PACK_CHUNK = 1 << 15
_PACK_HEADER = 4  # n, uint32 little-endian


def _low_bits(n: int) -> int:
    """Low bits stored per value for a set of n values of 32 bits (0 .. 32)."""
    return max(0, 32 - max(n - 1, 0).bit_length())


def pack_set(values: np.ndarray) -> bytes:
    """A sorted unique uint32 array as compact bytes; unpack_set gives it back exactly."""
    values = np.asarray(values, dtype=np.uint32)
    n = len(values)
    header = n.to_bytes(_PACK_HEADER, "little")
    if n == 0:
        return header
    low = _low_bits(n)
    highs = (values.astype(np.uint64) >> np.uint64(low)).astype(np.int64)
    upper = np.zeros(n + int(highs[-1]) + 1, dtype=np.uint8)
    upper[highs + np.arange(n)] = 1
    parts = [header, np.packbits(upper, bitorder="little").tobytes()]
    shifts = np.arange(low, dtype=np.uint32)
    mask = np.uint32((1 << low) - 1) if low < 32 else np.uint32(0xFFFFFFFF)
    for start in range(0, n, _PACK_CHUNK):
        lows = values[start : start + _PACK_CHUNK] & mask
        bits = ((lows[:, None] >> shifts) & np.uint32(1)).astype(np.uint8)
        parts.append(np.packbits(bits.ravel(), bitorder="little").tobytes())
    return b"".join(parts)


def unpack_set(packed: bytes) -> np.ndarray:
    """The sorted unique uint32 array that pack_set packed."""
    n = int.from_bytes(packed[:_PACK_HEADER], "little")
    if n == 0:
        return np.zeros(0, dtype=np.uint32)
    low = _low_bits(n)
    low_bytes = (n * low + 7) // 8
    body = np.frombuffer(packed, dtype=np.uint8, offset=_PACK_HEADER)
    upper, lower = body[: len(body) - low_bytes], body[len(body) - low_bytes :]
    ones = np.flatnonzero(np.unpackbits(upper, bitorder="little"))[:n]
    out = (ones - np.arange(n)).astype(np.uint64) << np.uint64(low)
    weights = np.uint64(1) << np.arange(low, dtype=np.uint64)
    chunk_bytes = _PACK_CHUNK * low // 8
    for i, start in enumerate(range(0, n, _PACK_CHUNK)):
        count = min(_PACK_CHUNK, n - start)
        chunk = lower[i * chunk_bytes : i * chunk_bytes + (count * low + 7) // 8]
        bits = np.unpackbits(chunk, count=count * low, bitorder="little").reshape(count, low)
        out[start : start + count] |= bits.astype(np.uint64) @ weights
    return out.astype(np.uint32)
