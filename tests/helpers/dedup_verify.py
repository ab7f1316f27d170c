"""What the unit and the integration tests of dedup_verify share."""

from __future__ import annotations

from pipelines.dedup.shingles import jaccard, shingle_set
from pipelines.document import Document
from tests.shard_fixtures import book_paragraphs


def planted_documents() -> dict[str, Document]:
    """Moby-Dick paragraphs: a, an edit of a with a few words changed (a near duplicate), a
    second edit of a with half of it rewritten (not one), b, and c, unrelated to either."""
    a, b, c = book_paragraphs()[10], book_paragraphs()[20], book_paragraphs()[30]
    words = a.split()
    near = " ".join("harpoon" if i == len(words) // 2 else w for i, w in enumerate(words))
    far = " ".join(words[: len(words) // 2] + c.split()[: len(words) // 2])
    texts = {"books:a": a, "books:a-near": near, "books:a-far": far, "books:b": b, "books:c": c}
    return {i: Document(id=i, source="books", text=t) for i, t in texts.items()}


def node(doc_id: str) -> tuple[int, str]:
    return (0, doc_id)  # no source priority: every source ranks 0


def similarity(docs, x: str, y: str) -> float:
    return jaccard(shingle_set(docs[x].text), shingle_set(docs[y].text))
