"""What the unit and the integration tests of dedup_minhash share."""

from __future__ import annotations

from tests.conftest import REPO

CORPORA = REPO.parent / "shared" / "corpora"
BOOKS = CORPORA / "books"


def book(name: str) -> str:
    return (BOOKS / name).read_text(encoding="utf-8-sig")
