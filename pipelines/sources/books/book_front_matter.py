"""A book's front matter, found and cut so that BooksCorpus-style text begins at the first
chapter's prose: pure functions over the text `books.split_gutenberg` leaves (Project
Gutenberg's header, footer and credits already gone).

`strip_front_matter(body)` removes, and counts by class (`FrontMatter.removed`):

- page_markers: `{15}` / `{xv}` page numbers of the printed edition, anywhere in the book;
- illustrations: `[Illustration]` / `[Illustration: caption ...]` blocks (a caption may run
  over lines), anywhere in the book, and a "List of Illustrations" with its entries;
- contents: a table of contents: a "Contents" heading and the entries after it (chapter
  titles, "On Love.....15" with dotted leaders, titles ending in a page number);
- imprint: a publisher's or printer's imprint ("GEORGE ALLEN, 156 CHARING CROSS ROAD", "DE
  L'IMPRIMERIE DE A. FIRMIN DIDOT, RUE JACOB"), a paragraph of short lines only;
- notes: an editor's or an e-text's notes before the text (a "Préface de l'Éditeur", "Editor's
  note", "E-text note" section);
- title_page: the title, byline and other short lines before the text;
- preface: prose before the first chapter that is none of the above (a preface, an
  introduction, a dedication): the book starts at its first chapter.

Where the book starts: after the first chapter heading ("CHAPTER I.", "Chapter 1", "STAVE I",
"CHAPITRE PREMIER", "BOOK I", ...) that is followed by prose, within the first tenth of the book
(a table of contents is followed by more entries, not prose, so its "CHAPTER I" never counts).
A book without such a heading (an essay, a short story) starts at its first prose paragraph
after the title page, and a byline ("by Jonathan Swift") ends the title page. Front matter after
that start is still cut in the book's opening lines (a contents page after a preface).
Everything cut is returned too, for the rejects audit.
"""

from __future__ import annotations

import dataclasses
import re

# Classes in the order they are reported.
CLASSES = (
    "title_page", "imprint", "contents", "illustrations", "notes", "preface", "page_markers",
)  # fmt: skip

_PAGE_MARKER_LINE = re.compile(r"^[ \t]*\{(?:\d{1,4}|[ivxlcdm]{1,8})\}[ \t]*\n", re.MULTILINE)
# Not after a word, a brace or TeX's ^ _ \ $: "x^{2}", "\frac{1}{2}" in a mathematical book
# are not page numbers.
_PAGE_MARKER = re.compile(r"[ \t]*(?<![\w^_{}\\$])\{(?:\d{1,4}|[ivxlcdm]{1,8})\}")
# "[Illustration]", "[Illustration: A caption\nover lines.]", "[Frontispiece: ...]".
_ILLUSTRATION = re.compile(
    r"\[(?:Illustrations?|Frontispiece|Decoration|Ornament)\b[^\[\]]{0,2000}?\]", re.IGNORECASE
)

