"""A book's publisher and transcriber apparatus before and around the work, found by structure
and cut, so that BooksCorpus-style text is the work itself and all of it: pure functions over
the text `books.split_gutenberg` leaves (Project Gutenberg's header, footer and credits already
gone).

`strip_front_matter(body)` removes, and counts by kind (`FrontMatter.removed`):

- page_markers: `{15}` / `{xv}` / `[Pg 15]` page numbers of the printed edition, anywhere in
  the book;
- illustrations: `[Illustration]` / `[Illustration: caption ...]` blocks (a caption may run
  over lines) and bracketed credit lines ("[_Copyright 1894 by George Allen._]"), anywhere in
  the book, and a "List of Illustrations" with its entries;
- contents: a table of contents. By structure: a run of short lines near the start whose
  entries reappear later in the book as headings ("CHAPTER I. Down the Rabbit-Hole" before the
  heading "CHAPTER I.\nDown the Rabbit-Hole"), with the "Contents" heading above it; the
  headings themselves stay. Also entries with page numbers ("On Love.....15") under no heading;
- imprint: a publisher's or printer's imprint ("GEORGE ALLEN, 156 CHARING CROSS ROAD", "DE
  L'IMPRIMERIE DE A. FIRMIN DIDOT, RUE JACOB"), a paragraph of short lines only;
- notes: an editor's or an e-text's notes before the text (a "Préface de l'Éditeur", "Editor's
  note", "E-text note" section);
- title_page: the title, byline and other short lines before the work.

Everything else is the work. A preface, a prologue, letters, a dedication or an introduction
before the first chapter are kept: they are written as part of the book (Frankenstein opens on
four letters, Moby-Dick on its Etymology and Extracts), and only a heading that names an editor,
a transcriber or the e-text marks a section as apparatus.

Where the work starts: at its first prose paragraph that is not apparatus, after the title page
(which a byline such as "by Jonathan Swift" ends, with up to three short lines after it),
together with the headings right above that paragraph ("Letter 1", "_To Mrs. Saville,
England._"; at most three, stopping at a first-chapter heading such as "CHAPTER I." or
"CHAPITRE I."). Apparatus after that start is still cut in the book's opening tenth (a contents
page after a preface). Everything cut is returned too, for the rejects audit; back matter at
the end of a book is `book_back_matter`'s.
"""

from __future__ import annotations

import dataclasses
import functools
import re

from pipelines.sources.books.book_text import front_end, offset_of_line, paragraphs

# Classes in the order they are reported.
CLASSES = (
    "title_page", "imprint", "contents", "illustrations", "notes", "page_markers",
    "transcriber_notes", "advertisements", "figures", "layout_markup", "editor_notes",
    "bibliography",
)  # fmt: skip

# A page number of the printed edition: "{15}", "{xv}", "{XV}", or "[Pg 15]" as Gutenberg's
# HTML-made texts print it.
_PAGE = r"(?:\{(?:\d{1,4}|[ivxlcdm]{1,8}|[IVXLCDM]{1,8})\}|\[Pg\.?\s*(?:\d{1,4}|[ivxlcdm]{1,8})\])"
_PAGE_MARKER_LINE = re.compile(rf"^[ \t]*{_PAGE}[ \t]*\n", re.MULTILINE)
# Not after a brace or TeX's ^ _ \ $, nor after a word that is a TeX command: "x^{2}",
# "\frac{1}{2}", "\sqrt{2}" in a mathematical book are not page numbers; "upon the{7} table"
# is one (the anchor of an HTML edition, set against the word before it).
_PAGE_MARKER = re.compile(rf"[ \t]*(?<![\^_{{}}\\$]){_PAGE}")
_TEX_COMMAND = re.compile(r"\\[A-Za-z]+$")
# "[Illustration]", "[Illustration: A caption\nover lines.]", "[Frontispiece: ...]", "[Picture:
# ...]", "[Ilustración: ...]". A bracketed credit line under a plate ("[_Copyright 1894 by
# George Allen._]") goes with them, inside the caption's brackets (over a line break too) or after.
_ILLUSTRATION = re.compile(
    r"\[_?(?:Illustrations?|Frontispiece|Decoration|Ornament|Picture|Image|Plate|Portrait|Map"
    r"|Facsimile|Photograph|Vignette|Ilustraci[óo]n|Illustrazione|Gravure|Abbildung)\b"
    r"(?:[^\[\]]|\[[^\[\]]{0,200}\]){0,2000}?\]"
    r"|\[_?(?:Copyright|Copyrighted)\b[^\[\]\n]{0,200}\]",
    re.IGNORECASE,
)

