"""What a transcriber or an editor wrote about the edition, recognised by what it says, and
cut: pure functions over the text `book_annotations.strip_annotations` leaves, counted by kind
on top of its counts.

`strip_editorial(front)` removes:

- transcriber_notes: a note in the book's front (its first tenth) on how the e-text was made,
  under no heading, wherever it stands there (after a contents page too): a paragraph that
  opens on the making of the text ("Transcribed from the 1843 Chapman and Hall edition by
  ...", "This eBook was transcribed from ...", "Texte numérisé à partir de l'édition de
  ...", "Dieser Text wurde nach der Ausgabe von 1843 transkribiert", "Texto digitalizado
  por ...") and is not long, with the paragraphs right after it that go on about the
  edition's spelling, misprints and corrections;
- bibliography: an editor's bibliography, by its heading ("Bibliography", "Bibliographie",
  "Bibliografía", "Literaturverzeichnis", "Works cited") and the list under it, up to the
  next heading (a chapter's, a preface's, a line in capitals) or the book's end, when the list
  names works (at least _BIBLIOGRAPHY_MIN_ENTRIES lines with a year or a format, "in-12",
  "2 vols.") and is at most _BIBLIOGRAPHY_MAX_SHARE of the book.

A preface, an introduction or a chapter that mentions an edition is the work: a note must open
on the making of the text, and a list must stand under a bibliography heading.
"""

from __future__ import annotations

import re

from pipelines.sources.books.book_front_matter import FrontMatter, is_chapter_heading, is_prose
from pipelines.sources.books.book_text import cut_paragraphs, front_end, paragraphs

# How a note on the making of the e-text opens, in the languages of the shared books and
# their neighbours.
_MAKING = re.compile(
    r"^\W*(?:(?:this|the)\s+(?:e-?text|e-?book|electronic\s+(?:text|edition)|text|edition)"
    r"\s+(?:was|has\s+been|is)\s+(?:\w+\s+){0,2}(?:produced|prepared|created|made|transcribed"
    r"|scanned|digiti[sz]ed|proofread|keyed)\b"
    r"|(?:transcribed|scanned|digiti[sz]ed|keyed|typed|produced|prepared)\s+(?:in\s+)?(?:by|from)\b"
    r"|texte\s+(?:numérisé|saisi|établi|transcrit|relu)\b|(?:numérisé|transcrit|saisi)\s+(?:par"
    r"|à\s+partir)\b|ce\s+(?:livre|texte|fichier)\s+(?:électronique\s+)?a\s+été\s+(?:numérisé"
    r"|transcrit|saisi|établi|préparé)\b"
    r"|(?:diese[rs]?|das)\s+(?:e-?text|e-?book|text|buch|ausgabe)\s+wurde\b[^.\n]{0,80}"
    r"\b(?:transkribiert|digitalisiert|erfasst|erstellt)\b|(?:transkribiert|digitalisiert"
    r"|erfasst)\s+(?:von|nach)\b"
    r"|(?:texto\s+)?(?:transcrito|digitalizado)\s+(?:por|de|a\s+partir)\b"
    r"|este\s+(?:libro|texto)\s+(?:electrónico\s+)?(?:fue|ha\s+sido)\s+(?:transcrito|digitalizado)\b)",
    re.IGNORECASE,
)
# What the paragraphs that go on with such a note talk about.
_EDITION_WORDS = re.compile(
    r"spelling|misprint|typo|printer[’']?s\s+errors?|punctuation|hyphenat|corrected|silently"
    r"|original\s+(?:text|edition|spelling)|orthographe|coquilles?|corrigé|druckfehler"
    r"|rechtschreibung|korrigiert|ortograf[íi]a|erratas?|corregid",
    re.IGNORECASE,
)
_NOTE_MAX_WORDS = 120

