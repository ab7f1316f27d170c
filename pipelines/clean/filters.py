"""The measurements behind the quality filters: pure functions from text to numbers.

The rules are those of Gopher (Rae et al. 2021, "Scaling Language Models", appendix A: the
MassiveText quality and repetition filters) and C4 (Raffel et al. 2020, as implemented in
TensorFlow Datasets' c4_utils). `pipelines.clean.clean_document` compares these measurements
with the thresholds in `CleanConfig`.

Words are whitespace-separated tokens, except in the scripts written without spaces between
words (Chinese and Japanese Han, Hiragana and Katakana, Thai, Lao, Khmer, Myanmar), where a
whitespace token is a phrase or a whole paragraph: there each letter counts as one word (with
the punctuation after it), so a Japanese article has about as many "words" as characters and
word counts, words per line and n-grams measure it as they measure English. For the n-gram
measures words are normalised (lowercased, surrounding punctuation stripped; tokens that are
only punctuation dropped) and character fractions are taken over the characters of those
normalised words, so "The" and "the," are the same word and punctuation does not pad the
denominator.
"""

from __future__ import annotations

import dataclasses
import re
import string

import numpy as np

# Gopher: "at least two of the following English words: the, be, to, of, and, that, have, with".
STOP_WORDS_EN = frozenset({"the", "be", "to", "of", "and", "that", "have", "with"})
# Characters that open a bulleted line (ASCII hyphen and asterisk are how plain-text lists and
# scraped <li> items usually come out; "・" is the Japanese bullet).
BULLETS = ("•", "‣", "◦", "●", "○", "▪", "▫", "■", "□", "▶", "◀", "–", "-", "*", "・")
ELLIPSES = ("...", "…")
# C4 (TFDS c4_utils): a kept line must end in one of these, and not in an ellipsis. C4's list
# is English's; the sentence ends of Chinese and Japanese (with their closing quotes), Hindi
# and Bengali (danda), Arabic and Urdu, Greek, Amharic, Myanmar and Khmer are added.
TERMINAL_PUNCTUATION = (
    *(".", "!", "?", '"', "”", "’", "'"),
    *("。", "！", "？", "．", "」", "』", "।", "॥", "؟", "۔", "\u037e", "።", "။", "។"),
)
# C4 drops every line containing one of these (TFDS _POLICY_SUBSTRINGS, plus "javascript": the
# "please enable JavaScript" warnings).
C4_BOILERPLATE_PHRASES = (
    "javascript",
    "terms of use",
    "privacy policy",
    "cookie policy",
    "uses cookies",
    "use of cookies",
    "use cookies",
)

_PUNCTUATION = (
    string.punctuation + "“”‘’«»„‚–—…¡¿·•" + "。、，．！？：；「」『』（）【】〔〕《》〈〉・‥～"
)
# Letters of the scripts written without spaces between words (see the module docstring).
_UNSPACED_BMP = (
    "\u0e00-\u0eff"  # Thai, Lao
    "\u1000-\u109f"  # Myanmar
    "\u1780-\u17ff"  # Khmer
    "\u3005-\u3007"  # 々 〆 〇
    "\u3040-\u309f"  # Hiragana
    "\u30a1-\u30fa\u30fc-\u30ff\u31f0-\u31ff"  # Katakana, not its middle dot (a bullet)
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # Han
    "\uff66-\uff9d"  # half-width Katakana
)
_UNSPACED = _UNSPACED_BMP + "\U00020000-\U0003134f"  # and the supplementary-plane Han
_UNSPACED_LETTER = re.compile(f"[{_UNSPACED}]")
# Text with supplementary-plane Han holds common Han too: the test whether a text has unspaced
# letters at all leaves them out (a character class within one plane is searched faster).
_UNSPACED_BMP_LETTER = re.compile(f"[{_UNSPACED_BMP}]")
# One unspaced-script letter with the marks and punctuation after it (Thai vowel and tone marks
# are not word characters), or a run of other non-space characters: on text without unspaced
# letters, exactly str.split().
_WORD = re.compile(f"[{_UNSPACED}][^\\s\\w]*|[^\\s{_UNSPACED}]+")
# Scripts that mark no sentence end (a space separates sentences): Thai, Lao.
_NO_SENTENCE_MARK = re.compile("[\u0e00-\u0eff]")
_HAS_LETTER = re.compile(r"[^\W\d_]")
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
# Gopher's least words for a page (its min_words, the web preset's): the prose around a table
# that is a page by this measure is what the alpha-word rule judges (WordTable).
TABLE_PROSE_MIN_WORDS = 50
# An odd 64-bit multiplier for the polynomial n-gram hash (wrapping uint64 arithmetic):
# collisions among a document's few hundred thousand n-grams are vanishingly unlikely, and the
# value is fixed, so results are the same in every process.
_NGRAM_HASH_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)


