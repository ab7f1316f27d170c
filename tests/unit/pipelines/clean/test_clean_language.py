from __future__ import annotations

import re

import pytest

from pipelines.clean import CleanConfig, clean_document
from pipelines.clean.language import WINDOW_CHARS, identify_language, language_windows
from pipelines.document import Document, Reject
from pipelines.sources import source_traits
from tests.conftest import REPO
from tests.helpers.wikipedia_dumps import greek_wiki_paragraphs

CORPORA = REPO.parent / "shared" / "corpora"
BOOKS = CORPORA / "books"


def _book(name: str) -> Document:
    return Document(f"books:{name}", "books", (BOOKS / name).read_text("utf-8"))


def test_french_book_rejected_under_english_kept_under_french_or_any():
    candide = _book("Candide-fr.txt")
    # Its Project Gutenberg header and licence are English: the windows disagree and the
    # whole text decides.
    assert identify_language(candide.text[:WINDOW_CHARS])[0] == "en"
    rejected = clean_document(candide, CleanConfig())
    assert isinstance(rejected, Reject)
    assert rejected.reason == "language" and rejected.detail.startswith("fr ")
    assert rejected.doc_id == candide.id and rejected.text  # kept for the audit file

    for language in ("fr", ("en", "fr"), "en,fr"):
        kept = clean_document(candide, CleanConfig(language=language))
        assert isinstance(kept, Document), language
        assert kept.meta["language"] == "fr"
        # its probability, as the drop detail gives it, travels to the metadata sidecar
        dropped_at = float(re.search(r"p=([0-9.]+[0-9])", rejected.detail).group(1))
        assert abs(float(kept.meta["language_score"]) - dropped_at) <= 0.0005
    anything = clean_document(candide, CleanConfig(language="any"))
    assert isinstance(anything, Document) and "language" not in anything.meta
    assert "language_score" not in anything.meta


def test_english_books_kept_with_their_language():
    for name in ("2701-0.txt", "11-0.txt", "pg1080.txt"):
        kept = clean_document(_book(name), CleanConfig.for_source(source_traits("books")))
        assert isinstance(kept, Document), name
        assert kept.meta["language"] == "en"


def test_greek_wikipedia_paragraphs():
    paragraphs = greek_wiki_paragraphs()
    assert len(paragraphs) == 8
    for paragraph in paragraphs:
        assert identify_language(paragraph)[0] == "el", paragraph[:80]
    doc = Document("wikipedia:elwiki:test", "wikipedia", "\n\n".join(paragraphs))
    assert clean_document(doc, CleanConfig.for_source(source_traits("wikipedia"))).reason == "language"
    kept = clean_document(doc, CleanConfig.for_source(source_traits("wikipedia"), language="el"))
    assert isinstance(kept, Document) and kept.meta["language"] == "el"
    # Normalisation leaves clean Greek text alone, apart from making its NBSPs plain spaces.
    assert "\xa0" in doc.text
    assert kept.text == doc.text.replace("\xa0", " ")


def test_confidence_threshold():
    mixed = Document("jsonl:mixed:1", "jsonl", "Le chat est sur la table. The cat is on the table.")
    language, confidence = identify_language(mixed.text)
    assert language == "fr" and 0.3 < confidence < 0.9
    strict = CleanConfig(language="fr", min_words=0, min_chars=0, language_threshold=0.95)
    assert clean_document(mixed, strict).reason == "language"
    lenient = CleanConfig(language="fr", min_words=0, min_chars=0, language_threshold=0.3)
    assert isinstance(clean_document(mixed, lenient), Document)


def test_long_documents_are_first_classified_on_three_bounded_windows():
    text = (BOOKS / "2701-0.txt").read_text("utf-8")
    head, middle, end = language_windows(text)
    assert all(0 < len(window) <= WINDOW_CHARS for window in (head, middle, end))
    assert text.startswith(head) and middle in text and text.endswith(end)
    assert len(text) // 3 < text.index(middle) < 2 * len(text) // 3  # from the middle
    short = "A short text."
    assert language_windows(short) == [short]


