"""A book's apparatus recognised by what it is, wherever it stands: pure functions over the
text `book_back_matter.strip_back_matter` leaves, cut and counted by kind on top of its counts.

`strip_apparatus(front)` removes:

- contents / illustrations: a list of entries with page numbers wherever it stands, whether or
  not its heading was seen (a "List of Illustrations" whose heading is an illustration block):
  a run of paragraphs every line of which is an entry ("Frontispiece ........ iv", "Mr. and
  Mrs. Bennet      5"), _ENTRY_RUN_MIN entries or more, their page numbers in the book's
  order (roman before arabic, never going back), with a "PAGE" column heading above or inside
  it or dot leaders on half its entries. A list that names a frontispiece, a plate or an illustration is a list of illustrations,
  any other a table of contents. A table in the work (prices, distances) is not in page order;
- advertisements: the publisher's advertisements after the work: from the section where they
  start (after a break of _SECTION_BREAK blank lines or a "THE END") to the end of the book,
  when the book's last part holds at least two advertisement marks, paragraphs of their own
  that are not prose (a price, "Crown 8vo, cloth", a "By the same author" or "Important new
  books" heading, a publisher's imprint set in capitals), one of them a price or such a
  heading, with at most _ADVERT_GAP paragraphs
  between one mark and the next and after the last;
- figures: a drawing made of characters (an ASCII floor plan, a box diagram): a paragraph of
  _FIGURE_MIN_LINES lines or more, most of whose characters are box or punctuation marks;
- illustrations: a plate's label or credit standing as a paragraph of its own, set in italics
  or in brackets ("_Frontispiece_", "_Plate IV. The Harbour_", "[_From a photograph by
  Elliott & Fry._]", "_Drawn by Hugh Thomson_"): one or two short lines that open on such a
  label (an unmarked line, "Drawn by the noise, he came down.", is the work);
- imprint: a printer's colophon wherever it stands ("_Printed in Great Britain by Hazell,
  Watson & Viney, Ld., London_" above the author's footnotes): a paragraph of a few lines that
  opens on "Printed in/by/at";
- title_page: a half-title, the book's title set again on a line of its own right above its
  first chapter ("THE GERMAN FURY IN BELGIUM" over "CHAPTER I", after the preface and the
  introduction), when the book names its title (the Project Gutenberg `Title:` field, of
  which the line is the whole or the first words);
- layout_markup: the transcriber's layout marks around a line of the work ("/* NIND “My dear
  friend, */", "/* RIGHT “Hunsford, ... _15th October_. */"): the marks go, the line stays.

A short line inside the work (a signature, a dateline, a chapter title) is none of these: each
rule asks for a run of entries, marks of a publisher, or a drawing.
"""

from __future__ import annotations

import re

from pipelines.sources.books.book_front_matter import (
    FrontMatter,
    is_chapter_heading,
    is_imprint,
    is_prose,
)
from pipelines.sources.books.book_text import cut_paragraphs, paragraphs

# An entry line: its title, then dot leaders or a run of spaces, then a page number.
_ENTRY_LINE = re.compile(r"^\s*(\S.*?\w.*?)(?:\s*\.{2,}\s*|\s{2,})(\d{1,4}|[ivxlc]{1,7})\s*$")
_LEADERS = re.compile(r"\.{3,}\s*\S+\s*$")
_PAGE_COLUMN = re.compile(r"^\s*(?:page|pages|p\.|pp\.|seite|pag\.)\s*$", re.IGNORECASE)
_ILLUSTRATION_WORDS = re.compile(r"\b(?:frontispiece|plate|illustrations?|tailpiece)\b", re.I)
_ENTRY_RUN_MIN = 5
_ROMAN = {"i": 1, "v": 5, "x": 10, "l": 50, "c": 100}

_PRICE = re.compile(
    r"\b\d+\s*s\.\s*(?:\d+\s*d\.\s*)?net\b|\b\d+/-\s*net\b|\b\d+/\d+\s*net\b|\bprice\b[^\n]*\d"
    r"|\$\d+(?:\.\d\d)?\b[^\n]{0,12}\bnet\b|\b(?:crown|demy|royal|foolscap|post)\s+\d*(?:vo|to)\b",
    re.IGNORECASE,
)
_ADVERT_HEADING = re.compile(
    r"^\W*(?:by\s+the\s+same\s+author|(?:other\s+)?(?:books|works|novels)\s+by\b|also\s+by\b"
    r"|uniform\s+with\s+this|(?:some\s+)?(?:important\s+|new\s+)(?:[\w-]+\s+)?(?:books|novels"
    r"|fiction)\b|publishers?[’'`]?s?\s+announcements?)",
    re.IGNORECASE,
)
_THE_END = re.compile(r"^\W*(?:the\s+end|finis|fin)\W*$", re.IGNORECASE)
# Advertisements stand in the book's last part; marks are at most this many paragraphs apart.
_ADVERT_SHARE = 0.25
_ADVERT_GAP = 12
_SECTION_BREAK = 3