# The words a chapter heading (and a contents entry naming one) starts with.
_CHAPTER_WORDS = r"chapter|chapitre|kapitel|cap[íi]tulo|capitolo|stave|book|livre|part|partie"
_FIRST_CHAPTER = re.compile(
    rf"^\s*(?:{_CHAPTER_WORDS}|buch)"
    r"\s+(?:the\s+)?(?:1|i|one|first|premier|premi[èe]re|erstes)\b",
    re.IGNORECASE,
)
# A chapter numbered only ("I.", "1"): a heading when it is the heading's first line.
_FIRST_NUMERAL = re.compile(r"^\s*(?:1|I)\.?\s*$")
# A line of a table of contents or a list of illustrations.
_ENTRY = re.compile(
    rf"^\s*(?:{_CHAPTER_WORDS}"
    r"|letter|canto|act|scene|section|[IVXLC]+\.?\s|\d+\.\s)"
    r"|\.{3,}\s*\S*\d+\s*$|[ \t]\d{1,4}\s*$|\s{3,}\d{1,4}\s*$|^\s*(?:preface|introduction"
    r"|epilogue|appendix|index|conclusion|dedication|contents)\b",
    re.IGNORECASE,
)
# An entry with its page number: after dotted leaders, or set apart by a run of spaces.
_PAGE_NUMBERED = re.compile(r"\.{3,}\s*\d{1,4}\s*$|\S\s{3,}\d{1,4}\s*$")
_CONTENTS_HEADING = re.compile(
    r"^\W*(?:(?:table\s+of\s+)?contents|table\s+des\s+mati[èe]res|inhalt(?:sverzeichnis)?"
    r"|[íi]ndice|sommaire|table)\W*$",
    re.IGNORECASE,
)
_ILLUSTRATIONS_HEADING = re.compile(
    r"^\W*(?:list\s+of\s+)?(?:illustrations|plates|full[-\s]page\s+illustrations)\W*$"
    r"|^\W*table\s+des\s+(?:gravures|illustrations)\W*$",
    re.IGNORECASE,
)
_IMPRINT = re.compile(
    r"\b(?:london|new\s+york|boston|philadelphia|edinburgh|oxford|paris|leipzig|published"
    r"|publishers?|printed|printers?|press|company|&\s+co\b|co\.|sons|limited|ltd|copyright"
    r"|road|street|square|row|libraire|imprimerie|éditeurs?|rue|verlag|druck)\b",
    re.IGNORECASE,
)
_YEAR_LINE = re.compile(r"^\s*(?:M[DCLXVI]{2,}\.?|1[5-9]\d\d\.?)\s*$")
_BYLINE = re.compile(r"^\s*(?:by|par|von|por|di|door|av)\s+\S", re.IGNORECASE)
_NOTES_HEADING = re.compile(
    r"(?:editor|éditeur|editeur|herausgeber|translator|traducteur|publisher|transcriber"
    r"|e-?text|producer)[’'`]?s?\b.*\bnote|\bnote\b.*\b(?:editor|éditeur|editeur|herausgeber"
    r"|transcriber|e-?text|publisher)|(?:préface|preface|avertissement|vorwort)\s+(?:de\s+l[’']"
    r"|des?\s+|of\s+the\s+|by\s+the\s+)?(?:éditeur|editeur|editor|herausgebers|publisher)"
    r"|^\W*e-?text\b",
    re.IGNORECASE,
)
# What an editor's or an e-text's note talks about.
_NOTE_WORDS = re.compile(
    r"e-?text|e-?book|edition|spelling|typograph|punctuation|corrected|errors?\b|transcri"
    r"|scann|footnote|original\s+(?:text|book|printing)|hyphenat|italic",
    re.IGNORECASE,
)
_SENTENCE_END = re.compile(r"[.!?;:][\"'”’)»]*(?:\s|$)")
# The first chapter must start within this share of the book's lines (or this many lines).
_FRONT_SHARE = 0.1
_FRONT_MIN_LINES = 200
# A byline ends the title page when it is among the first this many paragraphs and none before
# it is this long (a subtitle such as A Modest Proposal's "For preventing the children of poor
# people in Ireland, ..." is a sentence, but part of the title page).
_TITLE_PAGE_PARAGRAPHS = 8
_TITLE_PAGE_WORDS = 40
# Short paragraphs after a byline that are still the title page ("1729", "Illustrated by",
# "THE MILLENNIUM FULCRUM EDITION 3.0").
_AFTER_BYLINE = 3
# Headings that may stand between a first-chapter heading and its prose ("BOOK I", "CHAPTER
# I", "THE WHITE RABBIT").
_HEADINGS_BEFORE_PROSE = 3


@dataclasses.dataclass(frozen=True)
class FrontMatter:
    """The book's text without its front matter; what was cut, counted by class, and its text."""

    text: str
    removed: dict[str, int] = dataclasses.field(default_factory=dict)
    removed_text: str = ""

    def summary(self) -> str:
        """ "contents 1, title_page 3" (classes in CLASSES order), or ""."""
        return ", ".join(f"{name} {self.removed[name]}" for name in CLASSES if name in self.removed)


