from __future__ import annotations

import json
import re._constants as re_constants
import re._parser as re_parser
import unicodedata
from types import SimpleNamespace

import ftfy.bad_codecs  # noqa: F401  (registers "sloppy-windows-1252")
import numpy as np
import pytest
from ftfy import badness
from ftfy.badness import BADNESS_RE, MOJIBAKE_CATEGORIES, is_bad
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.clean import normalize
from pipelines.clean.normalize import looks_like_mojibake, needs_ftfy, normalize_text
from tests.conftest import REPO

CORPORA = REPO.parent / "shared" / "corpora"
BOOKS = CORPORA / "books"


def _book(name: str) -> str:
    return (BOOKS / name).read_bytes().decode("utf-8")


def _multilingual_articles() -> list[str]:
    """Human-checked article text in Korean, Russian, Italian, Portuguese, English, ..."""
    truth = json.loads((CORPORA / "web" / "html" / "ground-truth.subset.json").read_text("utf-8"))
    return [page["articleBody"] for page in truth.values()]


def test_crlf_bom_book_becomes_lf_text_without_bom():
    raw = _book("41-0.txt")  # Sleepy Hollow: UTF-8 BOM, CRLF
    assert raw.startswith("\ufeff") and "\r\n" in raw
    text = normalize_text(raw)
    assert "\r" not in text and "\ufeff" not in text
    assert not text[0].isspace()
    # Same lines, minus the CRs and trailing blanks; curly quotes are kept, not "uncurled".
    assert text.count("\n") == pytest.approx(raw.count("\r\n"), rel=0.05)
    assert "“" in text and "’" in text


def test_whitespace_rules():
    raw = "Title\t\tline \u00a0\n\n\n\n\n\nBody\u2003text.   \r\nNext\rline\x0cpage  "
    assert normalize_text(raw) == "Title  line\n\n\nBody text.\nNext\nline\npage"


def test_blank_line_runs_of_two_are_kept():
    assert normalize_text("a\n\nb\n\n\nc") == "a\n\nb\n\n\nc"


def test_control_and_invisible_characters_removed():
    raw = "bell\x07 null\x00 del\x7f zero\u200bwidth soft\u00adhyphen bom\ufeff end"
    assert normalize_text(raw) == "bell null del zerowidth softhyphen bom end"


def test_control_characters_in_ascii_only_text_are_removed():
    """Issue 27 (mutation survivors): ASCII-only text takes its own path; every C0 control but
    the line breaks and tab, and DEL, are removed from a real paragraph, tab becomes a space,
    vertical tab and form feed line breaks, and a clean ASCII paragraph is left as it is."""
    paragraph = next(p for p in (" ".join(q.split()) for q in _book("2701-0.txt").split("\n\n"))
                     if p.isascii() and len(p) > 200)
    assert normalize_text(paragraph) == paragraph
    words = paragraph.split(" ")
    removed = [chr(c) for c in range(0x20) if chr(c) not in "\t\n\x0b\x0c\r"] + ["\x7f"]
    dirty = " ".join(w + removed[i % len(removed)] for i, w in enumerate(words))
    assert dirty.isascii()
    assert normalize_text(dirty) == paragraph
    assert normalize_text(f"{words[0]}\t{words[1]}\x0b{words[2]}\x0c{words[3]}") == (
        f"{words[0]} {words[1]}\n{words[2]}\n{words[3]}")
    assert normalize_text(words[0] + "\x1f") == words[0] and normalize_text("\x7f") == ""


def test_c1_controls_are_read_as_windows_1252():
    # C1 controls in text are Windows-1252 punctuation decoded as Latin-1 (ftfy's rule).
    assert normalize_text("\x93quoted\x94 \x96 dash") == "“quoted” – dash"


def test_surrogates_joined_or_replaced_so_text_encodes():
    # What json.loads makes of a split pair and of half a pair.
    text = normalize_text("joined \ud83d\ude00 broken \ud800 pair")
    assert text == "joined \U0001f600 broken \ufffd pair"
    text.encode("utf-8")


def test_nfc_composes_accents():
    decomposed = "Cafe\u0301 de\u0301ja\u0300 vu"
    assert normalize_text(decomposed) == "Café déjà vu"
    assert unicodedata.is_normalized("NFC", normalize_text(decomposed))


def test_html_entities_and_terminal_escapes_fixed():
    assert normalize_text("Fish &amp; chips &#8212; &eacute;t&eacute;") == "Fish & chips — été"
    assert normalize_text("\x1b[31mred\x1b[0m text") == "red text"


