"""The cuts that make cleaning fast change nothing: on every real sample in ../shared/corpora
(books, Wikipedia dumps, WebText, WikiText, the human-checked web articles), ftfy on demand
gives ftfy's text, the vectorised language walk gives py3langid's scores bit for bit, and
clean_document's whole result equals a reference that runs ftfy on everything and py3langid's
own classifier."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import ftfy
import numpy as np
import pytest

from pipelines.clean import CleanConfig, clean_document, language, normalize
from pipelines.document import Document
from pipelines.sources import source_traits
from tests.conftest import REPO

CORPORA = REPO.parent / "shared" / "corpora"


def _wikitext_articles(path: Path) -> list[str]:
    articles: list[str] = []
    current: list[str] = []
    for line in path.read_text("utf-8").splitlines(keepends=True):
        # An article starts at a top-level heading line " = Title = ".
        if line.startswith(" = ") and not line.startswith(" = = ") and current:
            articles.append("".join(current))
            current = []
        current.append(line)
    return articles + ["".join(current)]


@functools.cache
def real_samples() -> tuple[tuple[str, str], ...]:
    """(name, raw text) of every document of the shared corpora, as the sources read them."""
    from pipelines.sources import get_source

    samples = [(p.name, p.read_bytes().decode("utf-8")) for p in sorted(CORPORA.glob("books/*"))]
    samples += [
        (f"webtext/{p.name}", p.read_text("utf-8"))
        for p in sorted(CORPORA.glob("web/text/*/*.txt"))
    ]
    truth = json.loads((CORPORA / "web/html/ground-truth.subset.json").read_text("utf-8"))
    samples += [(f"article/{key}", page["articleBody"]) for key, page in sorted(truth.items())]
    for path in sorted(CORPORA.glob("wikitext/*/wiki.*.tokens")):
        samples += [(f"{path.name}/{i}", t) for i, t in enumerate(_wikitext_articles(path))]
    wikipedia = get_source("wikipedia")
    for task in wikipedia.plan(str(CORPORA / "wikipedia" / "*"), {}):
        samples += [
            (f"wikipedia/{r.id}", r.text) for r in wikipedia.read(task) if isinstance(r, Document)
        ]
    return tuple(samples)


def test_the_samples_cover_every_corpus():
    names = [name for name, _ in real_samples()]
    for prefix in ("webtext/", "article/", "wiki.test.tokens/", "wiki.valid.tokens/", "wikipedia/"):
        assert sum(name.startswith(prefix) for name in names) >= 10, prefix
    assert {"Candide-fr.txt", "2701-0.txt"} <= set(names)
    assert any("elwiki" in name for name in names)


def _mojibake(text: str) -> str:
    """`text`'s UTF-8 read as Windows-1252, the commonest damage ftfy repairs."""
    return text.encode("utf-8").decode("cp1252", errors="replace")


def test_ftfy_on_demand_is_ftfy_on_every_real_sample():
    samples = list(real_samples())
    # The real samples are clean (every one skips ftfy), so their non-ASCII openings are also
    # compared broken, where ftfy does change the text.
    samples += [(f"mojibake/{n}", _mojibake(t[:3000])) for n, t in samples if not t.isascii()]
    changed = 0
    for name, text in samples:
        expected = ftfy.fix_text(text, config=normalize._FTFY_CONFIG)
        assert normalize.repair(text) == expected, name
        changed += expected != text
    assert changed >= 50


@functools.cache
def _plain_py3langid():
    from py3langid.langid import LanguageIdentifier

    return LanguageIdentifier.from_model_file(language.packaged_model(), norm_probs=True)


def test_vectorised_language_walk_gives_py3langid_scores_bit_for_bit():
    fast = language.get_identifier()
    assert type(fast).__name__ == "_VectorIdentifier"  # the packaged model is a verified one
    plain = _plain_py3langid()
    texts = [
        window
        for _, t in real_samples()
        for window in language.language_windows(normalize.normalize_text(t))
    ]
    # Shorter than the synchronising length, empty, featureless, upper case, other scripts.
    texts += ["", "a", "Ab c", "!!!!!!!!", "THE QUICK BROWN FOX", "Ελληνικά", "日本語のテキスト"]
    for text in texts:
        assert np.array_equal(fast._decide(text), plain._decide(text)), text[:80]


@pytest.mark.slow
def test_the_packaged_model_synchronises_after_its_verified_length():
    """The property the vectorised walk rests on (about 6 s)."""
    identifier = language.get_identifier()
    length = language.synchronizing_length(identifier)
    assert length == language.VERIFIED_MODELS[language.model_digest()]


def test_an_unverified_model_is_walked_by_py3langid(monkeypatch):
    monkeypatch.setattr(language, "VERIFIED_MODELS", {})
    assert language.identifier_class().__name__ == "LanguageIdentifier"


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["books", "webtext"])
def test_whole_clean_result_unchanged_on_every_real_sample(monkeypatch, preset):
    config = CleanConfig.for_source(source_traits(preset))
    docs = [Document(name, preset, text) for name, text in real_samples()]
    results = [clean_document(doc, config) for doc in docs]
    # The reference: ftfy on every text, py3langid's own classifier.
    monkeypatch.setattr(normalize, "needs_ftfy", lambda text: True)
    monkeypatch.setattr(language, "get_identifier", _plain_py3langid)
    reference = [clean_document(doc, config) for doc in docs]
    assert results == reference
    kept = sum(isinstance(r, Document) for r in results)
    assert 100 < kept < len(docs) - 100  # both outcomes compared, many times each