def paragraphs(text: str) -> list[tuple[int, int]]:
    """(start, end) offsets of the blank-line separated paragraphs of `text`."""
    spans = []
    start = None
    position = 0
    for line in text.split("\n"):
        if line.strip():
            start = position if start is None else start
        elif start is not None:
            spans.append((start, position - 1))
            start = None
        position += len(line) + 1
    if start is not None:
        spans.append((start, len(text)))
    return spans


def is_prose(paragraph: str) -> bool:
    """Running text: a dozen words or more, or two lines, mostly lower-case letters, a sentence
    end, and not a list of contents entries."""
    lines = [line for line in paragraph.split("\n") if line.strip()]
    words = paragraph.split()
    if len(words) < 12 and len(lines) < 2:
        return False
    letters = [c for c in paragraph if c.isalpha()]
    lower = sum(c.islower() for c in letters)
    if not letters or lower < 0.6 * len(letters) or not _SENTENCE_END.search(paragraph):
        return False
    return sum(bool(_ENTRY.search(line)) for line in lines) * 2 < len(lines)


def _is_short(paragraph: str) -> bool:
    """Short lines only, as a title page, an imprint or a heading is set."""
    return all(len(line.strip()) <= 70 for line in paragraph.split("\n"))


def _is_entries(paragraph: str) -> bool:
    lines = [line for line in paragraph.split("\n") if line.strip()]
    return (
        bool(lines)
        and not is_prose(paragraph)
        and all(_ENTRY.search(line) or len(line.strip()) <= 60 for line in lines)
    )


def _is_section_heading(paragraph: str) -> bool:
    """A contents, illustrations or notes heading: where a list of entries ends."""
    first_line = paragraph.strip().split("\n")[0]
    return bool(
        _CONTENTS_HEADING.match(first_line)
        or _ILLUSTRATIONS_HEADING.match(first_line)
        or (_NOTES_HEADING.search(first_line) and len(first_line) <= 70)
    )


def _classify(text: str, spans: list[tuple[int, int]], end: int) -> dict[int, str]:
    """Paragraph index -> class, for the paragraphs that start before `end` and are contents,
    lists of illustrations, imprints or notes; a heading's entries or section go with it."""
    classes: dict[int, str] = {}
    i = 0
    while i < len(spans) and spans[i][0] < end:
        paragraph = text[spans[i][0] : spans[i][1]]
        first_line = paragraph.strip().split("\n")[0]
        heading = None
        if _CONTENTS_HEADING.match(first_line):
            heading = "contents"
        elif _ILLUSTRATIONS_HEADING.match(first_line):
            heading = "illustrations"
        if heading:
            classes[i] = heading
            i += 1
            # The entries: paragraphs of entry lines, up to the first that is not.
            while (
                i < len(spans)
                and _is_entries(text[spans[i][0] : spans[i][1]])
                and not _is_section_heading(text[spans[i][0] : spans[i][1]])
            ):
                entry = text[spans[i][0] : spans[i][1]]
                if _is_chapter_heading(entry) and _starts_prose(text, spans, i) is not None:
                    break  # the first chapter itself, right after its contents
                classes[i] = heading
                i += 1
            continue
        if _NOTES_HEADING.search(first_line) and len(first_line) <= 70:
            # An editor's section runs to the next paragraph that is a heading, not prose.
            classes[i] = "notes"
            i += 1
            while i < len(spans) and spans[i][0] < end:
                following = text[spans[i][0] : spans[i][1]]
                rule = not following.strip(" -*_=~.\n")
                footnote = following.strip().startswith("[")
                about_notes = _NOTE_WORDS.search(following)
                if not (is_prose(following) or rule or footnote or about_notes):
                    if _is_short(following):
                        break
                classes[i] = "notes"
                i += 1
            continue
        lines = [line for line in paragraph.split("\n") if line.strip()]
        if _is_entries(paragraph) and sum(bool(_PAGE_NUMBERED.search(x)) for x in lines) >= 2:
            classes[i] = "contents"  # "On Love.....15" lines with no "Contents" above them
        elif _is_short(paragraph) and not is_prose(paragraph):
            imprint_lines = sum(
                bool(_IMPRINT.search(line) or _YEAR_LINE.match(line)) for line in lines
            )
            if imprint_lines and imprint_lines * 2 >= len(lines):
                classes[i] = "imprint"
        i += 1
    return classes