_BIBLIOGRAPHY_HEADING = re.compile(
    r"^\W*(?:(?:select(?:ed)?|short)\s+)?(?:bibliograph(?:y|ie)|bibliograf[íi]a|bibliografia"
    r"|literaturverzeichnis|works\s+cited|list\s+of\s+works\s+(?:cited|consulted))\W*$",
    re.IGNORECASE,
)
# A line of a list of works: a year of publication or a format.
_WORK_ENTRY = re.compile(
    r"\b(?:1[5-9]\d\d|20\d\d)\b|\bin-(?:4|8|12|16|18)\b|\b\d+\s+vols?\.|\bpp?\.\s*\d",
    re.IGNORECASE,
)
_SECTION_HEADING = re.compile(
    r"^\W*(?:chapter|chapitre|kapitel|cap[íi]tulo|capitolo|book|livre|part|partie|preface"
    r"|préface|introduction|einleitung|vorwort|prologue|pr[óo]logo|stave|letter|lettre"
    r"|canto|act|acte)\b",
    re.IGNORECASE,
)
_BIBLIOGRAPHY_MIN_ENTRIES = 2
_BIBLIOGRAPHY_MAX_SHARE = 0.2


def _making_notes(text: str, spans: list[tuple[int, int]]) -> set[int]:
    """Indices of the paragraphs of the notes on the making of the e-text in the front."""
    end = front_end(text)
    found: set[int] = set()
    in_note = False
    for i, (start, stop) in enumerate(spans):
        if start >= end:
            break
        paragraph = text[start:stop]
        short = len(paragraph.split()) <= _NOTE_MAX_WORDS
        if short and (_MAKING.match(paragraph) or (in_note and _EDITION_WORDS.search(paragraph))):
            found.add(i)
            in_note = True
        else:
            in_note = False
    return found


def _is_heading(paragraph: str) -> bool:
    """The heading of what follows a bibliography: a chapter's, a preface's, or a line of
    capitals."""
    lines = [line for line in paragraph.split("\n") if line.strip()]
    if is_chapter_heading(paragraph) or (len(lines) == 1 and _SECTION_HEADING.match(lines[0])):
        return True
    letters = [c for c in paragraph if c.isalpha()]
    return len(lines) == 1 and len(letters) > 3 and all(c.isupper() for c in letters)


def _bibliographies(text: str, spans: list[tuple[int, int]]) -> set[int]:
    """Indices of the paragraphs of the bibliographies (heading and list)."""
    found: set[int] = set()
    for i, (start, stop) in enumerate(spans):
        if not _BIBLIOGRAPHY_HEADING.match(text[start:stop].strip()):
            continue
        j = i + 1
        while j < len(spans) and not _is_heading(text[spans[j][0] : spans[j][1]]):
            j += 1
        listed = text[spans[i][1] : spans[j - 1][1]] if j > i + 1 else ""
        entries = sum(bool(_WORK_ENTRY.search(line)) for line in listed.split("\n"))
        if (
            entries >= _BIBLIOGRAPHY_MIN_ENTRIES
            and len(listed) <= _BIBLIOGRAPHY_MAX_SHARE * len(text)
            and not all(is_prose(text[a:b]) for a, b in spans[i + 1 : j])
        ):
            found.update(range(i, j))
    return found


def strip_editorial(front: FrontMatter) -> FrontMatter:
    """`front` without notes on the making of the e-text in its front and without editors'
    bibliographies (see the module docstring), counted by kind with the counts before and
    their text added."""
    text = front.text
    spans = paragraphs(text)
    dropped = dict.fromkeys(_making_notes(text, spans), "transcriber_notes")
    dropped.update(dict.fromkeys(_bibliographies(text, spans), "bibliography"))
    if not dropped:
        return front
    removed = dict(front.removed)
    kept, cut = cut_paragraphs(text, spans, dropped, removed)
    if not kept.strip():
        return front  # nothing but such notes: not laid out as a book, kept whole
    removed_text = "\n\n".join(part for part in (front.removed_text, *cut) if part)
    return FrontMatter(kept.rstrip("\n") + "\n" * text.endswith("\n"), removed, removed_text)
