"""The clean stage: normalise every document, then keep it or reject it under a named reason.

    from pipelines.clean import CleanConfig, clean_document
    from pipelines.sources import source_traits
    result = clean_document(doc, CleanConfig.for_source(source_traits("webtext")))  # or Reject

`clean_document` is pure. Checks run cheapest and most decisive first, in the order of
FineWeb's pipeline: length, language, Gopher repetition, Gopher quality, then C4's line rules
(which shorten the text, so length is checked again after them). Every threshold is a field of
`CleanConfig`; a rule whose field is None (or empty, or False) is off. The light defaults
(`CleanConfig()`) suit curated text; `CleanConfig.for_source` adds the web rules for a source
whose traits say it holds crawled web pages (`SourceTraits.web_text`).

Scripts written without spaces (Chinese, Japanese, Thai, Lao, Khmer, Myanmar) count each letter
as a word (`filters.split_words`), so the word-count and words-per-line rules hold them to the
same thresholds as English. The rules that measure what such a script does not have are skipped
for a document whose words are mostly in one (`SCRIPT_SKIPPED_RULES`), and a kept document
records which in `meta["rules_skipped"]`.
"""

from __future__ import annotations

import functools

from pipelines.clean import filters
from pipelines.clean.config import CleanConfig
from pipelines.clean.language import (
    identify_language,
    identify_languages,
    supported_languages,
)
from pipelines.clean.normalize import normalize_text
from pipelines.document import (
    LANGUAGE_META,
    LANGUAGE_SCORE_META,
    SOURCE_LANGUAGE_META,
    Document,
    Reject,
)

__all__ = [
    "CleanConfig", "clean_document", "clean_documents", "FILTER_FLAGS", "FILTER_NAMES",
    "language_seen",
    "normalize_text",
]

# Every reason clean_document can reject with, in the order the checks run, and what changes
# its rule (named in the one line of a run that writes no document). Only the language has a
# flag; every other rule is the clean preset's (CleanConfig field named), and the source picks
# the preset (`CleanConfig.for_source`).
_PRESET = "the clean preset of --source:"
FILTER_FLAGS = {
    "too_short": f"{_PRESET} min_chars",
    "too_few_words": f"{_PRESET} min_words",
    "too_many_words": f"{_PRESET} max_words",
    "language": "--language, e.g. --language any",
    "gopher_duplicate_lines": f"{_PRESET} max_duplicate_line_fraction",
    "gopher_duplicate_line_chars": f"{_PRESET} max_duplicate_line_char_fraction",
    "gopher_duplicate_paragraphs": f"{_PRESET} max_duplicate_paragraph_fraction",
    "gopher_duplicate_paragraph_chars": f"{_PRESET} max_duplicate_paragraph_char_fraction",
    "gopher_top_ngram": f"{_PRESET} max_top_ngram_char_fraction",
    "gopher_duplicate_ngrams": f"{_PRESET} max_duplicate_ngram_char_fraction",
    "gopher_mean_word_length": f"{_PRESET} mean_word_length",
    "gopher_alpha_words": f"{_PRESET} min_alpha_word_fraction",
    "gopher_stop_words": f"{_PRESET} min_stop_words",
    "gopher_symbol_ratio": f"{_PRESET} max_symbol_word_ratio",
    "gopher_bullet_lines": f"{_PRESET} max_bullet_line_fraction",
    "gopher_ellipsis_lines": f"{_PRESET} max_ellipsis_line_fraction",
    "c4_lorem_ipsum": f"{_PRESET} c4_reject_lorem_ipsum",
    "c4_curly_brace": f"{_PRESET} c4_reject_curly_brace",
    "c4_too_few_sentences": f"{_PRESET} c4_min_sentences",
}
FILTER_NAMES = tuple(FILTER_FLAGS)

# Rules that do not apply to a document whose words are mostly (over half) letters of a script
# written without spaces: a letter is not a word, so a mean word length of 3-10 letters and
# word n-grams of Gopher's sizes mean nothing there. Thai and Lao also mark no sentence end (a
# space separates sentences), so C4's sentence count does not apply to them either (and C4's
# end-of-line punctuation rule passes their lines, see filters.ends_like_a_sentence).
# HTML extractors whose output keeps only the blocks they judged main content, one block to a
# line (headings, list items, table cells, paragraphs): a document extracted by one carries its
# name in meta["extractor"]. C4's per-line rules (terminal punctuation, words per line) were
# made for raw text without structure, where a short or unpunctuated line is menu or footer
# debris; here they would drop the article's own headings, list items and lines ending in ":"
# or ".)", so they are not applied. The page-level C4 rules still are, and Gopher's duplicate
# lines and paragraphs are counted by their characters only (_repetition_reason).
VETTED_LINE_EXTRACTORS = frozenset({"trafilatura"})
EXTRACTOR_META = "extractor"

