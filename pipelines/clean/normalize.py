"""Text normalisation: the first thing every document goes through, whatever its source.

`normalize_text` is a pure `str -> str` function; normalising its output again changes nothing
(unless the text holds doubly escaped HTML entities, which each pass unescapes once). In order, it

1. repairs mojibake, HTML entities and terminal escapes with ftfy (which also joins surrogate
   pairs and makes a lone surrogate, which cannot be written as UTF-8, U+FFFD), but only for
   text that needs it: ftfy's own "is bad" regex runs at only a few MB/s, far too slow for
   every byte, so an exact pre-check at memory speed (`needs_ftfy`) decides first. Every C1
   control is mojibake to ftfy and comes back as its Windows-1252 character, NEL (U+0085)
   included: in web text that byte is cp1252's "…" read as Latin-1, far more often than an
   EBCDIC line break;
2. makes line breaks `\\n` (CRLF, lone CR, form feed, vertical tab, U+2028/2029);
3. makes tabs and odd spaces (NBSP, en/em/thin spaces, ideographic space, ...) a plain space;
4. removes control characters (C0, and C1 that ftfy did not read as Windows-1252; everything
   but `\\n`), zero-width spaces, BOMs, soft hyphens and the non-characters U+FFFE/U+FFFF;
5. applies Unicode NFC;
6. strips trailing spaces on every line, collapses runs of more than two blank lines to two, and
   strips leading and trailing blank space of the whole text.

Inner runs of spaces are kept: they carry the layout of verse, tables and code.
"""

from __future__ import annotations

import re
import sys
import unicodedata

import ftfy
import numpy as np
from ftfy import badness

# Only what differs from ftfy's defaults, which are the repairs we want (HTML entities, terminal
# escapes, mojibake with its subordinate repairs, surrogates). Curly quotes, ligatures and full-
# width forms are kept: real text, not damage. Control characters (ftfy's set is not ours) and NFC
# we do for all text (steps 4, 5), so output does not depend on tripping the mojibake detector.
# Line breaks are step 2's, for all text: ftfy's on the texts that trip the detector only would
# make `repair` of a CRLF text depend on whether it is broken elsewhere. Left at its default:
# `explain` (fix_text drops the explanation, and the mojibake fix reads its subordinate flags
# only with it on).
_FTFY_CONFIG = ftfy.TextFixerConfig(
    fix_line_breaks=False,
    fix_latin_ligatures=False,
    fix_character_width=False,
    uncurl_quotes=False,
    remove_control_chars=False,
    normalization=None,
)


def _mojibake_suspects() -> str:
    """The characters of which every match of ftfy's BADNESS_RE contains at least one.

    Every alternative of BADNESS_RE names at least one non-ASCII character outside the
    "common", "start_punctuation" and "end_punctuation" categories (curly quotes, dashes, NBSP,
    ellipsis): those three only ever occur next to a rarer character. So text without any of
    the remaining characters cannot be bad, and text with some can only be bad near them.
    The set is read from the installed ftfy's regex so it follows ftfy upgrades;
    tests/unit/pipelines/clean/test_clean_normalize.py checks `needs_ftfy` against
    `ftfy.badness.is_bad`.
    """
    pattern = badness.BADNESS_RE.pattern
    suspects: set[str] = {c for c in pattern if not c.isascii()}
    for low, high in re.findall(r"([^\x00-\x7f])-([^\x00-\x7f])", pattern):
        suspects.update(chr(code) for code in range(ord(low), ord(high) + 1))
    categories = badness.MOJIBAKE_CATEGORIES
    punctuation = set(
        categories["common"] + categories["start_punctuation"] + categories["end_punctuation"]
    )
    return "".join(sorted(suspects - punctuation))


# Longest BADNESS_RE match is 7 characters; a window this wide around every suspect character
# therefore contains every match that character can be part of.
_WINDOW = 8


def _table(characters: str) -> np.ndarray:
    table = np.zeros(sys.maxunicode + 1, dtype=bool)
    table[[ord(c) for c in characters]] = True
    return table


_SUSPECT_TABLE = _table(_mojibake_suspects())
_SURROGATES = "".join(chr(c) for c in range(0xD800, 0xE000))
_HTML_ENTITY = re.compile(r"&(?:[a-zA-Z][a-zA-Z0-9]{1,31}|#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6});")


def _non_ascii(text: str) -> tuple[np.ndarray, np.ndarray]:
    """(positions, code points) of the non-ASCII characters of `text`.

    Python's `re` is slow on non-ASCII str, so character-class tests on such text are done as
    numpy table lookups over code points (about 1 GB/s), not regex scans (tens of MB/s).
    """
    code_points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    positions = np.flatnonzero(code_points > 127)
    return positions, code_points[positions]