# The words a chapter heading (and a contents entry naming one) starts with.
_CHAPTER_WORDS = r"chapter|chapitre|kapitel|cap[íi]tulo|capitolo|stave|book|livre|part|partie"
_CAPTION_HEADING = re.compile(
    rf"\n\s*((?:{_CHAPTER_WORDS})\s+(?:[IVXLCDM]+|\d+)\b\.?)\s*\]$", re.IGNORECASE
)
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
_WORD = re.compile(r"\w+")
_NOT_LETTER = re.compile(r"[\W\d_]+")
# A contents entry's page number: after dotted leaders or a run of spaces ("On Love.....15").
_ENTRY_PAGE = re.compile(r"(?:\.{2,}|\s{2,})\s*(?:\d{1,4}|[ivxlc]{1,6})\s*$", re.IGNORECASE)
# The chapter label before an entry's title ("CHAPTER I.", "Stave III:", "IV.", "Letter 2").
_TRAILING_NUMBER = re.compile(r"\s\d{1,4}\s*$")  # "Down the Rabbit-Hole 1", a page number
_ENTRY_LABEL = re.compile(
    rf"^\s*(?:(?:{_CHAPTER_WORDS}|letter)\s+)?(?:\d{{1,4}}|[ivxlc]{{1,8}})\b[.:]?\s*",
    re.IGNORECASE,
)
# A heading is at most this many lines; a contents run names at least this many of them.
_HEADING_LINES = 4
_CONTENTS_MIN_ENTRIES = 3
# A contents run starts in the book's first tenth and within this many lines (Moby-Dick's 136
# entries, a blank line between each, end at line 290 of its text).
_CONTENTS_LINES = 2000
_SENTENCE_END = re.compile(r"[.!?;:][\"'”’)»]*(?:\s|$)")
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


# The rules look at a paragraph and its neighbours, so the same paragraph is asked about a few
# times in a row.
@functools.lru_cache(maxsize=1024)
def is_prose(paragraph: str) -> bool:
    """Running text: a dozen words or more, or two lines not all set centred, mostly lower-case
    letters, a sentence end, and not a list of contents entries."""
    lines = [line for line in paragraph.split("\n") if line.strip()]
    words = paragraph.split()
    if len(words) < 12 and (len(lines) < 2 or all(line[:8].isspace() for line in lines)):
        return False  # a line, or a few words set centred as a title page or an imprint
    if not _SENTENCE_END.search(paragraph):
        return False
    letters = _NOT_LETTER.sub("", paragraph)
    if not letters or sum(map(str.islower, letters)) < 0.6 * len(letters):
        return False
    return sum(bool(_ENTRY.search(line)) for line in lines) * 2 < len(lines)


def _is_short(paragraph: str) -> bool:
    """Short lines only, as a title page, an imprint or a heading is set."""
    return all(len(line.strip()) <= 70 for line in paragraph.split("\n"))


def _is_capitals(paragraph: str) -> bool:
    """Set in capitals, as imprints are: nine letters in ten upper-case."""
    letters = [c for c in paragraph if c.isalpha()]
    return bool(letters) and sum(c.isupper() for c in letters) >= 0.9 * len(letters)


def _is_imprint_lines(paragraph: str) -> bool:
    """Short lines, not prose, half of them naming a press, a publisher, a place or a year."""
    if not _is_short(paragraph) or is_prose(paragraph):
        return False
    lines = [line for line in paragraph.split("\n") if line.strip()]
    imprint_lines = sum(bool(_IMPRINT.search(line) or _YEAR_LINE.match(line)) for line in lines)
    return bool(imprint_lines) and imprint_lines * 2 >= len(lines)


def is_imprint(paragraph: str) -> bool:
    """A printer's or publisher's imprint wherever it stands: imprint lines set in capitals
    (in the text, a sentence may name a London street)."""
    return _is_imprint_lines(paragraph) and _is_capitals(paragraph)


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
                if is_chapter_heading(entry) and _starts_prose(text, spans, i) is not None:
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
        elif _is_imprint_lines(paragraph):
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


def is_chapter_heading(paragraph: str) -> bool:
    """A heading paragraph (a few short lines) naming a first chapter: "CHAPTER I.\nDown the
    Rabbit-Hole", "BOOK ONE\nCHAPTER 1", "I."."""
    lines = [line for line in paragraph.split("\n") if line.strip()]
    if not lines or len(lines) > 4 or not _is_short(paragraph):
        return False
    return bool(_FIRST_NUMERAL.match(lines[0])) or any(_FIRST_CHAPTER.match(x) for x in lines)


def _key(line: str) -> str:
    """A heading's or an entry's words, lower case, without punctuation: what is compared."""
    return " ".join(_WORD.findall(line.lower()))