SCRIPT_SKIPPED_RULES = {
    "unspaced": ("gopher_top_ngram", "gopher_duplicate_ngrams", "gopher_mean_word_length"),
    "no_sentence_mark": ("c4_too_few_sentences",),
}


class _Measures:
    """The measurements that more than one rule reads, each taken once per text, on first use
    (the word count: length and symbol-ratio rules; the non-blank lines: duplicate-line and
    bullet/ellipsis rules)."""

    def __init__(self, text: str) -> None:
        self.text = text

    @functools.cached_property
    def word_count(self) -> int:
        return filters.count_words(self.text)

    @functools.cached_property
    def lines(self) -> list[str]:
        return filters.nonblank_lines(self.text)


def _length_reason(measures: _Measures, config: CleanConfig) -> tuple[str, str] | None:
    text = measures.text
    if len(text) < config.min_chars:
        return "too_short", f"{len(text)} chars < {config.min_chars}"
    if config.min_words or config.max_words is not None:
        word_count = measures.word_count
        if word_count < config.min_words:
            return "too_few_words", f"{word_count} words < {config.min_words}"
        if config.max_words is not None and word_count > config.max_words:
            return "too_many_words", f"{word_count} words > {config.max_words}"
    return None


def _above(name: str, value: float, limit: float | None) -> tuple[str, str] | None:
    return (name, f"{value:.3f} > {limit}") if limit is not None and value > limit else None


def _repetition_reason(
    measures: _Measures, config: CleanConfig, vetted: bool = False
) -> tuple[str, str] | None:
    """Gopher's repetition rules. In text a vetted extractor kept (`vetted`), lines that repeat
    are the article's own (a Q&A's "Answer:", a recipe's "Step", a deals list's "Buy Now"), so
    duplicate lines and paragraphs are counted by their characters only: a page of repeated
    blocks still shows in gopher_duplicate_line_chars and _paragraph_chars."""
    text = measures.text
    if config.max_duplicate_line_fraction is not None or (
        config.max_duplicate_line_char_fraction is not None
    ):
        lines, line_chars = filters.duplicate_fractions(measures.lines)
        line_limit = None if vetted else config.max_duplicate_line_fraction
        reason = _above("gopher_duplicate_lines", lines, line_limit)
        reason = reason or _above(
            "gopher_duplicate_line_chars", line_chars, config.max_duplicate_line_char_fraction
        )
        if reason:
            return reason
    if config.max_duplicate_paragraph_fraction is not None or (
        config.max_duplicate_paragraph_char_fraction is not None
    ):
        paragraphs, paragraph_chars = filters.duplicate_paragraph_fractions(text)
        paragraph_limit = None if vetted else config.max_duplicate_paragraph_fraction
        reason = _above("gopher_duplicate_paragraphs", paragraphs, paragraph_limit)
        reason = reason or _above(
            "gopher_duplicate_paragraph_chars",
            paragraph_chars,
            config.max_duplicate_paragraph_char_fraction,
        )
        if reason:
            return reason
    return None


def _skipped_rules(text: str, config: CleanConfig) -> tuple[str, ...]:
    """The configured rules that do not apply to the script of `text` (SCRIPT_SKIPPED_RULES)."""
    configured = {
        "gopher_top_ngram": bool(config.max_top_ngram_char_fraction),
        "gopher_duplicate_ngrams": bool(config.max_duplicate_ngram_char_fraction),
        "gopher_mean_word_length": config.mean_word_length is not None,
        "c4_too_few_sentences": config.c4_min_sentences is not None,
    }
    if not any(configured.values()):
        return ()
    unspaced, no_sentence_mark = filters.unspaced_word_fractions(text)
    skipped = []
    if unspaced > 0.5:
        skipped += SCRIPT_SKIPPED_RULES["unspaced"]
    if no_sentence_mark > 0.5:
        skipped += SCRIPT_SKIPPED_RULES["no_sentence_mark"]
    return tuple(rule for rule in skipped if configured[rule])


