"""Languages identified a batch at a time (identify_languages, classify_many, clean_documents,
the clean stage's batches) give each document the label and probability it gets alone, on the
real text of ../shared/corpora: the dumps' articles, the books whole (windows, and the whole
text where they disagree or come near the threshold) and in paragraphs, the web pages' article
text and WebText; and a document that raises costs its batch nothing else (through the
clean stage's Beam transform: tests/integration/test_language_batch.py)."""

from __future__ import annotations

import functools
import json
import re

import numpy as np
import pytest

from pipelines.clean import CleanConfig, clean_document, clean_documents, language, language_batch
from pipelines.clean.normalize import normalize_text
from pipelines.document import Document, Reject
from pipelines.sources import source_traits
from tests.conftest import CORPORA
from tests.helpers.language_batch import BROKEN, break_one, dump_articles, failure_docs

BOOKS = sorted((CORPORA / "books").glob("*.txt")) + sorted(
    (CORPORA / "books-apparatus").glob("*.txt")
)


def _web_pages() -> list[str]:
    pages = []
    for folder in ("html", "aeb-dev"):
        truth = CORPORA / "web" / folder / "ground-truth.subset.json"
        pages += [page["articleBody"] for page in json.loads(truth.read_text("utf-8")).values()]
    pages += [path.read_text("utf-8") for path in sorted(CORPORA.glob("web/text/*/*.txt"))]
    return pages


