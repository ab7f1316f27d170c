"""A book's publisher and transcriber apparatus after the work, found by structure and cut:
pure functions over the text `book_front_matter.strip_front_matter` leaves.

`strip_back_matter(front)` removes, and counts by kind on top of the front matter's counts:

- transcriber_notes: a transcriber's or producer's note at the end ("Transcriber's Notes:",
  "[Transcriber's Note: ...]"), with the correction list it opens and everything after it,
  when it starts in the second half of the book and all it runs over is at most a fifth of the
  book (a note that long is not an appendix of corrections but text, and is kept);
- imprint: the printer's imprint after the work's last prose paragraph ("CHISWICK PRESS:
  PRINTED BY CHARLES WHITTINGHAM AND CO.", "THE END" above it stays): short lines, set in
  capitals, half of them naming a press, a printer or a place (book_front_matter's imprint
  rule).
"""

from __future__ import annotations

import re

from pipelines.sources.books.book_front_matter import FrontMatter, is_imprint, is_prose
from pipelines.sources.books.book_text import paragraphs

# A transcriber's or producer's note: "Transcriber's Note:", "[Transcriber’s Notes", "Original
# Transcriber's Notes:", "Note from the transcriber", "Producer's note".
TRANSCRIBER_NOTE = re.compile(
    r"^\W*(?:original\s+)?(?:transcriber|producer)(?:[’'`]?s)?[’'`]?\s+notes?\b"
    r"|^\W*notes?\s+(?:from|by)\s+the\s+(?:transcriber|producer)",
    re.IGNORECASE,
)
# A note at the end starts past this share of the book, and runs over at most this share of it.
_NOTE_AFTER_SHARE = 0.5
_NOTE_MAX_SHARE = 0.2


def _note_start(text: str, spans: list[tuple[int, int]]) -> int | None:
    """The offset of the transcriber's note that, with all after it, is the book's end."""
    for start, stop in spans:
        if start < len(text) * _NOTE_AFTER_SHARE:
            continue
        if TRANSCRIBER_NOTE.match(text[start:stop]):
            if len(text) - start <= len(text) * _NOTE_MAX_SHARE:
                return start
            return None
    return None


def _imprint_start(text: str, spans: list[tuple[int, int]]) -> int | None:
    """The offset of the first of the imprint paragraphs that follow the last prose one."""
    first = None
    for start, stop in reversed(spans):
        paragraph = text[start:stop]
        if is_prose(paragraph):
            break
        if is_imprint(paragraph):
            first = start
        elif first is not None:
            break  # "THE END" above the imprint stays
    return first


def strip_back_matter(front: FrontMatter) -> FrontMatter:
    """`front` without the back matter at the end of its text (see the module docstring), the
    cut counted by kind with the front matter's counts and its text added to theirs."""
    text, removed, cut = front.text, dict(front.removed), []
    note = _note_start(text, paragraphs(text))
    if note is not None:
        cut.append(text[note:].strip())
        removed["transcriber_notes"] = removed.get("transcriber_notes", 0) + 1
        text = text[:note].rstrip()
    imprint = _imprint_start(text, paragraphs(text))
    if imprint is not None and text[:imprint].strip():
        cut.append(text[imprint:].strip())
        removed["imprint"] = removed.get("imprint", 0) + 1
        text = text[:imprint].rstrip()
    if not cut:
        return front
    removed_text = "\n\n".join(part for part in (front.removed_text, *cut) if part)
    return FrontMatter(text, removed, removed_text)