def test_real_book_mojibake_repaired():
    # A paragraph of Sleepy Hollow with curly quotes and dashes, pushed through the classic
    # UTF-8 -> Windows-1252 mistake (undefined bytes kept as C1, as browsers do); ftfy must
    # restore exactly the normalised original.
    original = normalize_text(_book("41-0.txt"))
    start = original.index("“")
    paragraph = original[start - 400 : start + 400]
    broken = paragraph.encode("utf-8").decode("sloppy-windows-1252")
    assert broken != paragraph and needs_ftfy(broken)
    assert normalize_text(broken) == paragraph


def test_real_multilingual_mojibake_repaired():
    for article in _multilingual_articles():
        clean = normalize_text(article)
        if clean.isascii():
            continue
        broken = clean[:600].encode("utf-8").decode("latin-1")
        assert normalize_text(broken) == normalize_text(clean[:600])


def test_clean_text_skips_ftfy_and_is_idempotent():
    texts = [_book(p.name) for p in sorted(BOOKS.glob("*.txt"))] + _multilingual_articles()
    for text in texts:
        once = normalize_text(text)
        assert normalize_text(once) == once
        assert not looks_like_mojibake(once)


def test_fullwidth_ligatures_and_curly_quotes_preserved():
    text = "“Ｆｕｌｌ” ﬁne — it’s"
    assert normalize_text(text) == text


def _non_ascii_lines() -> list[str]:
    texts = [_book(p.name) for p in sorted(BOOKS.glob("*.txt"))] + _multilingual_articles()
    return [line for text in texts for line in text.splitlines() if not line.isascii()]


def test_mojibake_gate_agrees_with_ftfy_on_real_lines():
    lines = _non_ascii_lines()
    assert len(lines) > 1000
    for line in lines:
        assert looks_like_mojibake(line) == is_bad(line), line
        for codec in ("cp1252", "latin-1", "cp1251", "mac_roman"):
            broken = line.encode("utf-8").decode(codec, errors="replace")
            assert looks_like_mojibake(broken) == is_bad(broken), (codec, broken)


# Characters ftfy's detector reasons about, plus ASCII context, so random strings hit its rules.
_CATEGORY_CHARACTERS = (
    "".join(chars for chars in MOJIBAKE_CATEGORIES.values() if "-" not in chars)
    + "ÃÂÐÎØÙ€œŠ°µ×²³ВГРСΒΓΞΟàâäáèéñΑαаЯ"
)


@settings(max_examples=400, deadline=None)
# ASCII repeated so that about half the characters are plain text, and strings are a mix of
# bad and good (about a fifth are bad).
@given(st.text(alphabet=st.sampled_from(_CATEGORY_CHARACTERS + "ab Z.,!?\n" * 60), max_size=40))
def test_mojibake_gate_agrees_with_ftfy_on_random_text(text):
    assert looks_like_mojibake(text) == is_bad(text)


# Issue 27 (mutation survivors): the fast pre-checks decide which path text takes; the tests
# below pin each pre-check to the exact rule it stands for, and which text reaches ftfy at all.


def _ftfy_forbidden(monkeypatch):
    def refuse(text, config=None):
        raise AssertionError(f"ftfy reached by {text[:60]!r}")

    monkeypatch.setattr(normalize.ftfy, "fix_text", refuse)


def _ascii_paragraphs() -> list[str]:
    paragraphs = [" ".join(p.split()) for p in _book("2701-0.txt").split("\n\n")]
    return [p for p in paragraphs if p.isascii() and len(p) > 200][:200]


def test_clean_text_never_reaches_ftfy(monkeypatch):
    ascii_paragraphs = _ascii_paragraphs()
    clean_lines = [normalize_text(line) for line in _non_ascii_lines()]
    _ftfy_forbidden(monkeypatch)
    assert len(ascii_paragraphs) > 100
    for paragraph in ascii_paragraphs:
        assert normalize_text(paragraph) == paragraph
    for line in clean_lines:
        assert normalize_text(line) == line
    # The code points either side of the surrogates are text, not damage.
    word = ascii_paragraphs[0].split(" ")[0]
    for private in ("\ud7ff", "\ue000"):
        assert normalize_text(f"{word}{private}{word}") == f"{word}{private}{word}"