def _starts_prose(text: str, spans: list[tuple[int, int]], index: int) -> int | None:
    """The index of the prose paragraph that the chapter heading at `index` opens (after at
    most _HEADINGS_BEFORE_PROSE more heading paragraphs), or None."""
    for j in range(index + 1, min(index + 2 + _HEADINGS_BEFORE_PROSE, len(spans))):
        paragraph = text[spans[j][0] : spans[j][1]]
        if is_prose(paragraph):
            return j
        if not _is_short(paragraph) or len(paragraph.split("\n")) > 3:
            return None
    return None


def _is_chapter_heading(paragraph: str) -> bool:
    """A heading paragraph (a few short lines) naming a first chapter: "CHAPTER I.\nDown the
    Rabbit-Hole", "BOOK ONE\nCHAPTER 1", "I."."""
    lines = [line for line in paragraph.split("\n") if line.strip()]
    if not lines or len(lines) > 4 or not _is_short(paragraph):
        return False
    return bool(_FIRST_NUMERAL.match(lines[0])) or any(_FIRST_CHAPTER.match(x) for x in lines)


def _first_chapter_prose(text: str, spans: list[tuple[int, int]], end: int) -> int | None:
    """The index of the first chapter's first prose paragraph, if a first chapter heading
    starts before `end`."""
    for i, (start, stop) in enumerate(spans):
        if start >= end:
            break
        if _is_chapter_heading(text[start:stop]):
            found = _starts_prose(text, spans, i)
            if found is not None:
                return found
    return None


def _title_page_end(text: str, spans: list[tuple[int, int]], classes: dict[int, str]) -> int:
    """The index of the first paragraph after the title page of a book with no chapter
    headings: the first after a byline ("by Jonathan Swift") and the short lines (a date) that
    follow it, when the byline comes before any long paragraph; else the first prose
    paragraph."""
    for i, (start, stop) in enumerate(spans[:_TITLE_PAGE_PARAGRAPHS]):
        paragraph = text[start:stop]
        if len(paragraph.split()) >= _TITLE_PAGE_WORDS:
            break
        if _BYLINE.match(paragraph) and _is_short(paragraph):
            j, short_lines = i + 1, 0
            while j < len(spans):
                following = text[spans[j][0] : spans[j][1]]
                if j not in classes:
                    if is_prose(following) or not _is_short(following):
                        break
                    if short_lines == _AFTER_BYLINE:
                        break
                    short_lines += 1
                j += 1
            return j
    for i, (start, stop) in enumerate(spans):
        if i not in classes and is_prose(text[start:stop]):
            return i
    return 0