def test_unknown_language_code_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown language code.*'english'"):
        CleanConfig(language="english")
    with pytest.raises(ValueError, match="empty"):
        CleanConfig(language=",")


@pytest.fixture
def fresh_model_cache(monkeypatch, tmp_path):
    """The language model loaded anew, with the cache directory under tmp_path."""
    from pipelines.clean import language

    monkeypatch.setenv(language.CACHE_ENV, str(tmp_path / "cache"))
    cached = (language.decompressed_model, language.load_identifier, language.supported_languages)
    for function in cached:
        function.cache_clear()
    yield language, tmp_path / "cache"
    for function in cached:
        function.cache_clear()


def test_the_cached_model_classifies_as_the_packaged_one(fresh_model_cache):
    # Real text in four scripts: Greek Wikipedia, an English, a French and a German book.
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    language, cache = fresh_model_cache
    packaged = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    texts = greek_wiki_paragraphs(3) + [
        window
        for name in sorted(p.name for p in BOOKS.glob("*.txt"))
        for window in language_windows(_book(name).text)
    ]
    assert language.supported_languages() == tuple(packaged.labels)
    cached = language.load_identifier()
    assert list(cache.rglob("py3langid-*/ptc32.npy")), "the decompressed model was not cached"
    assert cached._ptc32.base is not None  # mapped from the cache, not read into memory
    for text in texts:
        assert cached.classify(text) == packaged.classify(text)
    assert {cached.classify(t)[0] for t in texts} >= {"el", "en"}


def test_an_unwritable_cache_falls_back_to_the_packaged_model(fresh_model_cache):
    language, cache = fresh_model_cache
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text("a file where the cache directory should be")
    assert language.decompressed_model() is None
    assert "en" in language.supported_languages()
    assert identify_language("This is plainly a sentence written in English.")[0] == "en"


def _corrupt_zeroed_ptc32(directory):
    import numpy as np

    table = np.load(directory / "ptc32.npy", mmap_mode="r")
    np.save(directory / "ptc32.npy", np.zeros(table.shape, table.dtype))


def _corrupt_reversed_classes(directory):
    import numpy as np

    classes = np.load(directory / "classes.npy")
    np.save(directory / "classes.npy", classes[::-1].copy())


@pytest.mark.parametrize("corrupt", [_corrupt_zeroed_ptc32, _corrupt_reversed_classes])
def test_a_cache_changed_after_it_was_built_is_rebuilt(fresh_model_cache, caplog, corrupt):
    """Issue 27.2: an array of the cached model overwritten with one of the same shape and dtype
    (zeros; the class list reversed) used to classify every document wrongly; the content
    digest written when the cache was built finds it, and the cache is rebuilt with one line."""
    language, cache = fresh_model_cache
    english = "It was the best of times, it was the worst of times, it was the age of wisdom."
    greek = greek_wiki_paragraphs(1)[0]
    directory = language.decompressed_model()
    assert language.cache_mismatch(directory) is None
    corrupt(directory)
    assert "changed since it was built" in language.cache_mismatch(directory)
    for function in (language.decompressed_model, language.load_identifier,
                     language.supported_languages):
        function.cache_clear()
    with caplog.at_level("WARNING", logger=language.__name__):
        assert identify_language(english)[0] == "en"
        assert identify_language(greek)[0] == "el"
    (line,) = [r.getMessage() for r in caplog.records if "rebuilding" in r.getMessage()]
    assert str(directory) in line and "changed since it was built" in line
    assert language.cache_mismatch(directory) is None
    assert [p.name for p in directory.parent.iterdir()] == [directory.name]


def test_a_cache_without_its_digest_is_rebuilt(fresh_model_cache):
    language, _ = fresh_model_cache
    directory = language.decompressed_model()
    (directory / "content.sha256").unlink()
    assert language.cache_mismatch(directory).startswith("no content digest")
    language.decompressed_model.cache_clear()
    assert language.decompressed_model() == directory
    assert language.cache_mismatch(directory) is None
