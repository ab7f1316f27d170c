"""Decontamination: cut evaluation-set text (13-gram overlaps) out of the training documents.

The rules are those of Megatron-LM's tools/openwebtext/filter_ngrams.py:

- An evaluation text contributes every 13-gram of its lowercased `\\w+` words; a text of 8..12
  words contributes itself as one n-gram (so short LAMBADA-style passages still count).
- An n-gram found in `frequent_docs` (10) or more training documents is a common phrase, not
  contamination, and is ignored: a first pass counts, per n-gram, the documents containing it.
- Each match is cut out with `remove_chars` (200) characters either side, widened to the
  nearest sentence end (. ! ?); the pieces left that are `min_piece_chars` (200) characters or
  shorter are dropped, and a document cut into more than `max_splits` (10) pieces is dropped.

One difference: Megatron writes each piece as a separate document; here the pieces stay one
document (joined by blank lines) under the same id, so ids stay stable and the run's account
(read = written + dropped) still balances. A document left with no piece is rejected as
"contamination".

Evaluation files are plain text (one text per line: WikiText's wiki.test.tokens) or JSON lines
with a "text" field (LAMBADA's lambada_test.jsonl). WikiText's escapes ("@-@", "@,@") hold no
word characters, so its n-grams match the ordinary text they were made from.
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import apache_beam as beam
import numpy as np

from pipelines import io as pipeline_io
from pipelines.dedup.shingles import code_points, hash_spans, mix64, word_spans
from pipelines.dedup.shuffle import counted
from pipelines.document import Document, Reject
from pipelines.stats import BundleCounts

CONTAMINATION = "contamination"
_SENTENCE_ENDS = frozenset(".!?")
_NGRAM_MULT = np.uint64(0xC2B2AE3D27D4EB4F)


@dataclasses.dataclass(frozen=True)
class DecontaminationConfig:
    eval_files: tuple[str, ...]
    ngram: int = 13
    min_ngram: int = 8
    remove_chars: int = 200
    min_piece_chars: int = 200
    max_splits: int = 10
    frequent_docs: int = 10


@dataclasses.dataclass(frozen=True)
class NgramSet:
    """Sorted unique uint64 n-gram hashes and the n-gram lengths they were made with."""

    hashes: np.ndarray
    lengths: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.hashes)

    def contains(self, values: np.ndarray) -> np.ndarray:
        if len(self.hashes) == 0:
            return np.zeros(len(values), dtype=bool)
        at = np.searchsorted(self.hashes, values)
        return self.hashes[np.minimum(at, len(self.hashes) - 1)] == values

    @staticmethod
    def merge(parts: Sequence[NgramSet]) -> NgramSet:
        hashes = np.unique(np.concatenate([p.hashes for p in parts] or [np.empty(0, np.uint64)]))
        return NgramSet(hashes, tuple(sorted({n for p in parts for n in p.lengths}, reverse=True)))


_EMPTY = NgramSet(np.empty(0, dtype=np.uint64), ())


def _words(text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(word hashes, word start positions, word end positions) of text's lowercased \\w+ words."""
    codes = code_points(text)
    starts, ends = word_spans(codes)
    return hash_spans(codes, starts, ends), starts, ends


def ngram_hashes(word_hashes: np.ndarray, n: int) -> np.ndarray:
    """Hash of every n consecutive words, salted with n (an 8-gram never equals a 13-gram)."""
    count = len(word_hashes) - n + 1
    if count <= 0:
        return np.empty(0, dtype=np.uint64)
    h = np.full(count, np.uint64(n), dtype=np.uint64)
    for t in range(n):
        h *= _NGRAM_MULT
        h += word_hashes[t : t + count]
    return mix64(h)


