"""Notes that an editor or a translator added to a book's text, recognised by how they are
signed, and cut: pure functions over the text `book_apparatus.strip_apparatus` leaves,
counted by kind on top of its counts.

`strip_annotations(front)` removes, as editor_notes:

- a footnote ("  [1] De _pan_, tout, et _glossa_, langue.  B.") with the paragraphs that
  continue it (indented, as the note is: a quotation, a variant reading the editor
  transcribes), when it ends with an editor's signature: an initial set apart after the
  note's last sentence ("...  B.", "...  K.", "— Ed."), or "(Note de M. Decroix.)",
  "(Editor's note.)", "[Tr.]", "(N. d. T.)". An annotated edition signs its editors' notes
  and leaves the author's unsigned ("Les notes sans signature ... sont de Voltaire");
- the note's reference mark in the text ("Pangloss[1]", "CHAPITRE XXII[1].": the nearest
  "[1]" before the note, set against a word), which would otherwise point at nothing;
- the editor's heading of a passage set in brackets that the editor brings in from another
  edition ("[later editions continued as follows" over verses ending "...tremulous sound.]"):
  the note line and the brackets go, the passage (the author's words in that edition) stays.

An unsigned footnote is the author's or the translator's, and stays, as does any paragraph
that is not a footnote (a letter's signature "C. D." is the work).
"""

from __future__ import annotations

import re

from pipelines.sources.books.book_front_matter import FrontMatter
from pipelines.sources.books.book_text import paragraphs

# A footnote's first line: its label in brackets, then its text.
_NOTE_LABEL = re.compile(r"^([ \t]*)\[(\d{1,3}|[A-Za-z]|[*†‡§]{1,3})\][ \t]+\S")
# An editor's signature at a note's end: an initial (or "Ed.", "Tr.") set apart from the
# last sentence by two spaces or a line break, a dash, or in brackets; or a bracketed "Note
# de/of/by X" naming anyone but the author.
_SIGNATURE = re.compile(
    r"(?:(?:[.!?»”\"')_\]](?:[ \t]{2,}|[ \t]*\n[ \t]*)|[—–]\s*|--\s*)"
    r"(?:[A-Z]{1,2}|Ed|Éd|Edit|Tr|Trad)[.,]"
    r"|[(\[](?:(?:note|n\.)\s+(?:de|du|des|of|by|from)\s+"
    r"(?!l[’']\s*auteur\b|the\s+author\b|author\b)[^()\[\]\n]{1,60}"
    r"|(?:editor|éditeur|translator|traducteur)[’'`]?s?\s+note"
    r"|n\.\s?d\.\s?[ÉEeTt]\.?|ed(?:itor)?\.?|tr(?:anslator)?\.?)[)\]]\.?)"
    r"\s*$",
    re.IGNORECASE,
)
_INITIAL_CASE = re.compile(r"[A-Z]")
# The dash that sets off an editor's addition to a note, after the note's last sentence.
_ADDITION = re.compile(r"(?<=[.!?»”)])[ \t\n]*(?:--|—)[ \t]*(?=\S)")
# "[later editions continued as follows\n<the passage>]": a line opening a bracket on which
# editions ("later editions", "the first edition", "dans les éditions suivantes", "in späteren
# Ausgaben"), left open until the passage's last line closes it.
_INTERPOLATION = re.compile(
    r"^[ \t]*\[((?:in|dans|en|from)?\s*(?:the|les|la|l[’']|den)?\s*(?:later|earlier|first|second"
    r"|other|some|all|original|subsequent|suivantes?|premières?|autres|späteren|früheren"
    r"|ersten)?\s*(?:editions?|versions?|manuscripts?|éditions?|ausgaben?)\b"
    r"[^\[\]\n]*)\n((?:[^\[\]\n]+\n)*?[^\[\]\n]+)\][ \t]*$",
    re.IGNORECASE | re.MULTILINE,
)
# A note's reference mark is looked for this far back from the note.
_REFERENCE_REACH = 20_000


def _indent(paragraph: str) -> int:
    return len(paragraph) - len(paragraph.lstrip(" \t"))


def is_signed(note: str) -> bool:
    """Whether a note ends with an editor's or a translator's signature (module docstring)."""
    match = _SIGNATURE.search(note.rstrip())
    if not match:
        return False
    # An initial must be a capital even though the pattern ignores case ("... page 7.  B.").
    initial = re.search(r"([A-Za-zÉé]{1,5})[.,]\s*$", match.group())
    bracketed = match.group().lstrip()[:1] in "(["
    return bracketed or bool(initial and _INITIAL_CASE.match(initial.group(1)))


