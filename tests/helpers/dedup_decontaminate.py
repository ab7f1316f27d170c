"""What the unit and the integration tests of dedup_decontaminate share."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import REPO

CORPORA = REPO.parent / "shared" / "corpora"
WIKITEXT_103_VALID = CORPORA / "wikitext" / "wikitext-103" / "wiki.valid.tokens"


def detokenize(line: str) -> str:
    """WikiText's tokenised form back to ordinary prose (how the article reads on the web)."""
    text = line.strip().replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", ".")
    return re.sub(r" ([.,;:!?')])", r"\1", text).replace("( ", "(")


def wikitext_paragraphs(path: Path) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line for line in lines if len(line.split()) > 80 and not line.strip().startswith("=")]


def book_paragraphs() -> list[str]:
    text = (CORPORA / "books" / "2701-0.txt").read_text(encoding="utf-8")
    return [p.strip() for p in re.split(r"\n\s*\n", text) if len(p) > 400]