def eval_ngrams(text: str, ngram: int, min_ngram: int) -> NgramSet:
    """The n-grams one evaluation text contributes (Megatron's compute_ngrams_insert_dict)."""
    hashes, _, _ = _words(text)
    if len(hashes) < min_ngram:
        return NgramSet(np.empty(0, dtype=np.uint64), ())
    if len(hashes) < ngram:
        return NgramSet(ngram_hashes(hashes, len(hashes)), (len(hashes),))
    return NgramSet(np.unique(ngram_hashes(hashes, ngram)), (ngram,))


def read_eval_texts(path: str) -> Iterator[str]:
    """The texts of one evaluation file: JSON lines with "text", else one text per line.

    Raises ValueError naming the file and line for a JSON line without a "text" string: a
    silently skipped evaluation text would leave its contamination in the training set.
    """
    with pipeline_io.open_input(path) as raw:
        stream = gzip.GzipFile(fileobj=raw) if path.endswith(".gz") else raw
        name = path[:-3] if path.endswith(".gz") else path
        is_json = name.endswith((".jsonl", ".json"))
        lines = io.TextIOWrapper(stream, encoding="utf-8", errors="replace")
        for lineno, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            if not is_json:
                yield line
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
            if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                raise ValueError(f'{path}:{lineno}: a JSON line needs a "text" string')
            yield record["text"]


def eval_file_ngrams(path: str, ngram: int, min_ngram: int) -> NgramSet:
    return NgramSet.merge([eval_ngrams(t, ngram, min_ngram) for t in read_eval_texts(path)])


def find_matches(text: str, evals: NgramSet, frequent: NgramSet) -> list[tuple[int, int, int]]:
    """(start, end, hash) of every evaluation n-gram in text that is not frequent, by position."""
    hashes, starts, ends = _words(text)
    found = []
    for n in evals.lengths:
        grams = ngram_hashes(hashes, n)
        hit = evals.contains(grams)
        if len(frequent):
            hit &= ~frequent.contains(grams)
        for i in np.flatnonzero(hit):
            found.append((int(starts[i]), int(ends[i + n - 1]), int(grams[i])))
    found.sort(key=lambda m: (m[0], -m[1]))  # the longest match first at a position
    return found


def cut_matches(
    text: str, matches: Sequence[tuple[int, int, int]], remove_chars: int, min_piece_chars: int
) -> list[str]:
    """The pieces of text left once each match and its surroundings are cut (Megatron's
    split_text loop): the text itself when there are no matches."""
    pieces = []
    piece_start = 0
    for start, end, _ in matches:
        if start < piece_start:  # inside what an earlier cut removed
            continue
        pos = start - remove_chars
        while pos > piece_start and text[pos] not in _SENTENCE_ENDS:
            pos -= 1
        if pos > piece_start and pos + 1 - piece_start > min_piece_chars:
            pieces.append(text[piece_start : pos + 1])
        pos = end + remove_chars
        while pos < len(text) and text[pos] not in _SENTENCE_ENDS:
            pos += 1
        piece_start = min(pos + 1, len(text))
        if len(text) - piece_start <= min_piece_chars:  # too little left to keep
            piece_start = len(text)
            break
    if piece_start < len(text):
        pieces.append(text[piece_start:])
    return pieces


def decontaminate(
    doc: Document, evals: NgramSet, frequent: NgramSet, config: DecontaminationConfig
) -> tuple[Document | Reject, int]:
    """(the document, cut if it overlaps an evaluation set, or a Reject; the number of matches)."""
    matches = find_matches(doc.text, evals, frequent)
    if not matches:
        return doc, 0
    pieces = cut_matches(doc.text, matches, config.remove_chars, config.min_piece_chars)
    if not pieces or len(pieces) > config.max_splits:
        why = (
            "no piece long enough" if not pieces else f"{len(pieces)} pieces > {config.max_splits}"
        )
        return (
            Reject(
                doc.id,
                doc.source,
                CONTAMINATION,
                detail=f"{len(matches)} evaluation {evals.lengths[0]}-gram matches; {why}",
                text=doc.text,
                url=doc.url,
            ),
            len(matches),
        )
    text = "\n\n".join(piece.strip() for piece in pieces)
    meta = dict(doc.meta)
    meta["decontaminated"] = f"{len(matches)} matches cut"
    return dataclasses.replace(doc, text=text, meta=meta), len(matches)


