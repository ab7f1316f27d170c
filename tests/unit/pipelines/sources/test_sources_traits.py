"""A source declares its traits in its own module (`TRAITS`, a SourceTraits): the clean preset,
the default --min-tokens, the task size option and dedup's bound on its documents follow the
traits, never the source's name. Here the books source is given other traits, and every stage
that reads them changes with it."""

from __future__ import annotations

import pytest

from pipelines.clean import CleanConfig, clean_document
from pipelines.document import Document, Reject
from pipelines.io import InputFile
from pipelines.options import PreprocessConfig
from pipelines.sources import SOURCES, sized_read_options, source_traits
from pipelines.sources.books import books
from pipelines.sources.document_bound import count_lines, input_documents_bound
from pipelines.sources.traits import DocumentBound, SourceTraits, TaskSize
from tests.conftest import CORPORA

# A short web page that C4's sentence rule (web preset) rejects and the light preset keeps.
SHORT_PAGE = CORPORA / "web" / "text" / "webtext_train_10" / "1.txt"
ALICE = CORPORA / "books" / "11-0.txt"


def _preprocess_config(source: str) -> PreprocessConfig:
    return PreprocessConfig(source=source, input="in", output="out", tokenizer="tok")


def test_every_source_declares_its_traits():
    assert {name: type(source_traits(name)) for name in SOURCES} == {
        name: SourceTraits for name in SOURCES
    }
    with pytest.raises(ValueError, match="unknown source 'nosuch'"):
        source_traits("nosuch")


def test_the_clean_preset_and_min_tokens_follow_the_traits(monkeypatch):
    page = Document("books:page", "books", SHORT_PAGE.read_text(encoding="utf-8"))
    assert isinstance(clean_document(page, CleanConfig.for_source(source_traits("books"), language="any")),
                      Document)
    assert _preprocess_config("books").min_tokens == 0
    monkeypatch.setattr(books, "TRAITS", SourceTraits(web_text=True, min_tokens=7))
    rejected = clean_document(page, CleanConfig.for_source(source_traits("books"), language="any"))
    assert isinstance(rejected, Reject) and rejected.reason == "too_few_words"  # the web preset's 50
    assert _preprocess_config("books").min_tokens == 7
    assert _preprocess_config("webtext").min_tokens == 128  # webtext's own traits stand


def test_the_task_size_option_follows_the_traits(monkeypatch):
    assert sized_read_options("books", {}, 400_000_000, 2) == {"task_bytes": "50000000"}
    size = TaskSize("book_task_mb", default=100.0, unit=1_000_000, unit_name="MB")
    monkeypatch.setattr(books, "TRAITS", SourceTraits(task_size=size))
    assert sized_read_options("books", {}, 400_000_000, 2) == {"book_task_mb": "50.000000"}
    small = sized_read_options("books", {"book_task_mb": "0.5"}, 400_000_000, 2)
    assert small == {"book_task_mb": "0.500000"}  # the option's bound is never raised
    with pytest.raises(ValueError, match="book_task_mb must be a number of MB, got 'x'"):
        size.bytes({"book_task_mb": "x"})


def test_the_dedup_document_bound_follows_the_traits(monkeypatch):
    size = ALICE.stat().st_size
    lines = count_lines(str(ALICE))
    assert 1 < lines < size * 1.5 // 50  # so that the bounds below are told apart

    def bound(documents: DocumentBound) -> int | None:
        monkeypatch.setattr(books, "TRAITS", SourceTraits(documents=documents))
        return input_documents_bound([InputFile(str(ALICE), size)], "books", {}, 100.0, 50)

    assert bound(DocumentBound.ONE_PER_PLAIN_FILE) == 1
    assert bound(DocumentBound.ONE_PER_PLAIN_LINE) == lines
    assert bound(DocumentBound.TEXT) > size * 100 // 50  # not plain: --max-expansion x its bytes
    assert bound(DocumentBound.ONE_PER_ROW) is None  # a book has no Parquet footer to count
