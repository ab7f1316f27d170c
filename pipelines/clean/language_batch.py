"""Many texts classified at once with py3langid's model, each to the bits of its own classify.

A web page of ~800 bytes costs py3langid's classify ~200 us, most of it numpy's cost per call
(some twenty small array operations) and the copy of the feature rows it scores with into a fresh
array (265 KB for a page's ~460 distinct features, a new allocation every call).
`BatchScoring.classify_many` does every step but the last for a chunk of texts at once, as rows of
one padded array: the automaton's walk (`_VectorIdentifier`'s, per row), each row's features
counted in order of first occurrence (one row-wise sort of feature and position packed into one
integer, then the first occurrences marked in text order), py3langid's normalisation per row.
The last step stays per text and unchanged: the gathered feature rows (into one buffer reused
for the whole chunk) times their weights, the same BLAS product on the same numbers, so the
scores are the same bits as `classify`'s (tests/unit/pipelines/clean/test_language_batch.py
checks it on the shared corpora).
"""

from __future__ import annotations

import math

import numpy as np

# The padded text (rows x longest row, bytes) of one chunk: its int64 work arrays are 8x this.
CHUNK_BYTES = 1 << 17


def length_chunks(lengths: list[int], chunk_bytes: int = CHUNK_BYTES) -> list[list[int]]:
    """The indexes of `lengths`, shortest first, cut into chunks whose padded size (members x
    the longest member) is at most `chunk_bytes`; a longer text is a chunk alone."""
    chunks: list[list[int]] = []
    current: list[int] = []
    for index in sorted(range(len(lengths)), key=lengths.__getitem__):
        if current and (len(current) + 1) * lengths[index] > chunk_bytes:
            chunks.append(current)
            current = []
        current.append(index)
    return chunks + [current] if current else chunks


def first_occurrence_counts(features, lengths, feature_count: int):
    """Per row of `features` (rows x width, each a feature id below `feature_count` or -1 for
    none; a row's entries from its length on are padding): (each row's distinct features in
    order of first occurrence, how often each occurs in its row, how many each row has)."""
    rows, width = features.shape
    # a feature and its position packed into one integer that sorts by feature, then position
    bits = max(1, (width - 1).bit_length())
    fits = (feature_count << bits) < np.iinfo(np.uint32).max
    dtype = np.uint32 if fits else np.uint64  # half the bytes to sort where it fits
    padding = np.iinfo(dtype).max  # after every packed feature
    positions = np.arange(width, dtype=dtype)
    valid = features >= 0
    valid &= positions < lengths[:, None]
    packed = features.astype(dtype)
    packed <<= bits
    packed |= positions
    np.copyto(packed, padding, where=~valid)
    packed.sort(axis=1)
    keys = packed >> bits
    distinct = np.empty((rows, width), dtype=bool)  # a feature's first entry in its sorted run
    distinct[:, 0] = True
    np.not_equal(keys[:, 1:], keys[:, :-1], out=distinct[:, 1:])
    distinct &= packed != padding
    starts = np.flatnonzero(distinct)
    row_of = starts // width
    # a run ends where the next begins, or at its row's last valid entry
    valid_counts = np.count_nonzero(valid, axis=1)
    ends = np.minimum(np.append(starts[1:], rows * width), row_of * width + valid_counts[row_of])
    first = row_of * width + (packed.ravel()[starts] & ((1 << bits) - 1))
    counts = np.zeros(rows * width, dtype=np.int64)
    counts[first] = ends - starts
    marked = np.zeros(rows * width, dtype=bool)  # first occurrences, in text order
    marked[first] = True
    per_row = np.count_nonzero(marked.reshape(rows, width), axis=1)
    return features.ravel()[marked], counts[marked], per_row


class BatchScoring:
    """`classify_many` for `_VectorIdentifier` (pipelines/clean/language.py), whose attributes
    it reads: the walk's tables and the widened feature table."""

    __slots__ = ()

    def classify_many(self, texts: list[str]) -> list[tuple[str, float]]:
        """[self.classify(text) for text in texts], to the bit."""
        if not self._norm_probs or self.nb_ptc is not self._full_model[0]:
            return [self.classify(text) for text in texts]  # what py3langid alone decides
        encoded = [self._encode(text) for text in texts]
        lengths = [len(text) for text in encoded]
        scores = np.empty((len(texts), len(self.nb_classes)), dtype=np.float32)
        for chunk in length_chunks(lengths):
            scores[chunk] = self._raw_scores([encoded[index] for index in chunk])
        return self._labels(self._normalised(scores, lengths))

    def _raw_scores(self, encoded: list[bytes]):
        """py3langid's raw scores of each of `encoded` (UTF-8 bytes), rows of one array."""
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        width = max(1, int(lengths.max()))
        data = np.zeros((len(encoded), width), dtype=np.uint8)
        data[np.arange(width) < lengths[:, None]] = np.frombuffer(b"".join(encoded), np.uint8)
        states = np.zeros(data.shape, dtype=np.int64)
        for k in range(min(self._sync_bytes, width) - 1, -1, -1):  # as _VectorIdentifier's walk
            # take(mode="clip"): no bounds check (every index is a state of the automaton's)
            moves = self._row_start.take(states[:, k:], mode="clip")
            moves += data[:, : width - k]
            states[:, k:] = self._next_state.take(moves, mode="clip")
        features, counts, per_row = first_occurrence_counts(
            self._feature_of[states], lengths, len(self._ptc32)
        )
        weights = np.log1p(counts.astype(np.float32))
        scores = np.zeros((len(encoded), self._ptc32.shape[1]), dtype=np.float32)
        # The per-text product, on the same numbers as _raw_score's: its rows gathered into one
        # buffer (no allocation per text), its weights copied to an aligned vector.
        rows = np.empty((int(per_row.max()), self._ptc32.shape[1]), dtype=np.float32)
        vector = np.empty(len(rows), dtype=np.float32)
        bounds = np.concatenate(([0], np.cumsum(per_row))).tolist()
        take, copyto = np.take, np.copyto
        for row, (start, end) in enumerate(zip(bounds, bounds[1:])):
            if end > start:  # a featureless text keeps py3langid's 0.0 (norm_probs)
                size = end - start
                # mode="clip": the ids are the model's own; numpy's default ("raise") writes
                # into a temporary and copies it into `out`, twice the time
                take(self._ptc32, features[start:end], axis=0, out=rows[:size], mode="clip")
                copyto(vector[:size], weights[start:end])
                scores[row] = vector[:size] @ rows[:size]
        scores[per_row > 0] += self.nb_pc
        return scores

    def _normalised(self, scores, lengths: list[int]):
        """py3langid's _decide after the raw scores (norm_probs), for every row at once."""
        # the Python float py3langid multiplies by, as the float32 numpy makes of it
        scales = np.array([1.0 / math.sqrt(size or 1) for size in lengths], dtype=np.float32)
        scores *= scales[:, None]
        np.exp(scores - scores.max(axis=1, keepdims=True), out=scores)
        scores /= scores.sum(axis=1, keepdims=True)
        for first, alias in self._alias_pairs:
            scores[:, first] += scores[:, alias]
            scores[:, alias] = 0.0
        return scores

    def _labels(self, probabilities) -> list[tuple[str, float]]:
        best = probabilities.argmax(axis=1)
        confidences = probabilities[np.arange(len(best)), best].tolist()
        labels = []
        for index, confidence in zip(best.tolist(), confidences):
            if self.min_confidence is not None and confidence < self.min_confidence:
                labels.append(("und", confidence))
            else:
                labels.append((self.nb_classes[index], confidence))
        return labels