@dataclasses.dataclass(frozen=True)
class WordTable:
    """A document's words as arrays: what every word-level measure is computed from.

    `word_count` counts raw words (`split_words`); `ids`/`lengths` describe the normalised words in
    order (ids are dense, equal words share an id). `prose_word_count` and
    `prose_alpha_word_count` count the words of the lines that are not table rows
    (`is_table_row`), and of those the ones with a letter.
    """

    word_count: int
    alpha_word_count: int
    stop_word_count: int
    ids: np.ndarray  # int64, one per normalised word
    lengths: np.ndarray  # int64 characters of each normalised word
    prose_word_count: int
    prose_alpha_word_count: int

    @property
    def alpha_word_fraction(self) -> float:
        """Gopher's share of words with a letter (it keeps 0.8). A table's cells are data,
        numbers by nature (standings, prices, snap counts), so where a page has tables and
        TABLE_PROSE_MIN_WORDS words of prose besides, the share is that of its prose: an
        article with a table of numbers is judged by its sentences. A page short of that much
        prose (a table under a heading, a list of figures) is measured over all its words."""
        if self.prose_word_count < self.word_count and (
            self.prose_word_count >= TABLE_PROSE_MIN_WORDS
        ):
            return self.prose_alpha_word_count / self.prose_word_count
        return self.alpha_word_count / self.word_count if self.word_count else 1.0


def word_table(text: str) -> WordTable:
    """Build the `WordTable` of `text` (one pass over the tokens; per-word work is done once per
    distinct token, which is a small fraction of the tokens in real text)."""
    tokens = split_words(text)
    token_ids: dict[str, int] = {}
    token_index = np.fromiter(
        (token_ids.setdefault(t, len(token_ids)) for t in tokens), dtype=np.int64, count=len(tokens)
    )
    distinct = list(token_ids)  # in id order
    has_letter = np.fromiter(
        (_HAS_LETTER.search(t) is not None for t in distinct), dtype=bool, count=len(distinct)
    )
    normalised = [t.strip(_PUNCTUATION).lower() for t in distinct]
    is_stop = np.fromiter((w in STOP_WORDS_EN for w in normalised), dtype=bool, count=len(distinct))
    word_ids: dict[str, int] = {}
    normalised_id = np.fromiter(
        (word_ids.setdefault(w, len(word_ids)) if w else -1 for w in normalised),
        dtype=np.int64,
        count=len(distinct),
    )
    normalised_length = np.fromiter(
        (len(w) for w in normalised), dtype=np.int64, count=len(distinct)
    )
    ids = normalised_id[token_index]
    keep = ids >= 0
    alpha_word_count = int(has_letter[token_index].sum())
    prose_word_count, prose_alpha_word_count = len(tokens), alpha_word_count
    prose = _prose(text)
    if prose is not None:
        prose_tokens = split_words(prose)
        prose_word_count = len(prose_tokens)
        prose_alpha_word_count = sum(_HAS_LETTER.search(t) is not None for t in prose_tokens)
    return WordTable(
        word_count=len(tokens),
        alpha_word_count=alpha_word_count,
        stop_word_count=int(is_stop[token_index].sum()),
        ids=ids[keep],
        lengths=normalised_length[token_index][keep],
        prose_word_count=prose_word_count,
        prose_alpha_word_count=prose_alpha_word_count,
    )


def is_table_row(line: str) -> bool:
    """Whether `line` is a row of a table as an extractor writes one (trafilatura, Markdown):
    cells between "|" marks, the first and the last character of the stripped line."""
    line = line.strip()
    return len(line) >= 2 and line[0] == "|" and line[-1] == "|"


def _prose(text: str) -> str | None:
    """The lines of `text` that are not table rows; None when it has no table row."""
    if "|" not in text:
        return None
    lines = text.split("\n")
    prose = [line for line in lines if not is_table_row(line)]
    return "\n".join(prose) if len(prose) < len(lines) else None


def has_unspaced_letters(text: str) -> bool:
    """Whether `text` has letters of a script written without spaces (see the module
    docstring)."""
    return not text.isascii() and _UNSPACED_BMP_LETTER.search(text) is not None


def split_words(text: str) -> list[str]:
    """The words of `text`: whitespace-separated tokens, and each letter of a script written
    without spaces on its own (see the module docstring)."""
    return _WORD.findall(text) if has_unspaced_letters(text) else text.split()


def count_words(text: str) -> int:
    """`len(split_words(text))`. Text without unspaced-script letters is counted in numpy over
    its UTF-8 bytes (several times faster than `len(text.split())`, and equal to it on
    normalised text, whose only whitespace is ASCII)."""
    if has_unspaced_letters(text):
        return len(_WORD.findall(text))
    data = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    if len(data) == 0:
        return 0
    space = (data == 0x20) | ((data >= 0x09) & (data <= 0x0D))
    return int(np.count_nonzero(space[:-1] & ~space[1:])) + int(not space[0])