_COLOPHON = re.compile(r"^[\W_]*printed\s+(?:in|by|at)\b", re.IGNORECASE)
_COLOPHON_LINES = 3
# "/* NIND text */", "/* RIGHT text */", "/*" and "*/" on lines of their own (a no-wrap block).
_LAYOUT_MARK = re.compile(
    r"^([ \t]*)/\*(?:[ \t]*[A-Z]{2,}\b)?[ \t]?(.*?)[ \t]*\*/[ \t]*$|^[ \t]*(?:/\*|\*/)[ \t]*$",
    re.MULTILINE,
)
_FIGURE_CHARACTERS = frozenset("-|+=_*#/\\<>[](){}.:;,'`~^oO" + "─│┌┐└┘├┤┬┴┼═║")
_FIGURE_MIN_LINES = 3
_FIGURE_SHARE = 0.6
_WORDS = re.compile(r"\w+")
# A paragraph wholly in italics or in brackets, and the plate label or credit it opens on.
_SET_APART = re.compile(r"^[ \t]*(?:_([^_]+)_|\[_?([^\[\]_]+)_?\])\.?[ \t]*$")
_CAPTION_WORDS = re.compile(
    r"^\W*(?:frontispiece|plate\s+[ivxlc\d]+|fig(?:ure|\.)\s*\d+|vignette|tailpiece|headpiece"
    r"|(?:from|after)\s+(?:a|an|the)\s+(?:photograph|painting|drawing|engraving|portrait|sketch"
    r"|etching|print|miniature)|(?:photo(?:graph)?|engraved|drawn|painted|etched)\s+by)\b",
    re.IGNORECASE,
)
_CAPTION_LINES = 2
# A half-title names at least this many of the title's first words ("The German Fury").
_HALF_TITLE_MIN_WORDS = 2


def _page_order(number: str) -> int:
    """A page number's place in the book: roman (front matter) before arabic."""
    if number.isdigit():
        return 10_000 + int(number)
    values = [_ROMAN[c] for c in number.lower()]
    return sum(-v if i + 1 < len(values) and v < values[i + 1] else v for i, v in enumerate(values))


def _entry_pages(paragraph: str) -> list[int] | None:
    """The page of each entry line of `paragraph`, or None when a line is not an entry (a
    "PAGE" column heading counts for nothing)."""
    pages = []
    for line in paragraph.split("\n"):
        if not line.strip() or _PAGE_COLUMN.match(line):
            continue
        entry = _ENTRY_LINE.match(line)
        if not entry:
            return None
        pages.append(_page_order(entry.group(2)))
    return pages


def _entry_runs(text: str, spans: list[tuple[int, int]]) -> dict[int, str]:
    """Paragraph index -> "contents" or "illustrations" for the lists of entries in page
    order (see the module docstring)."""
    found: dict[int, str] = {}
    i = 0
    while i < len(spans):
        run, pages = [], []
        j = i
        while j < len(spans):
            entry_pages = _entry_pages(text[spans[j][0] : spans[j][1]])
            if entry_pages is None or (pages and entry_pages and entry_pages[0] < pages[-1]):
                break
            if entry_pages != sorted(entry_pages):
                break
            run.append(j)
            pages += entry_pages
            j += 1
        listed = "\n".join(text[spans[k][0] : spans[k][1]] for k in run)
        lines = listed.split("\n")
        set_as_list = any(map(_PAGE_COLUMN.match, lines)) or 2 * sum(
            bool(_LEADERS.search(line)) for line in lines
        ) >= len(pages)
        if len(pages) >= _ENTRY_RUN_MIN and set_as_list:
            kind = "illustrations" if _ILLUSTRATION_WORDS.search(listed) else "contents"
            found.update(dict.fromkeys(run, kind))
            i = j
        else:
            i = max(j, i + 1)
    return found


def _is_advert_mark(paragraph: str, strong: bool) -> bool:
    """A price or an advertisements heading set apart ("=Cloth, 3s. 6d. net=", not a sentence
    of the story that names a price); with `strong` False, a publisher's imprint too."""
    if is_prose(paragraph):
        return False
    if _PRICE.search(paragraph) or _ADVERT_HEADING.match(paragraph):
        return True
    return not strong and is_imprint(paragraph)


def _section_start(text: str, spans: list[tuple[int, int]], index: int) -> int:
    """The first paragraph of the section that holds paragraph `index`: after a "THE END" or
    a break of _SECTION_BREAK blank lines, looking back at most _ADVERT_GAP * 2 paragraphs."""
    for k in range(index, max(index - 2 * _ADVERT_GAP, 0), -1):
        if _THE_END.match(text[spans[k - 1][0] : spans[k - 1][1]]):
            return k
        if text.count("\n", spans[k - 1][1], spans[k][0]) > _SECTION_BREAK:
            return k
    return index