def _paragraphs(text: str, limit: int) -> list[str]:
    """Up to `limit` paragraphs of at least 200 characters, spread over `text`."""
    found = [p for p in re.split(r"\n\s*\n", text) if len(p) >= 200]
    return found[:: max(1, len(found) // limit)][:limit]


@functools.cache
def real_texts() -> tuple[str, ...]:
    """Normalised as clean_document classifies them: every dump article and web page, every
    book whole and ~40 of its paragraphs."""
    books = [path.read_text("utf-8-sig") for path in BOOKS]
    raw = [doc.text for doc in dump_articles()] + _web_pages() + books
    raw += [paragraph for book in books for paragraph in _paragraphs(book, 40)]
    return tuple(text for text in map(normalize_text, raw) if text.strip())


def test_batched_labels_are_the_one_by_one_labels_on_every_shared_text():
    texts = list(real_texts())
    alone = [language.identify_language(text) for text in texts]
    assert language.identify_languages(texts) == alone  # labels and probabilities, exactly
    labels = {label for label, _ in alone}
    assert {"en", "fr", "el", "de"} <= labels  # several languages, each many times or once
    windowed = [text for text in texts if len(language.language_windows(text)) == 3]
    assert len(windowed) >= 100  # the long documents' window rule is in the comparison


def test_near_the_threshold_and_where_windows_disagree_the_whole_text_decides(monkeypatch):
    texts = [normalize_text(path.read_text("utf-8-sig")) for path in BOOKS]
    whole = type(language.get_identifier()).classify
    sent: list[str] = []

    def spy(self, text):
        sent.append(text)
        return whole(self, text)

    monkeypatch.setattr(type(language.get_identifier()), "classify", spy)
    for threshold in (0.65, 0.95, 0.999):
        sent.clear()
        batched = language.identify_languages(texts, threshold)
        whole_texts = [text for text in texts if text in sent]
        # Candide (English licence at both ends) always; more books near a higher threshold
        assert any("Candide" in text[:2000] for text in whole_texts), threshold
        assert batched == [language.identify_language(text, threshold) for text in texts]
        if threshold == 0.999:
            assert len(whole_texts) >= 3


def test_classify_many_gives_py3langid_own_scores_bit_for_bit():
    from py3langid.langid import LanguageIdentifier

    plain = LanguageIdentifier.from_model_file(language.packaged_model(), norm_probs=True)
    ours = language.get_identifier()
    windows = [w for text in real_texts()[::7] for w in language.language_windows(text)]
    # empty, shorter than the walk's 6 bytes, featureless, upper case, other scripts, mixed
    # with real text in one chunk
    edge = ["", "a", "Ab c", "!!!!!!!!", "THE QUICK BROWN FOX", "Ελληνικά", "日本語のテキスト"]
    texts = edge + windows[:600]
    assert ours.classify_many(texts) == [plain.classify(text) for text in texts]
    encoded = [ours._encode(text) for text in texts]
    raw = ours._raw_scores(encoded)
    expected = np.stack([plain._decide(text) for text in texts])
    assert np.array_equal(ours._normalised(raw, [len(e) for e in encoded]), expected)


def test_any_chunking_gives_the_same_scores(monkeypatch):
    texts = [w for text in real_texts()[::11] for w in language.language_windows(text)][:400]
    ours = language.get_identifier()
    whole = ours.classify_many(texts)
    monkeypatch.setattr(language_batch, "CHUNK_BYTES", 3000)  # chunks of one to a few texts
    assert ours.classify_many(texts) == whole == [ours.classify(text) for text in texts]


def test_chunks_are_bounded_and_cover_every_text_once():
    lengths = [len(text.encode()) for text in real_texts()[:300]]
    chunks = language_batch.length_chunks(lengths, 50_000)
    assert sorted(i for chunk in chunks for i in chunk) == list(range(len(lengths)))
    for chunk in chunks:
        longest = max(lengths[i] for i in chunk)
        assert len(chunk) * longest <= 50_000 or len(chunk) == 1
    assert any(len(chunk) > 1 for chunk in chunks) and any(
        len(chunk) == 1 and lengths[chunk[0]] > 50_000 for chunk in chunks
    )


@pytest.mark.parametrize(
    "config",
    [
        CleanConfig(),
        CleanConfig(language="en,fr"),
        CleanConfig.for_source(source_traits("webtext")),
        CleanConfig.for_run(source_traits("wikipedia"), None),  # each article held to its dump's language
        CleanConfig(language="any"),
    ],
    ids=["default", "en-fr", "web-preset", "dump-language", "any"],
)
def test_clean_documents_is_clean_document_on_real_documents(config):
    books = [Document(path.name, "books", path.read_text("utf-8-sig")) for path in BOOKS]
    pages = [Document(f"web:{i}", "webtext", text) for i, text in enumerate(_web_pages())]
    docs = list(dump_articles()[::3]) + pages + books
    expected = [clean_document(doc, config) for doc in docs]
    assert clean_documents(docs, config) == expected
    reasons = {r.reason for r in expected if isinstance(r, Reject)}
    assert ("language" in reasons) == (config.language != "any")
    assert any(isinstance(r, Document) for r in expected)


def test_a_document_that_raises_costs_its_batch_nothing_else(monkeypatch):
    docs = failure_docs()
    config = CleanConfig()
    expected = [clean_document(doc, config) for doc in docs]
    assert {type(r) for r in expected} == {Document, Reject}
    victim = break_one(monkeypatch, docs)
    results = clean_documents(docs, config)
    for doc, result, alone in zip(docs, results, expected):
        if doc is victim:
            assert isinstance(result, ValueError) and str(result) == BROKEN
        else:
            assert result == alone


def test_an_identification_that_raises_costs_only_its_document(monkeypatch):
    docs = failure_docs()
    config = CleanConfig()
    expected = [clean_document(doc, config) for doc in docs]
    # a document classified whole (no windows) that gets as far as its language
    at = next(
        i
        for i, doc in enumerate(docs)
        if 1000 < len(normalize_text(doc.text)) <= 3 * language.WINDOW_CHARS
    )
    marker = normalize_text(docs[at].text)
    real = language.get_identifier()

    class Failing:
        def classify_many(self, texts):
            if marker in texts:
                raise RuntimeError("identifier failed")
            return real.classify_many(texts)

        def classify(self, text):
            if text == marker:
                raise RuntimeError("identifier failed")
            return real.classify(text)

    monkeypatch.setattr(language, "get_identifier", Failing)
    results = clean_documents(docs, config)
    assert isinstance(results[at], RuntimeError)
    assert results[:at] + results[at + 1 :] == expected[:at] + expected[at + 1 :]