def _looks_like_mojibake(text: str, positions: np.ndarray, code_points: np.ndarray) -> bool:
    suspects = positions[_SUSPECT_TABLE[code_points]]
    if len(suspects) == 0:
        return False
    # Runs of suspects less than two windows apart share one search, so Greek or Cyrillic text
    # (whose letters are all suspects) costs a few searches, not one per letter.
    breaks = np.flatnonzero(np.diff(suspects) > 2 * _WINDOW)
    run_starts = np.concatenate(([suspects[0]], suspects[breaks + 1]))
    run_ends = np.concatenate((suspects[breaks], [suspects[-1]])) + 1
    for start, end in zip(run_starts.tolist(), run_ends.tolist()):
        if badness.BADNESS_RE.search(text, max(0, start - _WINDOW), end + _WINDOW):
            return True
    return False


def looks_like_mojibake(text: str) -> bool:
    """Exactly `ftfy.badness.is_bad(text)`, but at memory speed on text without mojibake.

    BADNESS_RE is searched only in small windows around suspect characters (with
    `pattern.search(text, pos, endpos)`, which keeps `^` anchored to the real start). Text in
    Greek or Cyrillic script is all suspects and costs as much as `is_bad`.
    """
    if text.isascii():
        return False
    return _looks_like_mojibake(text, *_non_ascii(text))


def needs_ftfy(text: str) -> bool:
    """Whether ftfy could change `text` under our config: mojibake, an HTML entity, a terminal
    escape sequence, or a surrogate (ftfy joins pairs and replaces lone ones)."""
    if "\x1b" in text or _HTML_ENTITY.search(text):
        return True
    if text.isascii():
        return False
    positions, code_points = _non_ascii(text)
    return bool(_SURROGATE_TABLE[code_points].any()) or _looks_like_mojibake(
        text, positions, code_points
    )


# NEL is not among them: ftfy has read it as Windows-1252's "…" (step 1).
_LINE_BREAKS = "\x0b\x0c\u2028\u2029"
# Tab, NBSP, Ogham space, the U+2000..U+200A spaces, narrow NBSP, math space, ideographic space.
_SPACES = (
    "\t\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u202f\u205f\u3000"
)
# C0 controls but the line breaks and tab, DEL, and any C1 control ftfy left as it was.
_REMOVED = (
    "".join(chr(c) for c in range(0x00, 0x20) if chr(c) not in "\n\t\x0b\x0c\r")
    + "".join(chr(c) for c in range(0x7F, 0xA0))
    + "\xad\u200b\u2060\ufeff\ufffe\uffff"
)
_REPLACEMENT = {c: "\n" for c in _LINE_BREAKS}
_REPLACEMENT.update({c: " " for c in _SPACES})
_REPLACEMENT.update({c: "" for c in _REMOVED})
_ODD_CHARACTER = re.compile("[" + re.escape(_LINE_BREAKS + _SPACES + _REMOVED) + "]")
_ODD_TABLE = _table(_LINE_BREAKS + _SPACES + _REMOVED)
_SURROGATE_TABLE = _table(_SURROGATES)


def _has_odd_character(text: str) -> bool:
    ascii_only = text.isascii()
    if ascii_only:
        code_points = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
    else:
        code_points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    # Vector compares for the ASCII controls (tab included), a table lookup for the rest.
    controls = (code_points < 0x20) & (code_points != 0x0A) & (code_points != 0x0D)
    if controls.any() or (code_points == 0x7F).any():
        return True
    return not ascii_only and bool(_ODD_TABLE[code_points[code_points > 0x7F]].any())


def _replace_odd_character(match: re.Match[str]) -> str:
    return _REPLACEMENT.get(match.group(), "")


# Spelled with a literal prefix, which re searches for at memory speed (r"\n{4,}" is 10x slower).
_EXCESS_BLANK_LINES = re.compile(r"\n\n\n\n+")


def repair(text: str) -> str:
    """Step 1 alone: `text` through ftfy under our config where `needs_ftfy` says ftfy could
    change it, else `text` itself (the same string ftfy would return)."""
    return ftfy.fix_text(text, config=_FTFY_CONFIG) if needs_ftfy(text) else text


def normalize_text(text: str) -> str:
    """The normalised form of `text` (see the module docstring for the steps)."""
    text = repair(text)
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    # The sub, one Python call per odd character, runs only on a hit; it beats str.translate
    # (a dict lookup per character) roughly tenfold.
    if _has_odd_character(text):
        text = _ODD_CHARACTER.sub(_replace_odd_character, text)
    if not unicodedata.is_normalized("NFC", text):
        text = unicodedata.normalize("NFC", text)
    if " \n" in text:
        # Twice as fast as a regex, which would try a match at every space.
        text = "\n".join(line.rstrip(" ") for line in text.split("\n"))
    if "\n\n\n\n" in text:
        text = _EXCESS_BLANK_LINES.sub("\n\n\n", text)
    return text.strip(" \n")
