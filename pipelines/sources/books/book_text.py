"""Where things are in a book's text: its blank-line separated paragraphs, the offset of a
line, and where its front (the part the first chapter must start in) ends. The books source's
rule modules (front matter, apparatus, annotations, editorial additions, back matter) all
walk the text by these."""

from __future__ import annotations

# The first chapter must start within this share of the book's lines (or this many lines).
_FRONT_SHARE = 0.1
_FRONT_MIN_LINES = 200


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


def front_end(text: str) -> int:
    """The offset where a book's front (its first tenth, or _FRONT_MIN_LINES lines) ends."""
    lines = max(_FRONT_MIN_LINES, int((text.count("\n") + 1) * _FRONT_SHARE))
    return offset_of_line(text, lines)


def offset_of_line(text: str, line: int) -> int:
    position = -1
    for _ in range(line):
        position = text.find("\n", position + 1)
        if position < 0:
            return len(text)
    return position


def cut_paragraphs(
    text: str, spans: list[tuple[int, int]], dropped: dict[int, str], removed: dict[str, int]
) -> tuple[str, list[str]]:
    """`text` without the paragraphs `dropped` names (paragraph index -> the kind of part), with
    the blank lines after each; each run of paragraphs of one kind is counted once in `removed`
    (updated in place). Returns the kept text and the text of each cut paragraph."""
    kept, cut, position = [], [], 0
    for i in sorted(dropped):
        if not (i - 1 in dropped and dropped[i - 1] == dropped[i]):
            removed[dropped[i]] = removed.get(dropped[i], 0) + 1
        kept.append(text[position : spans[i][0]])
        cut.append(text[spans[i][0] : spans[i][1]])
        position = spans[i][1]
        while position < len(text) and text[position] == "\n":
            position += 1
    kept.append(text[position:])
    return "".join(kept), cut