def test_damaged_text_reaches_ftfy(monkeypatch):
    paragraph = _ascii_paragraphs()[0]
    calls = []
    fix_text = normalize.ftfy.fix_text
    monkeypatch.setattr(normalize.ftfy, "fix_text",
                        lambda text, config=None: calls.append(text) or fix_text(text, config=config))
    for lone in ("\ud800", "\udfff"):  # the first and last surrogate
        assert normalize_text(paragraph + lone) == paragraph + "\ufffd"
    line = next(line for line in _non_ascii_lines() if "é" in line)
    assert normalize_text(line.encode("utf-8").decode("latin-1")) == normalize_text(line)
    assert len(calls) == 3


def test_ftfy_keeps_ligatures_widths_and_format_characters_of_text_it_repairs():
    # The entity sends the text through ftfy; what our config leaves to us must come out as is.
    text = "ﬁne ﬂow Ｆｕｌｌ “q” it’s \ufffc \u206a \ufff9 end"
    assert needs_ftfy(text + " &amp;")
    assert normalize_text(text + " &amp;") == text + " &"


def test_mojibake_suspects_are_the_non_ascii_characters_badness_re_names():
    named: set[int] = set()

    def walk(items):
        for op, arg in items:
            if op is re_constants.LITERAL:
                named.add(arg)
            elif op is re_constants.RANGE:
                named.update(range(arg[0], arg[1] + 1))
            elif op is re_constants.IN:
                walk(arg)
            elif op is re_constants.SUBPATTERN:
                walk(arg[3])
            elif op is re_constants.BRANCH:
                for branch in arg[1]:
                    walk(branch)
            elif op in (re_constants.MAX_REPEAT, re_constants.MIN_REPEAT):
                walk(arg[2])
            elif op in (re_constants.ASSERT, re_constants.ASSERT_NOT):
                walk(arg[1])

    walk(re_parser.parse(BADNESS_RE.pattern, BADNESS_RE.flags))
    punctuation = set("".join(MOJIBAKE_CATEGORIES[name] for name in
                              ("common", "start_punctuation", "end_punctuation")))
    expected = {chr(c) for c in named if c > 0x7F} - punctuation
    assert len(expected) > 300
    assert set(normalize._mojibake_suspects()) == expected
    assert set(np.flatnonzero(normalize._SUSPECT_TABLE).tolist()) == {ord(c) for c in expected}


def test_script_text_costs_one_mojibake_search_per_line(monkeypatch):
    """Letters of Cyrillic or Greek script are all suspects: a line whose suspects are never more
    than two windows apart is searched once, not once per letter."""
    suspects = set(normalize._mojibake_suspects())
    lines = []
    for line in _non_ascii_lines():
        where = [i for i, c in enumerate(line) if c in suspects]
        if len(where) > 20 and all(b - a <= 2 * normalize._WINDOW for a, b in zip(where, where[1:])):
            lines.append(line)
    assert len(lines) >= 3
    searches = []
    search = BADNESS_RE.search
    monkeypatch.setattr(badness, "BADNESS_RE", SimpleNamespace(
        search=lambda *args: searches.append(args) or search(*args)))
    for line in lines:
        searches.clear()
        assert not looks_like_mojibake(line)
        assert len(searches) == 1, line


def _with_every_class(text: str) -> list[str]:
    """`text` with one character inserted, for every ASCII and Latin-1 character, every odd
    character and the code points either side of each."""
    odd = {ord(c) for c in normalize._LINE_BREAKS + normalize._SPACES + normalize._REMOVED}
    codes = set(range(0x100)) | odd | {c - 1 for c in odd} | {c + 1 for c in odd}
    middle = len(text) // 2
    return [text[:middle] + chr(c) + text[middle:] for c in sorted(codes)
            if c >= 0 and not 0xD800 <= c < 0xE000]


def test_odd_character_precheck_agrees_with_the_exact_pattern():
    texts = [_ascii_paragraphs()[0], next(line for line in _non_ascii_lines() if len(line) > 40)]
    for text in texts:
        assert not normalize._has_odd_character(text)
        for variant in _with_every_class(text):
            assert normalize._has_odd_character(variant) == bool(
                normalize._ODD_CHARACTER.search(variant)), repr(variant)


def test_every_odd_space_and_line_break_between_words():
    words = _ascii_paragraphs()[0].split(" ")[:2]
    # The odd spaces normalize.py names (tab, NBSP, Ogham, U+2000..U+200A, narrow NBSP, math and
    # ideographic space), spelled out here: NFC would make a missed U+2000 U+2002, not a space.
    spaces = "\t\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u202f\u205f\u3000"
    for space in spaces:
        assert normalize_text(space.join(words)) == " ".join(words), hex(ord(space))
    # NEL is left out: ftfy reads it as Windows-1252's ellipsis before our line-break rule.
    for line_break in "\x0b\x0c\u2028\u2029":
        assert normalize_text(line_break.join(words)) == "\n".join(words), hex(ord(line_break))