def _remove_inline(text: str) -> tuple[str, int, int, list[str]]:
    """`text` without page markers and illustration blocks; how many of each; their text."""
    cut: list[str] = []
    markers = 0

    def marker(match: re.Match[str]) -> str:
        nonlocal markers
        markers += 1
        cut.append(match.group().strip())
        # "end. {15}Next": the space before the marker stays between the words.
        following = match.string[match.end() : match.end() + 1]
        spaced = match.group()[:1] in (" ", "\t")
        return " " if spaced and following and not following.isspace() else ""

    if "{" in text:
        text = _PAGE_MARKER_LINE.sub(marker, text)
        text = _PAGE_MARKER.sub(marker, text)
    illustrations = 0
    if "[" in text:
        pieces, position = [], 0
        for match in _ILLUSTRATION.finditer(text):
            start, end = match.start(), match.end()
            line_start = text.rfind("\n", 0, start) + 1
            line_end = text.find("\n", end)
            line_end = len(text) if line_end < 0 else line_end
            if not text[line_start:start].strip() and not text[end:line_end].strip():
                # The block is whole lines: they go, and the blank lines after a block that
                # stood as a paragraph of its own.
                start, end = line_start, min(line_end + 1, len(text))
                if start == 0 or text[start - 2 : start] == "\n\n" or start == 1:
                    while end < len(text) and text[end] == "\n":
                        end += 1
            pieces.append(text[position:start])
            cut.append(match.group())
            position = end
            illustrations += 1
        pieces.append(text[position:])
        text = "".join(pieces)
    return text, markers, illustrations, cut


def strip_front_matter(body: str) -> FrontMatter:
    """`body` (a book's text, LF line ends) without its front matter (see the module docstring),
    with what was cut counted by class; `body` whole when nothing would be left."""
    text, markers, illustration_blocks, cut = _remove_inline(body)
    removed: dict[str, int] = {}
    if markers:
        removed["page_markers"] = markers
    spans = paragraphs(text)
    line_count = text.count("\n") + 1
    front_lines = max(_FRONT_MIN_LINES, int(line_count * _FRONT_SHARE))
    front_end = _offset_of_line(text, front_lines)
    classes = _classify(text, spans, front_end)
    start = _first_chapter_prose(text, spans, front_end)
    chapters = start is not None
    if start is None:
        start = _title_page_end(text, spans, classes)
    dropped: dict[int, str] = {}
    for i in reversed(range(start)):
        paragraph = text[spans[i][0] : spans[i][1]]
        name = classes.get(i, "title_page")
        if i not in classes and chapters:
            if is_prose(paragraph):
                name = "preface"
            elif dropped.get(i + 1, "title_page") != "title_page" and i + 1 < start:
                name = dropped[i + 1]  # the heading of the section that follows
        dropped[i] = name
    # Front matter after the start (a contents page after a preface), within the front. An
    # imprint there may be a line of the text, and so may page-numbered lines under no
    # "Contents" heading; a notes section keeps only its heading and the paragraphs that talk
    # about the edition, so a story under a note never goes with it.
    for i, name in classes.items():
        if i < start or name == "imprint":
            continue
        paragraph = text[spans[i][0] : spans[i][1]]
        heading = _is_section_heading(paragraph)
        if name == "notes" and not (heading or _NOTE_WORDS.search(paragraph)):
            continue
        if name == "contents" and not (heading or dropped.get(i - 1) == name):
            continue  # page-numbered lines with no heading, in the text: a table, kept
        dropped[i] = name
    if illustration_blocks:
        removed["illustrations"] = illustration_blocks
    for i, name in sorted(dropped.items()):
        # A class counts its blocks: a heading and its entries are one table of contents.
        if not (i - 1 in dropped and dropped[i - 1] == name):
            removed[name] = removed.get(name, 0) + 1
    if not dropped:
        return FrontMatter(text, removed, "\n".join(cut))
    kept, position = [], 0
    for i in sorted(dropped):
        paragraph_start, paragraph_end = spans[i]
        kept.append(text[position:paragraph_start])
        cut.append(text[paragraph_start:paragraph_end])
        position = paragraph_end
        while position < len(text) and text[position] == "\n":
            position += 1
    kept.append(text[position:])
    if not "".join(kept).strip():
        # Nothing but "front matter" (a title and a byline, a list of poems' titles): the file
        # is not laid out as a book, and its text is kept whole rather than lost.
        return FrontMatter(body)
    return FrontMatter("".join(kept), removed, "\n\n".join(cut))


def _offset_of_line(text: str, line: int) -> int:
    position = -1
    for _ in range(line):
        position = text.find("\n", position + 1)
        if position < 0:
            return len(text)
    return position