def _entry_keys(line: str) -> set[str]:
    """The keys a contents entry may reappear under as a heading: the entry without its page
    number, and its title without its chapter label ("Down the Rabbit-Hole") and without a
    number at its end."""
    entry = _ENTRY_PAGE.sub("", line)
    keys = {_key(entry), _key(_ENTRY_LABEL.sub("", entry, count=1))}
    keys.add(_key(_ENTRY_LABEL.sub("", _TRAILING_NUMBER.sub("", entry), count=1)))
    keys.discard("")
    return keys


def _heading_keys(
    text: str, spans: list[tuple[int, int]], wanted: set[str]
) -> dict[str, list[int]]:
    """Key -> the indices of the heading paragraphs (a few short lines, not prose, that open
    prose: a title page repeated for a second volume heads nothing) that hold it, as a line
    or as its lines joined ("CHAPTER I.\nDown the Rabbit-Hole"), for the keys `wanted`."""
    # First a count over all short paragraphs, which is cheap: a key found more than twice (an
    # entry and its heading) is a speaker's name or a refrain, and needs no closer look.
    found: dict[int, set[str]] = {}
    count: dict[str, int] = {}
    for i, (start, stop) in enumerate(spans):
        if stop - start > _HEADING_LINES * 71 or text.count("\n", start, stop) >= _HEADING_LINES:
            continue
        paragraph = text[start:stop]
        keys = {*map(_key, paragraph.split("\n")), _key(paragraph)} & wanted
        if keys:
            found[i] = keys
            for key in keys:
                count[key] = count.get(key, 0) + 1
    heads: dict[str, list[int]] = {}
    for i, keys in found.items():
        keys = {key for key in keys if count[key] <= 2}
        paragraph = text[spans[i][0] : spans[i][1]]
        if not keys or not _is_short(paragraph) or is_prose(paragraph):
            continue
        if _starts_prose(text, spans, i) is None:
            continue
        for key in keys:
            heads.setdefault(key, []).append(i)
    return heads


def _names_one_heading(heads: dict[str, list[int]], key: str, index: int) -> bool:
    """Whether `key` heads exactly one paragraph after `index`: an entry names one section (a
    key heading many is a repeated "CHAPTER I", a speaker's name in a play)."""
    return sum(i > index for i in heads.get(key, ())) == 1


def _contents_runs(text: str, spans: list[tuple[int, int]], end: int) -> set[int]:
    """Indices of the paragraphs, starting before `end`, that are a table of contents by
    structure: a run of short-line paragraphs, most of whose lines name a heading that comes
    later in the book, _CONTENTS_MIN_ENTRIES lines or more in all (one unmatched short
    paragraph, a "VOLUME II" between entries, may stand inside the run), with a "Contents"
    heading right above it."""
    wanted: set[str] = set()
    for start, stop in spans:
        if start >= end:
            break
        paragraph = text[start:stop]
        if _is_short(paragraph) and not is_prose(paragraph):
            wanted.update(*map(_entry_keys, paragraph.split("\n")))
    later = _heading_keys(text, spans, wanted - {""})
    found: set[int] = set()
    i = 0
    while i < len(spans) and spans[i][0] < end:
        run: list[int] = []
        matched, gap, j = 0, None, i
        while j < len(spans):
            paragraph = text[spans[j][0] : spans[j][1]]
            lines = [line for line in paragraph.split("\n") if line.strip()]
            if not _is_short(paragraph) or is_prose(paragraph):
                break
            hits = sum(any(_names_one_heading(later, k, j) for k in _entry_keys(x)) for x in lines)
            opens_text = j + 1 < len(spans) and is_prose(text[spans[j + 1][0] : spans[j + 1][1]])
            if hits * 2 < len(lines) or opens_text:
                if gap is not None or not run or len(lines) > 2 or opens_text:
                    break
                gap = j  # kept only if an entry follows it
            else:
                if gap is not None:
                    run.append(gap)
                    gap = None
                run.append(j)
                matched += hits
            j += 1
        if matched >= _CONTENTS_MIN_ENTRIES:
            first = run[0]
            if first > 0 and _CONTENTS_HEADING.match(
                text[spans[first - 1][0] : spans[first - 1][1]].strip().split("\n")[0]
            ):
                found.add(first - 1)
            found.update(run)
            i = run[-1] + 1
        else:
            i += 1
    return found


