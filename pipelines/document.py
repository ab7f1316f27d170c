"""The record types that travel through every pipeline stage.

A source yields `Document`s, or `Failure`s for records it could not parse; every stage after it
takes and returns `Document`s, so each stage can be tested alone and on the DirectRunner. What
leaves the path goes to the audit as a `Reject` (dropped), a `Failure` (not readable) or, for a
removed duplicate, a `ClusterMember`.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Mapping
from typing import Union

import xxhash


@dataclasses.dataclass(frozen=True)
class Document:
    """One document: a Wikipedia article, a book, a web page, a JSONL record.

    `id` is unique within a run and stable across runs and machines (built from the source and
    the record's own name, never from a counter that depends on bundle order): it is the sort key
    that makes shard output deterministic and the tie-breaker of every "keep one" rule.
    """

    id: str
    source: str
    text: str
    url: str = ""
    title: str = ""
    meta: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def with_text(self, text: str) -> Document:
        return dataclasses.replace(self, text=text)

    def with_meta(self, meta: Mapping[str, str]) -> Document:
        """This document with other metadata, made directly: dataclasses.replace walks the
        fields in Python (~2 us; the read stage makes one of these a document)."""
        return Document(self.id, self.source, self.text, self.url, self.title, meta)


def bucket_of(doc_id: str, num_buckets: int) -> int:
    """The bucket of a document: a stable 64-bit hash of its id (same on every machine). The
    shard writer's buckets and dedup's stash are both cut by it."""
    return xxhash.xxh64_intdigest(doc_id.encode("utf-8")) % num_buckets


@dataclasses.dataclass(frozen=True)
class Failure:
    """A record that could not be read: counted, logged with its location, and the run goes on."""

    location: str  # file path plus an offset, page id or line number
    reason: str  # short machine-readable reason, the key it is counted under
    detail: str = ""
    # Set when reading the task's input stopped here for good: the offset into the task's input
    # after which nothing was read (0 when the whole input counts as lost, as for a stream cut
    # short, whose missing tail cannot be measured). None: one record failed, reading went on.
    lost_from: int | None = None
    # Records the input promised here and never delivered (a Parquet row group whose pages are
    # corrupt, or a footer that counts more rows than its pages hold): each counts as a failed
    # record in the run's failure rate (stats.py), though only this one Failure stands for them.
    rows_lost: int = 0


@dataclasses.dataclass(frozen=True)
class ReadTask:
    """One unit of reading work that a single worker does: a whole file, or a byte range of one.

    Sources split their input into tasks up front so that reading is spread across workers
    (one large multistream dump is many tasks, not one).
    """

    source: str
    path: str
    # A byte range of the file, except where the source says otherwise (Parquet: a range of
    # row groups); sources.input_bytes tells how much input a task reads either way.
    start: int = 0  # byte offset of the first byte to read
    end: int = -1  # byte offset one past the last byte; -1 = to the end of the file
    options: Mapping[str, str] = dataclasses.field(default_factory=dict)


SourceRecord = Union[Document, Failure]

# The meta key under which a source says which parts of a record it cut and kept the rest
# ("title_page 1, contents 1" for a book's front matter): the read stage counts such documents
# and writes the note to the rejects audit.
PARTS_REMOVED = "parts_removed"
# The text those parts held: the read stage moves it from the document to the audit record.
PARTS_REMOVED_TEXT = "parts_removed_text"
# The input file (path or URL) a document was read from: set by the read stage for every
# document, whatever its source, and kept in the shard set's metadata sidecar.
INPUT_META = "input"
# The language the clean stage identified for a kept document, and its probability (as text,
# four decimals), where a language filter ran.
LANGUAGE_META = "language"
LANGUAGE_SCORE_META = "language_score"
# The meta key under which a source whose input says its own language (its traits'
# `input_language`) puts that language's code on each document it reads; the language filter
# holds the document to it.
SOURCE_LANGUAGE_META = "source_language"
# The least tokens a document's run keeps it with (its source's floor, or --min-tokens), set on
# the documents --write-cleaned writes and read back by the parquet source: a staged run
# (write-cleaned, dedup, --source parquet) drops the documents a one-pass run drops, though
# its last pass reads them from a source whose own floor is 0.
MIN_TOKENS_META = "min_tokens"


def carried_min_tokens(meta: Mapping[str, str]) -> int:
    """The floor a document carries in meta[MIN_TOKENS_META]; 0 where it carries none or one
    that is not a whole number >= 0 (a document file is input: a bad value drops nothing)."""
    value = meta.get(MIN_TOKENS_META, "")
    whole = isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 19
    return int(value) if whole else 0


def with_min_tokens(doc: Document, floor: int) -> Document:
    """`doc` carrying the floor its run keeps it with (the higher of `floor` and its own)."""
    carried = max(floor, carried_min_tokens(doc.meta))
    return doc.with_meta({**doc.meta, MIN_TOKENS_META: str(carried)})


@dataclasses.dataclass(frozen=True)
class Reject:
    """A document a filter or dedup step dropped, under a named reason (counted in stats.json;
    written aside with --keep-rejects so a user can audit the filter)."""

    doc_id: str
    source: str
    reason: str  # e.g. "too_short", "language", "gopher_symbol_ratio", "exact_duplicate"
    detail: str = ""
    text: str = ""  # the text as it was when rejected, for the audit file
    url: str = ""  # the page's address (web sources), so an audit can look the page up


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


@dataclasses.dataclass(frozen=True)
class Provenance:
    """Where a kept document came from: its row of the shard set's metadata sidecar
    (dataset_format/sidecar.py names the same columns), less the id and the token count,
    which the shard writer knows. Small strings only: it travels with the token ids."""

    input: str = ""
    url: str = ""
    title: str = ""
    language: str = ""
    language_score: float | None = None

    @classmethod
    def of(cls, doc: Document) -> Provenance:
        score = doc.meta.get(LANGUAGE_SCORE_META)
        return cls(
            input=str(doc.meta.get(INPUT_META, "")),
            url=doc.url,
            title=doc.title,
            language=str(doc.meta.get(LANGUAGE_META, "")),
            language_score=float(score) if score else None,
        )

    def values(self) -> list:
        """The fields' values in PROVENANCE_FIELDS order (a spill file's compact form; one
        attrgetter call: dataclasses.astuple deep-copies every field, ~5 us a document)."""
        return list(_provenance_values(self))


PROVENANCE_FIELDS = tuple(field.name for field in dataclasses.fields(Provenance))
_provenance_values = operator.attrgetter(*PROVENANCE_FIELDS)


@dataclasses.dataclass(frozen=True)
class TokenizedDocument:
    """A document as token ids: one array per sequence (one per document for GPT, one per sentence
    with --split-sentences for BERT), ready for the shard writer."""

    id: str
    source: str
    sequences: tuple  # tuple[np.ndarray, ...] of integer token ids
    text_bytes: int = 0  # UTF-8 size of the cleaned text, for throughput and stats
    provenance: Provenance = Provenance()