def unspaced_word_fractions(text: str) -> tuple[float, float]:
    """(fraction of the words of `text` that are letters of a script written without spaces,
    fraction that are letters of Thai or Lao, which mark no sentence end either)."""
    if not has_unspaced_letters(text):
        return 0.0, 0.0
    words = _WORD.findall(text)
    unspaced = sum(_UNSPACED_LETTER.match(w) is not None for w in words)
    unmarked = sum(_NO_SENTENCE_MARK.match(w) is not None for w in words)
    return unspaced / len(words), unmarked / len(words)


def language_reason(
    identified: str,
    probability: float,
    wanted: tuple[str, ...],
    threshold: float,
    declared: str | None = None,
) -> tuple[str, str] | None:
    """Why a document the identifier labels `identified` (with `probability`) is not kept in
    the languages `wanted`; None: it is kept. A language the document's input declares
    (`declared`: a Wikipedia dump's <siteinfo>) is the document's unless the identifier names
    another with at least `threshold`: a list of names or titles scores low for any language
    (the English dump's "List of anthropologists": pcm p=0.355) and is still the dump's."""
    if declared is not None and identified != declared and probability < threshold:
        if declared in wanted:
            return None
        return ("language", f"{declared} declared, {identified} p={probability:.3f}, "
                f"not {','.join(wanted)}")  # fmt: skip
    if identified not in wanted:
        return ("language", f"{identified} p={probability:.3f}, not {','.join(wanted)}")
    if probability < threshold and identified != declared:
        return ("language", f"{identified} p={probability:.3f} < {threshold}")
    return None


def ends_like_a_sentence(line: str) -> bool:
    """C4's test for a kept line: it ends in terminal punctuation, not an ellipsis. A line
    ending in a Thai or Lao letter passes: those scripts end a sentence with a space."""
    if line.endswith(ELLIPSES):
        return False
    return line.endswith(TERMINAL_PUNCTUATION) or _NO_SENTENCE_MARK.match(line[-1:]) is not None


def mean_word_length(words: WordTable) -> float:
    """Mean characters per normalised word (Gopher keeps 3..10)."""
    return float(words.lengths.mean()) if len(words.lengths) else 0.0


def symbol_to_word_ratios(text: str, word_count: int) -> tuple[float, float]:
    """(hash symbols, ellipses) per word (Gopher keeps each below 0.1)."""
    if word_count == 0:
        return 0.0, 0.0
    ellipses = text.count("...") + text.count("…")
    return text.count("#") / word_count, ellipses / word_count


def nonblank_lines(text: str) -> list[str]:
    """The lines of `text` that are not blank, stripped: what the line rules measure."""
    return [line.strip() for line in text.split("\n") if line.strip()]


def bullet_and_ellipsis_line_fractions(lines: list[str]) -> tuple[float, float]:
    """(fraction of lines starting with a bullet, fraction ending in an ellipsis), over
    `nonblank_lines` (Gopher keeps at most 0.9 and 0.3)."""
    if not lines:
        return 0.0, 0.0
    bullets = sum(line.startswith(BULLETS) for line in lines)
    ellipses = sum(line.endswith(ELLIPSES) for line in lines)
    return bullets / len(lines), ellipses / len(lines)


def duplicate_fractions(parts: list[str]) -> tuple[float, float]:
    """(fraction of parts that repeat an earlier part, fraction of characters in those parts).

    Gopher's duplicate line / paragraph fractions: the first occurrence is not a duplicate.
    """
    if not parts:
        return 0.0, 0.0
    seen: set[str] = set()
    duplicates = duplicate_chars = 0
    for part in parts:
        if part in seen:
            duplicates += 1
            duplicate_chars += len(part)
        else:
            seen.add(part)
    total_chars = sum(len(part) for part in parts)
    return duplicates / len(parts), duplicate_chars / max(total_chars, 1)


def duplicate_line_fractions(text: str) -> tuple[float, float]:
    """`duplicate_fractions` over non-blank lines (Gopher keeps 0.30 / 0.20)."""
    return duplicate_fractions(nonblank_lines(text))


def duplicate_paragraph_fractions(text: str) -> tuple[float, float]:
    """`duplicate_fractions` over blank-line separated paragraphs (Gopher keeps 0.30 / 0.20)."""
    paragraphs = [p.strip() for p in _PARAGRAPH_BREAK.split(text) if p.strip()]
    return duplicate_fractions(paragraphs)