def _word_reason(
    words: filters.WordTable,
    config: CleanConfig,
    language: str | None,
    skipped: tuple[str, ...],
    ngram_words: filters.WordTable | None = None,
) -> tuple[str, str] | None:
    """Gopher's word rules; the n-gram ones over `ngram_words` where given (a vetted
    extraction's text with each repeated line once: whole lines that repeat are the line
    rules' to judge, and in such text they are the article's own)."""
    ngram_words = ngram_words or words
    top_limits = () if "gopher_top_ngram" in skipped else config.max_top_ngram_char_fraction
    duplicate_limits = (
        () if "gopher_duplicate_ngrams" in skipped else config.max_duplicate_ngram_char_fraction
    )
    sizes = [n for n, _ in top_limits + duplicate_limits]
    if sizes:
        hashes = filters.ngram_hashes(ngram_words.ids, max(sizes))
        for n, limit in top_limits:
            fraction = filters.top_ngram_char_fraction(hashes[n], ngram_words.lengths, n)
            if fraction > limit:
                return "gopher_top_ngram", f"top {n}-gram covers {fraction:.3f} > {limit}"
        for n, limit in duplicate_limits:
            fraction = filters.duplicate_ngram_char_fraction(hashes[n], ngram_words.lengths, n)
            if fraction > limit:
                return (
                    "gopher_duplicate_ngrams",
                    f"duplicate {n}-grams cover {fraction:.3f} > {limit}",
                )
    if config.mean_word_length is not None and "gopher_mean_word_length" not in skipped:
        low, high = config.mean_word_length
        mean = filters.mean_word_length(words)
        if not low <= mean <= high:
            return "gopher_mean_word_length", f"{mean:.2f} not in [{low}, {high}]"
    if config.min_alpha_word_fraction is not None and words.word_count:
        fraction = words.alpha_word_fraction  # of the prose around a table (WordTable)
        if fraction < config.min_alpha_word_fraction:
            return "gopher_alpha_words", f"{fraction:.3f} < {config.min_alpha_word_fraction}"
    if config.min_stop_words is not None and language == "en":
        if words.stop_word_count < config.min_stop_words:
            return "gopher_stop_words", f"{words.stop_word_count} < {config.min_stop_words}"
    return None


def _line_quality_reason(measures: _Measures, config: CleanConfig) -> tuple[str, str] | None:
    if config.max_symbol_word_ratio is not None:
        hashes, ellipses = filters.symbol_to_word_ratios(measures.text, measures.word_count)
        worst_name, worst = ("#", hashes) if hashes >= ellipses else ("ellipsis", ellipses)
        if worst > config.max_symbol_word_ratio:
            return (
                "gopher_symbol_ratio",
                f"{worst_name} per word {worst:.3f} > {config.max_symbol_word_ratio}",
            )
    if config.max_bullet_line_fraction is not None or config.max_ellipsis_line_fraction is not None:
        bullets, ellipses = filters.bullet_and_ellipsis_line_fractions(measures.lines)
        reason = _above("gopher_bullet_lines", bullets, config.max_bullet_line_fraction)
        reason = reason or _above(
            "gopher_ellipsis_lines", ellipses, config.max_ellipsis_line_fraction
        )
        if reason:
            return reason
    return None


def _wanted_languages(doc: Document, config: CleanConfig) -> str | tuple[str, ...]:
    """The languages `doc` is kept in: its source's own (see CleanConfig) or the config's."""
    own = doc.meta.get(SOURCE_LANGUAGE_META) if config.language_from_source else None
    if not own:
        return config.language
    return (own,) if own in supported_languages() else "any"


def _declared_language(doc: Document) -> str | None:
    """The language `doc`'s input declares (meta[SOURCE_LANGUAGE_META]) where the identifier
    knows it: evidence the identifier overrides only when sure (filters.language_reason)."""
    own = doc.meta.get(SOURCE_LANGUAGE_META)
    return own if own in supported_languages() else None


def language_seen(result: Document | Reject) -> str | None:
    """The language identified in a result of clean_document (None where none was)."""
    if isinstance(result, Reject):
        return result.detail.split(" ", 1)[0] if result.reason == "language" else None
    return result.meta.get("language")


def clean_document(doc: Document, config: CleanConfig) -> Document | Reject:
    """The normalised document, or a Reject naming the first rule it failed (one of
    FILTER_NAMES) with the measured value in `detail` and the normalised text in `text`.

    A kept document whose language was identified carries it as `meta["language"]`, and
    its probability as `meta["language_score"]`.
    """
    measured = _measured(doc, config)
    if isinstance(measured, Reject):
        return measured
    wanted = _wanted_languages(doc, config)
    label = None
    if wanted != "any":
        label = identify_language(measured.text, config.language_threshold)
    return _judged(doc, config, measured, wanted, label)


