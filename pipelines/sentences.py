"""Rule-based sentence splitting: one sentence rule for the whole project (BERT's one sequence
per sentence in the tokenize stage, and the cleaner's sentence counts)."""

from __future__ import annotations

import re

_ABBREVIATIONS = frozenset(
    """
    mr mrs ms messrs mme mlle dr prof sr jr st mt rev hon esq gen col capt cmdr lt sgt gov sen
    rep pres supt insp vs v cf viz al ca approx no nos vol vols fig figs ch pp ed eds dept univ
    inc ltd co corp bros jan feb mar apr jun jul aug sep sept oct nov dec
    """.split()
)
# A sentence end: terminal punctuation, then any closing quotes or brackets.
_SENTENCE_END = re.compile(r"(?:[.!?…]+|[。！？]+)[\"'”’»)\]」』]*")
_OPENERS = "\"'“‘«([¿¡「『"
_TRAILING_WORD = re.compile(r"[\w.]*\Z")
_DOTTED_ACRONYM = re.compile(r"(?:[^\W\d_]\.)+[^\W\d_]")
_BLANK_LINE = re.compile(r"\n[ \t]*\n")
# A line that starts a list item: "1. ", "2) ", "a) ", or a bullet.
_LIST_ITEM = re.compile(r"(?:\d{1,3}[.)]|[a-z][.)]|[•‣◦●▪■*-])\s")
# A line shorter than this fraction of its paragraph's longest line ends a sentence even
# without punctuation: a heading, a speaker's name, a line of verse; longer lines are hard
# wraps (Project Gutenberg wraps prose at ~70 columns) and are joined.
_SHORT_LINE_FRACTION = 0.6


def _is_sentence_start(text: str, position: int) -> bool:
    while position < len(text) and text[position] in _OPENERS:
        position += 1
    if position >= len(text):
        return False
    char = text[position]
    # Upper case, or a letter of a script without case (CJK, Arabic, ...).
    return char.isalpha() and not char.islower()


def _ends_sentence(segment: str, match: re.Match[str], sentence_start: int) -> bool:
    end = match.end()
    punctuation = match.group()
    if punctuation[0] in "。！？":
        return True
    if end < len(segment) and not segment[end].isspace():
        return False  # "3.14", "e.g.,", "Yahoo!'s"
    next_start = end
    while next_start < len(segment) and segment[next_start].isspace():
        next_start += 1
    if next_start == len(segment):
        return True
    if not _is_sentence_start(segment, next_start):
        return False
    if punctuation.rstrip("\"'”’»)]") != ".":
        return True  # "!", "?", "..." before a capital
    # The word the period ends: the run of letters, digits and inner periods before it, so
    # that "boat—Mr." and "(Dr." give "Mr" and "Dr". The look-back is bounded so a long
    # sentence full of abbreviations stays linear.
    lookback = max(sentence_start, match.start() - 32)
    word = _TRAILING_WORD.search(segment, lookback, match.start()).group()
    word_start = match.start() - len(word)
    if word.lower() in _ABBREVIATIONS or _DOTTED_ACRONYM.fullmatch(word):
        return False  # "Mr. Starbuck", "e.g. The", "the U.S. Navy"
    if len(word) == 1 and word.isalpha():
        return False  # an initial: "J. R. Hartley"
    if word.isdigit() and word_start == sentence_start:
        return False  # an enumerator: "1. She knows"
    return True


def _split_segment(segment: str) -> list[str]:
    sentences = []
    start = 0
    for match in _SENTENCE_END.finditer(segment):
        if _ends_sentence(segment, match, start):
            sentence = segment[start : match.end()].strip()
            if sentence:
                sentences.append(sentence)
            start = match.end()
            while start < len(segment) and segment[start].isspace():
                start += 1
    rest = segment[start:].strip()
    if rest:
        sentences.append(rest)
    return sentences


def _segments(paragraph: str) -> list[str]:
    """A paragraph's runs of hard-wrapped lines, each joined into one line. A run ends after a
    short line and before a list item."""
    lines = [line.strip() for line in paragraph.split("\n")]
    lines = [line for line in lines if line]
    if len(lines) <= 1:
        return lines
    short = _SHORT_LINE_FRACTION * max(len(line) for line in lines)
    segments: list[str] = []
    current: list[str] = []
    for line in lines:
        if current and _LIST_ITEM.match(line):
            segments.append(" ".join(current))
            current = []
        current.append(line)
        if len(line) < short:
            segments.append(" ".join(current))
            current = []
    if current:
        segments.append(" ".join(current))
    return segments


def split_sentences(text: str) -> list[str]:
    """Rule-based sentence splitting; returns the non-empty sentences, stripped.

    Blank lines are paragraph breaks and always end a sentence; within a paragraph, single
    newlines are hard wraps and are joined with a space, except after a short line (see
    `_SHORT_LINE_FRACTION`) and before a list item. A sentence ends at . ! ? … (and closing quotes or brackets after
    them) followed by whitespace and an upper-case (or caseless-script) letter, or at 。！？.
    A period does not end a sentence after an abbreviation (Mr., Dr., e.g., U.S.), an initial,
    or a list number at the start of a sentence; a period inside a number (3.14) never does.
    """
    sentences: list[str] = []
    for paragraph in _BLANK_LINE.split(text):
        for segment in _segments(paragraph):
            sentences.extend(_split_segment(segment))
    return sentences