def ngram_hashes(ids: np.ndarray, max_n: int) -> dict[int, np.ndarray]:
    """{n: uint64 hash of the n-gram starting at each position} for n = 1..max_n, built
    incrementally (each n from n-1 with one vector multiply-add)."""
    values = ids.astype(np.uint64) + np.uint64(1)
    hashes = {1: values}
    current = values
    for n in range(2, max_n + 1):
        if len(values) < n:
            hashes[n] = np.zeros(0, dtype=np.uint64)
            continue
        current = current[:-1] * _NGRAM_HASH_MULTIPLIER + values[n - 1 :]
        hashes[n] = current
    return hashes


def _ngram_char_lengths(lengths: np.ndarray, n: int) -> np.ndarray:
    ends = np.concatenate(([0], np.cumsum(lengths)))
    return ends[n:] - ends[:-n]


def top_ngram_char_fraction(hashes: np.ndarray, lengths: np.ndarray, n: int) -> float:
    """Characters covered by the most frequent n-gram (count x its length) over all word
    characters; 0 when no n-gram occurs twice (Gopher keeps 0.20 / 0.18 / 0.16 for n=2/3/4)."""
    total_chars = int(lengths.sum())
    if len(hashes) == 0 or total_chars == 0:
        return 0.0
    _, first_index, counts = np.unique(hashes, return_index=True, return_counts=True)
    best = int(np.argmax(counts))
    if counts[best] < 2:
        return 0.0
    ngram_chars = int(_ngram_char_lengths(lengths, n)[first_index[best]])
    return float(counts[best]) * ngram_chars / total_chars


def duplicate_ngram_char_fraction(hashes: np.ndarray, lengths: np.ndarray, n: int) -> float:
    """Fraction of word characters inside any n-gram that occurs more than once, each character
    counted once however many duplicate n-grams overlap it (Gopher keeps 0.15 for n=5 down to
    0.10 for n=10). All occurrences count, the first one included."""
    total_chars = int(lengths.sum())
    if len(hashes) == 0 or total_chars == 0:
        return 0.0
    _, inverse, counts = np.unique(hashes, return_inverse=True, return_counts=True)
    starts = np.flatnonzero(counts[inverse.ravel()] > 1)
    if len(starts) == 0:
        return 0.0
    # Mark words covered by a duplicated n-gram: +1 where one starts, -1 just past its end.
    size = len(lengths)
    delta = np.bincount(starts, minlength=size + 1) - np.bincount(starts + n, minlength=size + 1)
    covered = np.cumsum(delta[:size]) > 0
    return float(lengths[covered].sum()) / total_chars


@dataclasses.dataclass(frozen=True)
class C4Lines:
    """Result of the C4 line rules: the kept text, the sentences in it, and the rule that
    rejected the whole page (`reject` is "" when the page is kept)."""

    text: str
    sentence_count: int
    reject: str = ""
    lines_removed: int = 0


def c4_filter_lines(
    text: str,
    *,
    require_terminal_punctuation: bool,
    min_words_per_line: int,
    boilerplate_phrases: tuple[str, ...],
    reject_lorem_ipsum: bool,
    reject_curly_brace: bool,
) -> C4Lines:
    """Apply C4's line rules in the order of TFDS c4_utils: a line is dropped if it lacks terminal
    punctuation (or ends in an ellipsis), has fewer than `min_words_per_line` words, or contains
    a boilerplate phrase; the page is rejected if a surviving line contains "lorem ipsum"
    ("c4_lorem_ipsum") or a curly brace ("c4_curly_brace", C4's test for code).

    Two small departures: the "javascript" and policy phrases are one list, checked before the
    curly brace (C4 checks the policy phrases after it); and a paragraph break before a kept line
    is kept (C4 joins kept lines with single newlines), so the text keeps its paragraphs.
    """
    from pipelines.sentences import split_sentences  # one sentence rule for the whole project

    kept: list[str] = []
    sentence_count = 0
    lines_removed = 0
    paragraph_break = False
    for raw_line in text.split("\n"):
        line = raw_line.strip()
        if not line:
            paragraph_break = True
            continue
        if require_terminal_punctuation and not ends_like_a_sentence(line):
            lines_removed += 1
            continue
        if count_words(line) < min_words_per_line:
            lines_removed += 1
            continue
        lower = line.lower()
        if reject_lorem_ipsum and "lorem ipsum" in lower:
            return C4Lines("", 0, reject="c4_lorem_ipsum")
        if any(phrase in lower for phrase in boilerplate_phrases):
            lines_removed += 1
            continue
        if reject_curly_brace and "{" in line:
            return C4Lines("", 0, reject="c4_curly_brace")
        if kept:
            kept.append("\n\n" if paragraph_break else "\n")
        kept.append(line)
        paragraph_break = False
        sentence_count += len(split_sentences(line))
    return C4Lines("".join(kept), sentence_count, lines_removed=lines_removed)