def _signed_notes(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int, str]]:
    """(first paragraph index, last paragraph index, label) of each signed footnote."""
    notes = []
    i = 0
    while i < len(spans):
        label = _NOTE_LABEL.match(text[spans[i][0] : spans[i][1]])
        if not label:
            i += 1
            continue
        depth = max(len(label.group(1)), 1)
        last = i if is_signed(text[spans[i][0] : spans[i][1]]) else None
        j = i + 1
        while j < len(spans):
            paragraph = text[spans[j][0] : spans[j][1]]
            if _indent(paragraph) < depth or _NOTE_LABEL.match(paragraph):
                break
            if is_signed(paragraph):
                last = j
            j += 1
        if last is not None:
            notes.append((i, last, label.group(2)))
            i = last + 1
        else:
            i += 1
    return notes


def _addition_start(text: str, start: int, stop: int) -> int:
    """Where the editor's part of the signed note text[start:stop] starts: `start` when the
    note is the editor's all through; else the dash that sets off the editor's addition to an
    unsigned note ("quelle délicatesse de conscience!--Cette note de Voltaire est posthume.
    ...  B.": the author's note before the dash stays)."""
    ends = [match.start() for match in _ADDITION.finditer(text, start, stop)] + [stop]
    previous = start
    for end in ends:
        if is_signed(text[previous:end]):
            return previous
        previous = end
    return start


def _reference(text: str, before: int, label: str, taken: set[int]) -> int | None:
    """The offset of the reference mark "[label]" nearest before `before`, set against a word
    or a mark (not a note's own label at a line's start), or None."""
    mark = f"[{label}]"
    position = text.rfind(mark, max(0, before - _REFERENCE_REACH), before)
    while position > 0:
        if not text[position - 1].isspace() and position not in taken:
            return position
        position = text.rfind(mark, max(0, before - _REFERENCE_REACH), position)
    return None


def _without_interpolation_notes(text: str) -> tuple[str, list[str]]:
    """`text` without the editor's headings of passages brought in from other editions (and
    their brackets), the passages kept; the headings."""
    headings: list[str] = []

    def passage(match: re.Match[str]) -> str:
        headings.append(f"[{match.group(1)}]")
        return match.group(2)

    return _INTERPOLATION.sub(passage, text), headings


def strip_annotations(front: FrontMatter) -> FrontMatter:
    """`front` without the notes its editors signed and their reference marks, and without the
    headings of passages brought in from other editions (see the module docstring), counted
    as editor_notes with the counts before and their text added."""
    if "[" not in front.text:
        return front
    text, headings = _without_interpolation_notes(front.text)
    if headings:
        front = FrontMatter(
            text,
            {**front.removed, "editor_notes": front.removed.get("editor_notes", 0) + len(headings)},
            "\n\n".join(part for part in (front.removed_text, *headings) if part),
        )
    spans = paragraphs(text)
    notes = _signed_notes(text, spans)
    if not notes:
        return front
    cuts: list[tuple[int, int]] = []
    whole: list[tuple[int, str]] = []
    for first, last, label in notes:
        start, stop = spans[first][0], spans[last][1]
        addition = _addition_start(text, start, stop)
        if addition == start:
            while stop < len(text) and text[stop] == "\n":
                stop += 1  # the blank lines after the note go with it
            whole.append((start, label))
        cuts.append((addition, stop))
    references: set[int] = set()
    for start, label in whole:
        reference = _reference(text, start, label, references)
        if reference is not None and not any(a <= reference < b for a, b in cuts):
            references.add(reference)
    cuts += [(reference, text.index("]", reference) + 1) for reference in references]
    kept, cut, position = [], [], 0
    for start, stop in sorted(cuts):
        kept.append(text[position:start])
        cut.append(text[start:stop].strip("\n"))
        position = stop
    kept.append(text[position:])
    removed = dict(front.removed)
    removed["editor_notes"] = removed.get("editor_notes", 0) + len(notes)
    notes_text = "\n\n".join(part for part in cut if not _is_mark(part))
    removed_text = "\n\n".join(part for part in (front.removed_text, notes_text) if part)
    return FrontMatter(
        "".join(kept).rstrip("\n") + "\n" * text.endswith("\n"), removed, removed_text
    )


def _is_mark(part: str) -> bool:
    return bool(re.fullmatch(r"\[[^\]\n]{1,3}\]", part))
