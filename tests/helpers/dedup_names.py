"""What the unit and the integration tests of dedup_names share."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

from pipelines.sources.books import books
from tests.conftest import REPO

CORPORA = REPO.parent / "shared" / "corpora"
LATIN1_NAME = b"caf\xe9.txt"  # "café.txt" in Latin-1: not UTF-8


def book_text() -> bytes:
    text = (CORPORA / "books" / "11-0.txt").read_text(encoding="utf-8-sig")
    return text[20_000:26_000].encode("utf-8")


def tar_with_member(name: bytes, data: bytes) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT, encoding="latin-1") as tar:
        info = tarfile.TarInfo(name.decode("latin-1"))
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def read_books(directory: Path) -> list:
    return [d for task in books.plan(str(directory), {}) for d in books.read(task)]


def latin1_corpus(directory: Path) -> Path:
    """`directory` holding pages.tar with caf\\xe9.txt, and caf\\xe9.txt itself: the same book text."""
    directory.mkdir()
    text = book_text()
    (directory / "pages.tar").write_bytes(tar_with_member(LATIN1_NAME, text))
    with open(os.fsencode(directory) + b"/" + LATIN1_NAME, "wb") as f:
        f.write(text)
    return directory