def test_every_c1_control_between_words_is_read_as_windows_1252():
    """Each C1 control is mojibake on its own (U+0080 and U+009F, the ends of the range,
    included): it becomes its Windows-1252 character, or goes where that code page has none."""
    words = _ascii_paragraphs()[0].split(" ")[:2]
    for code in range(0x80, 0xA0):
        expected = bytes([code]).decode("cp1252", errors="ignore")
        assert normalize_text(f"{words[0]} {chr(code)}{words[1]}") == (
            f"{words[0]} {expected}{words[1]}"), hex(code)


def test_nel_is_an_ellipsis_beside_text_latin_1_cannot_hold():
    """NEL is read as Windows-1252's "…" (web text's usual meaning of the byte), not made a line
    break, also on a line of Greek or Russian, where ftfy cannot re-read the line as Latin-1 and
    fixes the C1 control on its own."""
    lines = [line for line in _non_ascii_lines()
             if any(c in line for c in "αβγδεабвгд") and len(line) > 40][:20]
    assert len(lines) >= 5
    for line in lines:
        clean = normalize_text(line)
        middle = clean.index(" ", len(clean) // 2)
        nel = clean[:middle] + "\x85" + clean[middle:]
        assert normalize_text(nel) == clean[:middle] + "…" + clean[middle:], line


def test_last_code_point_passes_the_prechecks():
    # The character tables cover every code point: U+10FFFF (kept; only U+FFFE/U+FFFF of the
    # non-characters are removed) and U+10FFFD, plane 16's last private-use character.
    word = _ascii_paragraphs()[0].split(" ")[0]
    for last in ("\U0010ffff", "\U0010fffd"):
        assert not needs_ftfy(word + last)
        assert normalize_text(f"{word}{last}{word}") == f"{word}{last}{word}"


def _merged_windows(text: str, suspects: set[str]) -> list[tuple[int, int]]:
    """The spans the mojibake search should cover: every suspect's window, the windows that
    overlap joined into one span, clipped to the text."""
    width = normalize._WINDOW
    spans: list[list[int]] = []
    for i, c in enumerate(text):
        if c not in suspects:
            continue
        start, end = max(0, i - width), min(len(text), i + width + 1)
        if spans and start < spans[-1][1]:
            spans[-1][1] = end
        else:
            spans.append([start, end])
    return [(start, end) for start, end in spans]


def test_mojibake_search_covers_each_suspect_window_once(monkeypatch):
    """What keeps `looks_like_mojibake` at memory speed: ftfy's regex searches the windows around
    suspect characters, each character at most once (overlapping windows are one search) and
    nothing farther than a window from a suspect; on real lines and on Greek letters set into an
    English paragraph at every gap from 1 to 3 windows."""
    greek = "αβγδεζηθικλμνξοπρστυφχψω"
    paragraph = " ".join(_ascii_paragraphs()[:5])  # over 1000 characters
    spaced, position = list(paragraph), 5
    for gap in range(1, 3 * normalize._WINDOW + 2):
        position += gap
        spaced[position] = greek[gap % len(greek)]
    texts = ["".join(spaced)] + [line for line in _non_ascii_lines() if not is_bad(line)][:3000]
    suspects = set(normalize._mojibake_suspects())
    searches = []
    search = BADNESS_RE.search
    monkeypatch.setattr(badness, "BADNESS_RE", SimpleNamespace(
        search=lambda text, pos, endpos: searches.append((pos, endpos)) or search(text, pos, endpos)))
    for text in texts:
        searches.clear()
        assert not looks_like_mojibake(text)
        done = [(pos, min(endpos, len(text))) for pos, endpos in searches]
        assert done == _merged_windows(text, suspects), text


def test_repair_of_a_broken_crlf_book_leaves_its_line_breaks_to_step_2():
    """Sleepy Hollow (CRLF lines) with one mojibake word: ftfy repairs the word and keeps every
    CRLF, as `repair` keeps them in the clean book it never hands to ftfy, so step 1's output
    does not depend on whether the text tripped the detector."""
    book = _book("41-0.txt")[:4000]
    assert book.count("\r\n") > 50
    broken = book.replace("Irving", "Irvingâ€™s", 1)
    repaired = normalize.repair(broken)
    assert repaired == book.replace("Irving", "Irving\u2019s", 1)
    assert normalize.repair(book) is book