def clean_documents(
    docs: list[Document], config: CleanConfig
) -> list[Document | Reject | Exception]:
    """[clean_document(doc, config) for doc in docs], the same results, with the languages of
    all of them identified in one `identify_languages` call (per document, that costs a short
    web page less than half of what identify_language does). A document clean_document would
    raise on has the exception in its place; the others keep their results."""
    results: list = [None] * len(docs)
    asked: dict[int, tuple] = {}  # index -> (measures, wanted languages)
    for index, doc in enumerate(docs):
        try:
            measured = _measured(doc, config)
            if isinstance(measured, Reject):
                results[index] = measured
            else:
                asked[index] = (measured, _wanted_languages(doc, config))
        except Exception as error:
            results[index] = error
    labelled = [index for index, (_, wanted) in asked.items() if wanted != "any"]
    texts = [asked[index][0].text for index in labelled]
    labels = dict(zip(labelled, _languages(texts, config.language_threshold)))
    for index, (measured, wanted) in asked.items():
        label = labels.get(index)
        if isinstance(label, Exception):
            results[index] = label
            continue
        try:
            results[index] = _judged(docs[index], config, measured, wanted, label)
        except Exception as error:
            results[index] = error
    return results


def _languages(texts: list[str], threshold: float) -> list:
    """identify_languages(texts, threshold); where that raises, each text's own identify_language
    or the exception it raised, so one text the identifier fails on costs no other its label."""
    try:
        return identify_languages(texts, threshold)
    except Exception:
        labels: list = []
        for text in texts:
            try:
                labels.append(identify_language(text, threshold))
            except Exception as error:
                labels.append(error)
        return labels


def _measured(doc: Document, config: CleanConfig) -> _Measures | Reject:
    """The measures of `doc`'s normalised text, or its Reject for the length rules."""
    measures = _Measures(normalize_text(doc.text))
    reason = _length_reason(measures, config)
    return _rejected(doc, measures.text, reason) if reason else measures


def _rejected(doc: Document, text: str, reason_detail: tuple[str, str]) -> Reject:
    reason, detail = reason_detail
    return Reject(doc.id, doc.source, reason, detail, text, url=doc.url)


def _judged(
    doc: Document,
    config: CleanConfig,
    measures: _Measures,
    wanted: str | tuple[str, ...],
    label: tuple[str, float] | None,
) -> Document | Reject:
    """clean_document after the length rules, given the language `label` identified (None
    where `wanted` is "any")."""
    text = measures.text

    def reject(reason_detail: tuple[str, str]) -> Reject:
        return _rejected(doc, text, reason_detail)

    language, confidence = label or (None, 0.0)
    if label is not None:
        declared = _declared_language(doc)
        reason = filters.language_reason(
            language, confidence, wanted, config.language_threshold, declared
        )
        if reason:
            return reject(reason)
        if declared and language != declared:  # labelled by its input, not the identifier
            language, confidence = declared, None

    vetted = doc.meta.get(EXTRACTOR_META) in VETTED_LINE_EXTRACTORS
    reason = _repetition_reason(measures, config, vetted)
    if reason:
        return reject(reason)
    skipped = _skipped_rules(text, config)
    if config.uses_word_statistics:
        words = filters.word_table(text)
        ngram_words = None
        if vetted and len(set(measures.lines)) < len(measures.lines):
            ngram_words = filters.word_table("\n".join(dict.fromkeys(measures.lines)))
        reason = _word_reason(words, config, language, skipped, ngram_words)
        if reason:
            return reject(reason)
    reason = _line_quality_reason(measures, config)
    if reason:
        return reject(reason)

    if config.uses_c4_lines:
        c4 = filters.c4_filter_lines(
            text,
            require_terminal_punctuation=config.c4_terminal_punctuation and not vetted,
            min_words_per_line=0 if vetted else config.c4_min_words_per_line,
            boilerplate_phrases=config.c4_boilerplate_phrases,
            reject_lorem_ipsum=config.c4_reject_lorem_ipsum,
            reject_curly_brace=config.c4_reject_curly_brace,
        )
        if c4.reject:
            return reject((c4.reject, "a kept line contains it"))
        if (
            config.c4_min_sentences is not None
            and "c4_too_few_sentences" not in skipped
            and c4.sentence_count < config.c4_min_sentences
        ):
            return reject(
                (
                    "c4_too_few_sentences",
                    f"{c4.sentence_count} < {config.c4_min_sentences} "
                    f"after removing {c4.lines_removed} lines",
                )
            )
        reason = _length_reason(_Measures(c4.text), config)
        if reason:
            return reject(reason)
        text = c4.text

    meta = dict(doc.meta)
    if language is not None:
        meta[LANGUAGE_META] = language
        if confidence is not None:
            meta[LANGUAGE_SCORE_META] = f"{confidence:.4f}"
    if skipped:
        meta["rules_skipped"] = ",".join(skipped)
    # made directly: dataclasses.replace walks the fields in Python (~2 us a document)
    return Document(doc.id, doc.source, text, doc.url, doc.title, meta)
