"""The planted corpus of the dedup tests: real books, WebText and WikiText-103 articles, with
copies planted in it (exact, same URL, lightly edited, shuffled, a chain of edits, Wikipedia in
web text) and the documents that dedup must remove, with why and which one it keeps."""

from __future__ import annotations

import dataclasses
import random
import re

from pipelines.document import Document
from tests.conftest import CORPORA


def paragraphs_of_book(name: str) -> list[str]:
    text = (CORPORA / "books" / name).read_text(encoding="utf-8-sig").replace("\r\n", "\n")
    return [p.strip() for p in re.split(r"\n\s*\n", text) if len(p.split()) >= 25]


def wikitext_articles(count: int) -> list[tuple[str, str]]:
    """(title, prose) of the first WikiText-103 validation articles: real Wikipedia text."""
    articles, title, body = [], None, []
    for line in (CORPORA / "wikitext" / "wikitext-103" / "wiki.valid.tokens").open(
        encoding="utf-8"
    ):
        heading = re.fullmatch(r" = ([^=].*[^=]) = \n", line)
        if heading:
            if title and body:
                articles.append((title, "\n\n".join(body)))
            title, body = heading.group(1), []
        elif line.strip() and not line.strip().startswith("="):
            text = line.strip().replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", ".")
            body.append(re.sub(r" ([.,;:!?')])", r"\1", text))
        if len(articles) == count:
            break
    return articles


def edit_words(text: str, fraction: float, seed: int) -> str:
    """Replace a fraction of the words, leaving everything else as it was: a lightly edited copy."""
    rng = random.Random(seed)
    substitutes = ["indeed", "however", "quite", "also", "very", "said"]
    return re.sub(
        r"\w+", lambda m: rng.choice(substitutes) if rng.random() < fraction else m.group(0), text
    )


def shuffle_paragraphs(text: str, seed: int) -> str:
    paragraphs = text.split("\n\n")
    random.Random(seed).shuffle(paragraphs)
    return "\n\n".join(paragraphs)


@dataclasses.dataclass
class PlantedCorpus:
    docs: list[Document]
    removed: dict[str, tuple[str, str]]  # removed id -> (reason, kept id)


def planted_corpus() -> PlantedCorpus:
    moby, alice = paragraphs_of_book("2701-0.txt"), paragraphs_of_book("11-0.txt")
    docs = [
        Document(f"books:moby:{i:03d}", "books", "\n\n".join(moby[120 + 6 * i : 126 + 6 * i]))
        for i in range(24)
    ]
    docs += [
        Document(f"books:alice:{i:03d}", "books", "\n\n".join(alice[5 * i : 5 * i + 5]))
        for i in range(10)
    ]
    webtext = sorted(
        (CORPORA / "web" / "text" / "webtext_train_10").glob("*.txt"), key=lambda p: int(p.stem)
    )
    docs += [
        Document(
            f"webtext:{p.stem}",
            "webtext",
            p.read_text(encoding="utf-8"),
            url=f"http://news.example.com/story/{p.stem}",
        )
        for p in webtext
    ]
    articles = wikitext_articles(6)
    docs += [
        Document(f"wikipedia:enwiki:{i}", "wikipedia", body, title=title)
        for i, (title, body) in enumerate(articles)
    ]
    by_id = {d.id: d for d in docs}
    removed = {}

    def plant(doc: Document, reason: str, kept: str) -> None:
        docs.append(doc)
        removed[doc.id] = (reason, kept)

    # Exact copy: other case and whitespace, another URL.
    text = by_id["webtext:4"].text
    plant(
        Document(
            "webtext:4-mirror",
            "webtext",
            "  " + text.upper().replace(" ", "  ") + "\n",
            url="http://mirror.example.net/4",
        ),
        "exact_duplicate",
        "webtext:4",
    )
    # The same page crawled twice: same URL in another spelling, the text since edited.
    page = by_id["webtext:6"]
    plant(
        Document(
            "webtext:6-recrawl",
            "webtext",
            page.text.rsplit("\n", 2)[0] + "\nUpdated.",
            url="https://www.news.example.com/story/6/?utm_source=rss",
        ),
        "url_duplicate",
        "webtext:6",
    )
    # Light edits: 1% of the words replaced.
    plant(
        Document(
            "books:moby:003-edited", "books", edit_words(by_id["books:moby:003"].text, 0.01, 1)
        ),
        "near_duplicate",
        "books:moby:003",
    )
    # Shuffled paragraphs.
    plant(
        Document(
            "books:alice:002-shuffled",
            "books",
            shuffle_paragraphs(by_id["books:alice:002"].text, 2),
        ),
        "near_duplicate",
        "books:alice:002",
    )
    # A chain of edits: each copy is a near-duplicate of the previous one.
    first = Document(
        "books:moby:010-copy1", "books", edit_words(by_id["books:moby:010"].text, 0.015, 3)
    )
    plant(first, "near_duplicate", "books:moby:010")
    plant(
        Document("books:moby:010-copy2", "books", edit_words(first.text, 0.015, 4)),
        "near_duplicate",
        "books:moby:010",
    )
    # Wikipedia copied into web text, with the page's own header and footer around it.
    wiki = by_id["wikipedia:enwiki:2"]
    plant(
        Document(
            "webtext:wiki-copy",
            "webtext",
            f"{wiki.title} - Encyclopedia\n\n{wiki.text}\n\nShare this page.",
            url="http://copies.example.org/wiki",
        ),
        "near_duplicate",
        "webtext:wiki-copy",
    )
    removed["wikipedia:enwiki:2"] = removed.pop("webtext:wiki-copy")[0], "webtext:wiki-copy"
    # Heavily edited (about half the shingles differ): similar, but not a duplicate.
    docs.append(
        Document(
            "books:moby:020-rewritten", "books", edit_words(by_id["books:moby:020"].text, 0.06, 5)
        )
    )
    return PlantedCorpus(docs, removed)
