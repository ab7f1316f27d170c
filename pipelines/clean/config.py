"""The clean stage's settings: `CleanConfig`, every filter's threshold, with the light preset
(its defaults, for curated text) and the web one (`for_source` of a source whose traits say it
holds crawled web pages), and the thresholds measured for the web preset."""

from __future__ import annotations

import dataclasses

from pipelines.clean.filters import C4_BOILERPLATE_PHRASES
from pipelines.clean.language import DEFAULT_THRESHOLD, supported_languages

_GOPHER_TOP_NGRAMS = ((2, 0.20), (3, 0.18), (4, 0.16))
# Thresholds measured on the 72 real article pages with human-checked text in
# ../shared/corpora/web (html/ and aeb-dev/; bench/bench_web_filters.py,
# bench/results/web_filters.md), where Gopher's published values dropped 10 articles (a Black
# Friday deals article whose product lines repeat 5-grams over 0.226 of its text, short news
# items of 2-4 sentences, a WSJ article and an essay with several "..." lines, sports roundups
# full of scores): each is set so that
# no article of the set is dropped by it (a standings table of numbers under 85 words of prose
# is judged by its prose: filters.WordTable.alpha_word_fraction). Gopher's duplicate n-gram
# fractions (0.15 for 5-grams down to 0.10 for 10-grams) are raised by 0.10 each.
_DUPLICATE_NGRAMS = ((5, 0.25), (6, 0.24), (7, 0.23), (8, 0.22), (9, 0.21), (10, 0.20))
_MIN_ALPHA_WORD_FRACTION = 0.7  # Gopher: 0.8
_MAX_ELLIPSIS_LINE_FRACTION = 0.5  # Gopher: 0.3
_MIN_SENTENCES = 2  # C4: 5