def _title_page_end(text: str, spans: list[tuple[int, int]], classes: dict[int, str]) -> int:
    """The index of the first paragraph after a title page that a byline ends ("by Jonathan
    Swift", among the first _TITLE_PAGE_PARAGRAPHS paragraphs and before any long one), with
    up to _AFTER_BYLINE short paragraphs right after the byline (a date, "THE MILLENNIUM
    FULCRUM EDITION 3.0"); 0 when there is no such byline."""
    for i, (start, stop) in enumerate(spans[:_TITLE_PAGE_PARAGRAPHS]):
        paragraph = text[start:stop]
        if len(paragraph.split()) >= _TITLE_PAGE_WORDS:
            break
        if _BYLINE.match(paragraph) and _is_short(paragraph):
            j = i + 1
            while j < len(spans) and j - i <= _AFTER_BYLINE and j not in classes:
                following = text[spans[j][0] : spans[j][1]]
                if is_prose(following) or not _is_short(following):
                    break
                if j + 1 < len(spans) and is_prose(text[spans[j + 1][0] : spans[j + 1][1]]):
                    break  # the heading of the text that follows
                j += 1
            return j
    return 0


def _work_start(text: str, spans: list[tuple[int, int]], classes: dict[int, str]) -> int:
    """The index of the work's first paragraph: its first prose paragraph that is not
    apparatus, after the title page, with up to _HEADINGS_BEFORE_PROSE short headings right
    above it (stopping at apparatus, at the title page's end, and after a first-chapter
    heading). The first paragraph of a book is its title unless it is a chapter heading or
    ends as a sentence does; with no prose at all, every paragraph (the caller keeps such a
    text whole)."""
    title_end = _title_page_end(text, spans, classes)
    first = next(
        (
            i
            for i in range(title_end, len(spans))
            if i not in classes and is_prose(text[spans[i][0] : spans[i][1]])
        ),
        None,
    )
    if first is None:
        return len(spans)  # no prose to start at: strip_front_matter keeps the text whole
    start = first
    while start - 1 >= max(title_end, 0) and first - (start - 1) <= _HEADINGS_BEFORE_PROSE:
        above = text[spans[start - 1][0] : spans[start - 1][1]]
        if start - 1 in classes or not _is_short(above) or is_prose(above):
            break
        if _BYLINE.match(above) or _YEAR_LINE.match(above.strip()):
            break
        if start - 1 == 0 and not (is_chapter_heading(above) or _SENTENCE_END.search(above)):
            break  # a book's first line is its title, unless it is a heading or a sentence
        start -= 1
        if is_chapter_heading(above):
            break
    return start


def _remove_inline(text: str) -> tuple[str, int, int, list[str]]:
    """`text` without page markers and illustration blocks; how many of each; their text."""
    cut: list[str] = []
    markers = 0

    def marker(match: re.Match[str]) -> str:
        nonlocal markers
        if _TEX_COMMAND.search(match.string, max(0, match.start() - 40), match.start()):
            return match.group()
        markers += 1
        cut.append(match.group().strip())
        # "end. {15}Next": the space before the marker stays between the words.
        following = match.string[match.end() : match.end() + 1]
        spaced = match.group()[:1] in (" ", "\t")
        return " " if spaced and following and not following.isspace() else ""

    if "{" in text or "[Pg" in text:
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
            # A chapter's heading set in its head-piece ("[Illustration: ...\n\nChapter I.]") is
            # the work's: it stays, a paragraph of its own.
            heading = _CAPTION_HEADING.search(match.group())
            if heading:
                pieces.append(f"{heading.group(1)}\n\n")
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
    front = front_end(text)
    classes = _classify(text, spans, front)
    contents = _contents_runs(text, spans, min(front, offset_of_line(text, _CONTENTS_LINES)))
    if contents:
        # Short paragraphs after the run that _classify took for entries are the text's own
        # headings ("ETYMOLOGY." after Moby-Dick's contents): the run ends the list.
        for i in [i for i, name in classes.items() if name == "contents" and i > max(contents)]:
            del classes[i]
        classes.update(dict.fromkeys(contents, "contents"))
    start = _work_start(text, spans, classes)
    dropped = {i: classes.get(i, "title_page") for i in range(start)}
    # Apparatus after the start (a contents page after a preface), within the front. An imprint
    # there is cut only when set in capitals (a sentence of the text may name a London street),
    # and page-numbered lines under no "Contents" heading only when their entries name later
    # headings; a notes section keeps only its heading and the paragraphs that talk about the
    # edition, so a story under a note never goes with it.
    for i, name in classes.items():
        if i < start:
            continue
        paragraph = text[spans[i][0] : spans[i][1]]
        heading = _is_section_heading(paragraph)
        if name == "imprint" and not is_imprint(paragraph):
            continue
        if name == "notes" and not (heading or _NOTE_WORDS.search(paragraph)):
            continue
        if name == "contents" and not (i in contents or heading or dropped.get(i - 1) == name):
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
