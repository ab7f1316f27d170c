"""MinHash signatures for a whole batch of shingle sets at once, and their LSH band hashes.

Permutation i maps a 32-bit shingle hash x to h_i(x) = (a_i * x + b_i) mod 2^32 with odd a_i
(a bijection of the 32-bit space); a document's signature is the minimum of each h_i over its
shingle set. The shingle hashes are already uniformly mixed (see shingles.py), so this affine
family is min-wise enough, and its estimates are unbiased on real text (tests check the error
against exact Jaccard). It is the family datasketch >= 2.0 uses by default ("affine32"). We also
built the classic (a*x + b) mod (2^61 - 1) over uint64: numpy has no SIMD 64-bit multiply on
AVX2 machines, and end to end it ran 2.6x slower (3.0x datasketch's speed instead of 8.0x,
below the 5x target; bench/bench_dedup_speed.py measures both).

The computation is one (permutations x shingles) array per chunk of the batch's concatenated
shingles, reduced per document with `np.minimum.reduceat`: no Python loop per shingle or per
permutation, and the working memory is bounded by the chunk, not by the batch.

Permutation parameters come from xxhash of (seed, index), so every process on every machine
draws the same permutations without sharing state (numpy's Generator streams are not promised
to stay the same across numpy versions).
"""

from __future__ import annotations

import numpy as np
import xxhash

from pipelines.dedup.shingles import ShingleBatch, mix64

EMPTY = np.uint32(0xFFFFFFFF)  # every slot of an empty set's signature
# Shingles per chunk: permutations x chunk x 4 bytes = 3.5 MiB at 112 permutations (larger
# chunks measured faster here: fewer reduceat calls; the bound is what matters).
_CHUNK = 8192


def permutation_parameters(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) as uint32 arrays of length num_perm; every a is odd. Same seed, same values."""
    a = [
        xxhash.xxh64_intdigest(b"minhash-a:%d" % i, seed) & 0xFFFFFFFF | 1 for i in range(num_perm)
    ]
    b = [xxhash.xxh64_intdigest(b"minhash-b:%d" % i, seed) & 0xFFFFFFFF for i in range(num_perm)]
    return np.array(a, dtype=np.uint32), np.array(b, dtype=np.uint32)


class MinHasher:
    """Signatures of `num_perm` permutations; picklable (Beam ships it inside a DoFn)."""

    def __init__(self, num_perm: int, seed: int) -> None:
        if num_perm < 1:
            raise ValueError(f"num_perm must be >= 1, not {num_perm}")
        self.num_perm = num_perm
        self.seed = seed
        a, b = permutation_parameters(num_perm, seed)
        self._a = a[:, None]
        self._b = b[:, None]

    def signatures(self, batch: ShingleBatch) -> np.ndarray:
        """uint32 (documents, num_perm); an empty set's row is all EMPTY."""
        out = np.full((len(batch), self.num_perm), EMPTY, dtype=np.uint32)
        hashes, offsets = batch.hashes, batch.offsets
        work = np.empty((self.num_perm, _CHUNK), dtype=np.uint32)
        for lo in range(0, len(hashes), _CHUNK):
            chunk = hashes[lo : lo + _CHUNK]
            values = work[:, : len(chunk)]
            np.multiply(self._a, chunk, out=values)  # wraps mod 2^32
            np.add(values, self._b, out=values)
            # The documents whose shingles this chunk holds, and their segments within it.
            hi = lo + len(chunk)
            first = int(np.searchsorted(offsets, lo, side="right")) - 1
            stop = int(np.searchsorted(offsets, hi, side="left"))
            seg_starts = np.maximum(offsets[first:stop], lo)
            seg_ends = np.minimum(offsets[first + 1 : stop + 1], hi)
            # Empty documents have zero-width segments; reduceat would give them the next
            # document's first column, so only non-empty segments are reduced.
            nonempty = np.flatnonzero(seg_ends > seg_starts)
            minima = np.minimum.reduceat(values, seg_starts[nonempty] - lo, axis=1)
            rows = first + nonempty
            out[rows] = np.minimum(out[rows], minima.T)
        return out


def band_hashes(signatures: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """uint64 (documents, bands): one hash of each band's `rows` signature values.

    Two documents share a bucket in band k exactly when their band-k values are all equal (up
    to a 2^-64 hash collision).
    """
    if signatures.shape[1] < bands * rows:
        raise ValueError(
            f"signatures have {signatures.shape[1]} values, fewer than {bands} bands x {rows} rows"
        )
    values = signatures[:, : bands * rows].reshape(len(signatures), bands, rows).astype(np.uint64)
    h = np.broadcast_to(np.arange(1, bands + 1, dtype=np.uint64), values.shape[:2]).copy()
    for r in range(rows):
        h *= np.uint64(0x9E3779B97F4A7C15)
        h += values[:, :, r]
        h = mix64(h)
    return h


def estimate_jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """The MinHash estimate: the fraction of slots where two signatures agree."""
    return float(np.mean(a == b))


def candidate_probability(jaccard: float, bands: int, rows: int) -> float:
    """P(two documents of this Jaccard similarity share at least one LSH bucket) =
    1 - (1 - J^rows)^bands: the S-curve the bands x rows choice sets."""
    return 1.0 - (1.0 - jaccard**rows) ** bands