@dataclasses.dataclass(frozen=True)
class CleanConfig:
    """Every filter's setting. Defaults are the light preset; `for_source(traits)` of a source of
    web text the web one.

    | field | default | web preset | rejects with |
    |---|---|---|---|
    | min_chars | 50 | 50 | too_short |
    | min_words | 10 | 50 (Gopher) | too_few_words |
    | max_words | None | 100,000 (Gopher) | too_many_words |
    | language | "en" | "en" | language |
    | language_from_source | False | False | language |
    | language_threshold | 0.65 | 0.65 | language |
    | max_duplicate_line_fraction | None | 0.30 | gopher_duplicate_lines |
    | max_duplicate_line_char_fraction | None | 0.20 | gopher_duplicate_line_chars |
    | max_duplicate_paragraph_fraction | None | 0.30 | gopher_duplicate_paragraphs |
    | max_duplicate_paragraph_char_fraction | None | 0.20 | gopher_duplicate_paragraph_chars |
    | max_top_ngram_char_fraction | () | 2: .20, 3: .18, 4: .16 | gopher_top_ngram |
    | max_duplicate_ngram_char_fraction | () | 5: .25 ... 10: .20 | gopher_duplicate_ngrams |
    | mean_word_length | None | (3, 10) | gopher_mean_word_length |
    | max_symbol_word_ratio | None | 0.1 | gopher_symbol_ratio |
    | max_bullet_line_fraction | None | 0.9 | gopher_bullet_lines |
    | max_ellipsis_line_fraction | None | 0.5 | gopher_ellipsis_lines |
    | min_alpha_word_fraction | None | 0.7 | gopher_alpha_words |
    | min_stop_words | None | 2 | gopher_stop_words |
    | c4_terminal_punctuation | False | True | (drops lines) |
    | c4_min_words_per_line | 0 | 3 | (drops lines) |
    | c4_boilerplate_phrases | () | javascript, terms of use, ... | (drops lines) |
    | c4_reject_lorem_ipsum | False | True | c4_lorem_ipsum |
    | c4_reject_curly_brace | False | True | c4_curly_brace |
    | c4_min_sentences | None | 2 | c4_too_few_sentences |

    `language` is one code ("en"), several ("en,fr" or a tuple), or "any" (no language id).
    A document is kept when its most likely language is one of them with probability at least
    `language_threshold`. With `language_from_source`, a document that carries its input's own
    language (meta[SOURCE_LANGUAGE_META], set by a source with `SourceTraits.input_language`: a
    Wikipedia dump's) is held to that one instead, or to none where the identifier does not
    know that language (a known language it cannot check is not a reason to drop). A declared
    language is the document's unless the identifier names another with at least
    `language_threshold` (`filters.language_reason`): a list of names scores low for any
    language and is still its dump's.
    `min_stop_words` (English stop words) only applies to documents identified as English. `max_top_ngram_char_fraction` and `max_duplicate_ngram_char_fraction`
    are ((n, max_fraction), ...) pairs.
    """

    min_chars: int = 50
    min_words: int = 10
    max_words: int | None = None
    language: str | tuple[str, ...] = "en"
    language_from_source: bool = False
    language_threshold: float = DEFAULT_THRESHOLD
    max_duplicate_line_fraction: float | None = None
    max_duplicate_line_char_fraction: float | None = None
    max_duplicate_paragraph_fraction: float | None = None
    max_duplicate_paragraph_char_fraction: float | None = None
    max_top_ngram_char_fraction: tuple[tuple[int, float], ...] = ()
    max_duplicate_ngram_char_fraction: tuple[tuple[int, float], ...] = ()
    mean_word_length: tuple[float, float] | None = None
    max_symbol_word_ratio: float | None = None
    max_bullet_line_fraction: float | None = None
    max_ellipsis_line_fraction: float | None = None
    min_alpha_word_fraction: float | None = None
    min_stop_words: int | None = None
    c4_terminal_punctuation: bool = False
    c4_min_words_per_line: int = 0
    c4_boilerplate_phrases: tuple[str, ...] = ()
    c4_reject_lorem_ipsum: bool = False
    c4_reject_curly_brace: bool = False
    c4_min_sentences: int | None = None

    def __post_init__(self) -> None:
        language = self.language
        if isinstance(language, str) and language != "any":
            language = tuple(code.strip() for code in language.split(",") if code.strip())
        if language != "any":
            language = tuple(language)
            if not language:
                raise ValueError('CleanConfig.language is empty: give codes such as "en" or "any"')
            unknown = sorted(set(language) - set(supported_languages()))
            if unknown:
                raise ValueError(
                    f"CleanConfig.language: unknown language code(s) {unknown}; py3langid knows "
                    f"{', '.join(sorted(supported_languages()))}"
                )
        object.__setattr__(self, "language", language)
        object.__setattr__(
            self, "c4_boilerplate_phrases", tuple(p.lower() for p in self.c4_boilerplate_phrases)
        )
        if not 0.0 <= self.language_threshold <= 1.0:
            raise ValueError(f"language_threshold must be in [0, 1], got {self.language_threshold}")
        for n, _ in self.max_top_ngram_char_fraction + self.max_duplicate_ngram_char_fraction:
            if n < 1:
                raise ValueError(f"n-gram sizes must be >= 1, got {n}")

    @classmethod
    def for_source(cls, traits, **overrides: object) -> CleanConfig:
        """The preset for a source of these traits (its `SourceTraits`, which the caller looks
        up: the sources stand beside this stage): one of crawled web pages (`web_text`) gets the
        Gopher and C4 rules, with their published thresholds where those keep real articles and
        thresholds measured on real article pages where they do not (`_DUPLICATE_NGRAMS`, ...);
        any other only normalisation, length and language. `overrides` replace single fields
        (e.g. `language="any"`)."""
        if traits.web_text:
            preset: dict[str, object] = dict(
                min_words=50,
                max_words=100_000,
                max_duplicate_line_fraction=0.30,
                max_duplicate_line_char_fraction=0.20,
                max_duplicate_paragraph_fraction=0.30,
                max_duplicate_paragraph_char_fraction=0.20,
                max_top_ngram_char_fraction=_GOPHER_TOP_NGRAMS,
                max_duplicate_ngram_char_fraction=_DUPLICATE_NGRAMS,
                mean_word_length=(3.0, 10.0),
                max_symbol_word_ratio=0.1,
                max_bullet_line_fraction=0.9,
                max_ellipsis_line_fraction=_MAX_ELLIPSIS_LINE_FRACTION,
                min_alpha_word_fraction=_MIN_ALPHA_WORD_FRACTION,
                min_stop_words=2,
                c4_terminal_punctuation=True,
                c4_min_words_per_line=3,
                c4_boilerplate_phrases=C4_BOILERPLATE_PHRASES,
                c4_reject_lorem_ipsum=True,
                c4_reject_curly_brace=True,
                c4_min_sentences=_MIN_SENTENCES,
            )
        else:
            preset = {}
        preset.update(overrides)
        return cls(**preset)  # type: ignore[arg-type]

    @classmethod
    def for_run(cls, traits, language: str | None) -> CleanConfig:
        """The preset for a run of a source of these traits (`for_source`) keeping `language`
        ("en", "en,fr", "any"); None: each document's input's own where the source's files name
        one (a Wikipedia dump's <siteinfo>: `SourceTraits.input_language`), else the default,
        en."""
        if language is not None:
            return cls.for_source(traits, language=language)
        own = traits.input_language is not None
        return cls.for_source(traits, language_from_source=own)

    @property
    def uses_word_statistics(self) -> bool:
        return bool(
            self.max_top_ngram_char_fraction
            or self.max_duplicate_ngram_char_fraction
            or self.mean_word_length
            or self.min_alpha_word_fraction is not None
            or self.min_stop_words is not None
        )

    @property
    def uses_c4_lines(self) -> bool:
        return bool(
            self.c4_terminal_punctuation
            or self.c4_min_words_per_line
            or self.c4_boilerplate_phrases
            or self.c4_reject_lorem_ipsum
            or self.c4_reject_curly_brace
        )
