"""Illustration captions of every kind, on the illustrated Pride and Prejudice: its 160-odd real
caption blocks set under the other words transcribers use ("[Picture: ...]", "[Image: ...]",
"[Ilustración: ...]", "[Gravure: ...]") go as "[Illustration: ...]" does; a plate's label or
credit set apart in italics or brackets goes; an unmarked line of the work that opens the same
way stays."""

from __future__ import annotations

import re

import pytest

from pipelines.sources.books.books import PARTS_REMOVED, PARTS_REMOVED_TEXT, book_document
from tests.conftest import CORPORA

PRIDE = CORPORA / "books-apparatus" / "1342-0.txt"


def _document(text: str):
    (document,) = book_document(text.encode("utf-8"), PRIDE.name, str(PRIDE))
    return document


def _count(document, kind: str) -> int:
    found = re.search(rf"\b{kind} (\d+)", document.meta.get(PARTS_REMOVED, ""))
    return int(found.group(1)) if found else 0


def _paragraphs(text: str) -> list[str]:
    return [p.strip("\n") for p in re.split(r"\n\s*\n", text) if p.strip()]


@pytest.fixture(scope="module")
def original() -> tuple[str, object]:
    text = PRIDE.read_text(encoding="utf-8-sig")
    return text, _document(text)


@pytest.mark.parametrize("word", ["Picture", "Image", "Ilustración", "Gravure", "Abbildung"])
def test_caption_blocks_under_other_words_go(original, word):
    text, plain = original
    assert text.count("[Illustration") > 150
    renamed = _document(text.replace("[Illustration", f"[{word}"))
    assert f"[{word}" not in renamed.text
    assert renamed.text == plain.text
    assert _count(renamed, "illustrations") == _count(plain, "illustrations")


def test_a_plates_label_and_credit_set_apart_go_and_a_line_of_the_work_stays(original):
    text, plain = original
    at = text.index("Chapter I.]")
    at = text.index("\n\n", at)
    labels = "_Frontispiece_\n\n[_From a drawing by Hugh Thomson._]\n\n_Plate IV. The Harbour_"
    work = "Drawn by the noise, he came down."
    set_in = _document(f"{text[:at]}\n\n{labels}\n\n{work}{text[at:]}")
    for label in ("Frontispiece", "From a drawing by Hugh Thomson", "Plate IV"):
        assert label not in set_in.text
        assert label in set_in.meta[PARTS_REMOVED_TEXT]
    assert f"\n{work}\n" in set_in.text
    without_work = set_in.text.replace(f"{work}\n", "", 1)
    assert _paragraphs(without_work) == _paragraphs(plain.text)
    assert _count(set_in, "illustrations") == _count(plain, "illustrations") + 1
    assert "\nChapter I.\n\nIt is a truth universally acknowledged" in plain.text