def _advertisements_start(text: str, spans: list[tuple[int, int]]) -> int | None:
    """The index of the first paragraph of the advertisements at the book's end, or None."""
    last_part = len(text) * (1 - _ADVERT_SHARE)
    marks = [
        i
        for i, (start, stop) in enumerate(spans)
        if start >= last_part and _is_advert_mark(text[start:stop], strong=False)
    ]
    if not marks or len(spans) - 1 - marks[-1] > _ADVERT_GAP:
        return None
    first = len(marks) - 1
    while first > 0 and marks[first] - marks[first - 1] <= _ADVERT_GAP:
        first -= 1
    block = marks[first:]
    strong = [i for i in block if _is_advert_mark(text[spans[i][0] : spans[i][1]], strong=True)]
    if len(block) < 2 or not strong:
        return None
    return _section_start(text, spans, block[0])


def is_figure(paragraph: str) -> bool:
    """A drawing made of characters: _FIGURE_MIN_LINES lines or more, most of whose
    characters are box or punctuation marks."""
    lines = [line for line in paragraph.split("\n") if line.strip()]
    characters = [c for c in paragraph if not c.isspace()]
    if len(lines) < _FIGURE_MIN_LINES or not characters:
        return False
    marks = sum(c in _FIGURE_CHARACTERS for c in characters)
    return marks >= _FIGURE_SHARE * len(characters)


def is_caption(paragraph: str) -> bool:
    """A plate's label or credit set apart: one or two short lines, wholly in italics or in
    brackets, opening on a label ("Frontispiece", "Plate IV") or a credit ("From a photograph
    by", "Drawn by")."""
    set_apart = _SET_APART.match(paragraph)
    if not set_apart or paragraph.strip().count("\n") >= _CAPTION_LINES:
        return False
    return bool(_CAPTION_WORDS.match(set_apart.group(1) or set_apart.group(2)))


def is_colophon(paragraph: str) -> bool:
    """A printer's colophon: a few lines opening on "Printed in", "Printed by", "Printed at"."""
    return bool(_COLOPHON.match(paragraph)) and paragraph.count("\n") < _COLOPHON_LINES


def _without_layout_marks(text: str) -> tuple[str, int, list[str]]:
    """`text` without the transcriber's layout marks; how many lines held them; those lines."""
    if "/*" not in text and "*/" not in text:
        return text, 0, []
    found = [match.group() for match in _LAYOUT_MARK.finditer(text)]
    return (
        _LAYOUT_MARK.sub(lambda m: f"{m.group(1) or ''}{m.group(2) or ''}", text),
        len(found),
        found,
    )


def _half_title(text: str, spans: list[tuple[int, int]], title: str) -> int | None:
    """The index of the half-title right above the first chapter's heading, or None."""
    words = _WORDS.findall(title.lower())
    for i in range(1, len(spans)):
        if is_chapter_heading(text[spans[i][0] : spans[i][1]]):
            line = text[spans[i - 1][0] : spans[i - 1][1]].strip()
            key = _WORDS.findall(line.lower())
            named = len(key) >= _HALF_TITLE_MIN_WORDS and key == words[: len(key)]
            return i - 1 if named and "\n" not in line and not is_prose(line) else None
    return None


def strip_apparatus(front: FrontMatter, title: str = "") -> FrontMatter:
    """`front` without lists of entries, figures, colophons, layout marks, advertisements and
    a half-title (see the module docstring; `title` is the book's, "" when it names none),
    each cut counted by kind with the counts before and its text added."""
    text, marks, cut = _without_layout_marks(front.text)
    removed = dict(front.removed)
    if marks:
        removed["layout_markup"] = marks
    spans = paragraphs(text)
    dropped = _entry_runs(text, spans)
    for i, (start, stop) in enumerate(spans):
        if i not in dropped and is_figure(text[start:stop]):
            dropped[i] = "figures"
        elif i not in dropped and is_colophon(text[start:stop]):
            dropped[i] = "imprint"
        elif i not in dropped and is_caption(text[start:stop]):
            dropped[i] = "illustrations"
    half_title = _half_title(text, spans, title) if title else None
    if half_title is not None:
        dropped[half_title] = "title_page"
    adverts = _advertisements_start(text, spans)
    if adverts is not None and adverts > 0:
        dropped.update(dict.fromkeys(range(adverts, len(spans)), "advertisements"))
    if not dropped and not marks:
        return front
    kept, paragraphs_cut = cut_paragraphs(text, spans, dropped, removed)
    removed_text = "\n\n".join(part for part in (front.removed_text, *cut, *paragraphs_cut) if part)
    return FrontMatter(kept.rstrip("\n") + "\n" * text.endswith("\n"), removed, removed_text)