class _NgramSetCombine(beam.CombineFn):
    """Union of NgramSets: the evaluation set (or the frequent n-grams), bounded by its size."""

    def create_accumulator(self) -> list:
        return []

    def add_input(self, accumulator: list, element: NgramSet) -> list:
        accumulator.append(element)
        return [NgramSet.merge(accumulator)] if len(accumulator) > 64 else accumulator

    def merge_accumulators(self, accumulators) -> list:
        return [NgramSet.merge([part for acc in accumulators for part in acc])]

    def extract_output(self, accumulator: list) -> NgramSet:
        return NgramSet.merge(accumulator)


class _CountMatchesFn(beam.DoFn):
    def process(self, doc: Document, evals: NgramSet):
        for h in sorted({m[2] for m in find_matches(doc.text, evals, _EMPTY)}):
            yield h, 1


class _DecontaminateFn(beam.DoFn):
    def __init__(self, config: DecontaminationConfig) -> None:
        self._config = config

    def start_bundle(self) -> None:
        self._counts = BundleCounts()

    def process(self, doc: Document, evals: NgramSet, frequent: NgramSet):
        result, matches = decontaminate(doc, evals, frequent, self._config)
        self._counts.inc("dedup_contamination_matches", matches)
        if isinstance(result, Reject):
            yield beam.pvalue.TaggedOutput("rejects", result)
        else:
            self._counts.inc("dedup_contamination_trimmed", int(matches > 0))
            yield result

    def finish_bundle(self) -> None:
        self._counts.drain()


def _frequent_set(element: tuple[int, int]) -> NgramSet:
    return NgramSet(np.array([element[0]], dtype=np.uint64), ())


class DecontaminateOutputs(NamedTuple):
    docs: beam.PCollection  # documents with evaluation text cut out
    rejects: beam.PCollection  # Reject(reason="contamination"): documents left with nothing
    counts: beam.PCollection  # per-bundle counts of the bytes shuffled (shuffle.py)


class Decontaminate(beam.PTransform):
    """PCollection[Document] -> DecontaminateOutputs (docs, rejects, counts)."""

    def __init__(self, config: DecontaminationConfig) -> None:
        super().__init__()
        if not config.eval_files:
            raise ValueError("decontamination needs at least one evaluation file")
        self._config = config
        # Matched on the launcher so a typo fails before any worker starts.
        self._paths = sorted(
            {f.path for pattern in config.eval_files for f in pipeline_io.match_inputs(pattern)}
        )

    def expand(self, docs):
        cfg = self._config
        evals = (
            docs.pipeline
            | "EvalFiles" >> beam.Create(self._paths)
            | "EvalNgrams" >> beam.Map(eval_file_ngrams, cfg.ngram, cfg.min_ngram)
            | "EvalSet" >> beam.CombineGlobally(_NgramSetCombine())
        )
        counts: list = []
        matches = docs | "CountMatches" >> beam.ParDo(
            _CountMatchesFn(), beam.pvalue.AsSingleton(evals)
        )
        frequent = (
            counted(matches, "DocsPerNgram", "decontamination", counts)
            | "DocsPerNgram" >> beam.CombinePerKey(sum)
            | "Frequent" >> beam.Filter(lambda kv, at_least: kv[1] >= at_least, cfg.frequent_docs)
            | "AsSets" >> beam.Map(_frequent_set)
            | "FrequentSet" >> beam.CombineGlobally(_NgramSetCombine())
        )
        cut = docs | "Cut" >> beam.ParDo(
            _DecontaminateFn(cfg), beam.pvalue.AsSingleton(evals), beam.pvalue.AsSingleton(frequent)
        ).with_outputs("rejects", main="docs")
        return DecontaminateOutputs(cut.docs, cut.rejects, counts[0])
