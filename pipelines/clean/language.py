"""Language identification with py3langid (its naive Bayes model ships inside the package, so
nothing is downloaded; loading it takes about a second, once per worker process).

py3langid walks the UTF-8 bytes in Python at about 1-2 MB/s, the slowest step of cleaning, so a
document is classified on a bounded sample: all of it up to 2 x `SAMPLE_CHARS` characters, else
its first `SAMPLE_CHARS` plus as many from the middle. The middle slice matters: a Project
Gutenberg book in French still opens with an English licence header. (On the shared corpora,
1,000-character slices give the same languages as 2,000 at 1.5x the speed.)
"""

from __future__ import annotations

import functools
import threading

SAMPLE_CHARS = 1000

_load_lock = threading.Lock()


@functools.cache
def _identifier():  # -> py3langid.langid.LanguageIdentifier
    # Imported here so that importing pipelines.clean stays cheap on the launcher.
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    # norm_probs: confidences are probabilities in [0, 1] (py3langid calibrates them by text
    # length), which is what a user-set threshold can mean something against.
    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def _get_identifier():
    # Beam may run several bundles in threads of one process: load the model once.
    with _load_lock:
        return _identifier()


def language_sample(text: str, sample_chars: int = SAMPLE_CHARS) -> str:
    """The part of `text` that is classified: all of it when short, else the first
    `sample_chars` characters and `sample_chars` from the middle, each cut at whitespace so no
    word is split."""
    if len(text) <= 2 * sample_chars:
        return text
    head = text[:sample_chars]
    middle_start = (len(text) - sample_chars) // 2
    middle = text[middle_start : middle_start + sample_chars]
    head = head[: head.rfind(" ")] if " " in head else head
    if " " in middle:
        middle = middle[middle.find(" ") + 1 : middle.rfind(" ")]
    return head + "\n" + middle


def identify_language(text: str, sample_chars: int = SAMPLE_CHARS) -> tuple[str, float]:
    """(ISO 639-1 code, probability) of the most likely language of `text`."""
    language, confidence = _get_identifier().classify(language_sample(text, sample_chars))
    return str(language), float(confidence)


def supported_languages() -> list[str]:
    """Every code `identify_language` can return (for validating a user's --language)."""
    return list(_get_identifier().labels)
