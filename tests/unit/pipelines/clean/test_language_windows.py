"""A long document's language from three windows, the whole text where they disagree or come
near the threshold: on real shared documents the label is the whole text's."""

from __future__ import annotations

import json

import pytest

from pipelines.clean import CleanConfig, clean_document, language
from pipelines.clean.normalize import normalize_text
from pipelines.document import Document
from pipelines.sources import source_traits
from tests.conftest import REPO
from tests.helpers.wikipedia_dumps import greek_wiki_paragraphs

CORPORA = REPO.parent / "shared" / "corpora"
BOOKS = CORPORA / "books"


def _book(name: str) -> str:
    return normalize_text((BOOKS / name).read_text("utf-8-sig"))


def _german_web_article() -> str:
    truth = json.loads((CORPORA / "web" / "html" / "ground-truth.subset.json").read_text("utf-8"))
    return normalize_text(truth[next(k for k in truth if k.startswith("57b4dafd"))]["articleBody"])


@pytest.fixture
def classified(monkeypatch):
    """The texts the identifier classifies, in order."""
    identifier = language.get_identifier()
    seen: list[str] = []
    plain = type(identifier).classify

    def spy(self, text):
        seen.append(text)
        return plain(self, text)

    monkeypatch.setattr(type(identifier), "classify", spy)
    return identifier, seen


def test_the_windowed_label_is_the_whole_texts_on_long_real_documents(classified):
    identifier, seen = classified
    texts = {
        "en": _book("2701-0.txt"),
        "fr": _book("Candide-fr.txt"),  # an English licence at both ends
        "el": normalize_text("\n\n".join(greek_wiki_paragraphs(24))),
        "de": _german_web_article(),
        "en-verse": _book("tinyshakespeare-input.txt"),
    }
    for name, text in texts.items():
        assert len(language.language_windows(text)) == 3, name  # long enough for windows
        whole = identifier.classify(text)[0]
        seen.clear()
        assert language.identify_language(text)[0] == whole == name[:2], name
        # Moby-Dick is decided on its windows alone; Candide needs its whole text
        if name == "en":
            assert all(len(part) <= language.WINDOW_CHARS for part in seen)
        if name == "fr":
            assert seen[-1] == text


def test_windows_that_disagree_send_the_whole_text(classified):
    # English at the start and the end, French (Candide's body) in between, most of the text
    identifier, seen = classified
    english, french = _book("2701-0.txt"), _book("Candide-fr.txt")
    text = english[20000:24000] + french[30000:80000] + english[60000:64000]
    windows = language.language_windows(text)
    assert [identifier.classify(w)[0] for w in windows] == ["en", "fr", "en"]
    seen.clear()
    assert language.identify_language(text)[0] == "fr"
    assert seen[:3] == windows and seen[3:] == [text]


def test_windows_near_the_threshold_send_the_whole_text(classified):
    identifier, seen = classified
    text = _book("46-0.txt")
    windows = language.language_windows(text)
    probabilities = [identifier.classify(w)[1] for w in windows]
    assert min(probabilities) < 1.0  # so a threshold just under 1 puts a window near it
    seen.clear()
    language.identify_language(text, threshold=0.65)
    assert seen == windows  # clear of the default threshold: windows alone
    seen.clear()
    label, probability = language.identify_language(text, threshold=0.95)
    assert seen[-1] == text and (label, probability) == identifier.classify(text)


def test_every_english_book_is_kept_at_the_default():
    books = [p for p in BOOKS.glob("*.txt") if "-fr" not in p.name]
    books += list((CORPORA / "books-apparatus").glob("*.txt"))
    assert len(books) >= 9
    for path in books:
        doc = Document(f"books:{path.name}", "books", path.read_text("utf-8-sig"))
        kept = clean_document(doc, CleanConfig.for_source(source_traits("books")))
        assert isinstance(kept, Document), (path.name, kept)
        assert kept.meta["language"] == "en"


def test_a_short_document_is_classified_whole(classified):
    _, seen = classified
    text = _book("1952-0.txt")[5000 : 5000 + 3 * language.WINDOW_CHARS]
    assert language.identify_language(text)[0] == "en"
    assert seen == [text]
