"""Language identification with py3langid (its naive Bayes model ships inside the package, so
nothing is downloaded).

The packaged model is an xz-compressed npz whose decompression takes ~0.6 s in every process
that loads it: the launcher (to check --language) and each worker, a large part of a small
run's start-up. It is decompressed once into the user's cache directory (68 MB for py3langid
0.4) and loaded from there in ~0.2 s; the launcher reads only the label list from it. Without a
usable cache (read-only home, another model layout) the packaged file is loaded as before.

py3langid walks the UTF-8 bytes in Python at about 1-2 MB/s, the slowest step of cleaning, so a
document is classified on a bounded sample: all of it up to 2 x `SAMPLE_CHARS` characters, else
its first `SAMPLE_CHARS` plus as many from the middle. The middle slice matters: a Project
Gutenberg book in French still opens with an English licence header. (On the shared corpora,
1,000-character slices give the same languages as 2,000 at 1.5x the speed.)
"""

from __future__ import annotations

import functools
import hashlib
import logging
import lzma
import os
import shutil
import tempfile
import threading
from pathlib import Path

SAMPLE_CHARS = 1000
# Where decompressed models are kept between runs (XDG's cache directory).
CACHE_ENV = "XDG_CACHE_HOME"

LOG = logging.getLogger(__name__)
_load_lock = threading.Lock()


def _packaged_model() -> Path:
    from py3langid.langid import MODEL_DIR, MODEL_FILE

    return Path(MODEL_DIR) / MODEL_FILE


def cache_dir() -> Path:
    base = os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "shardsmith"


@functools.cache
def decompressed_model() -> Path | None:
    """The packaged model's npz, decompressed into the cache (named by the packaged file's
    sha256, so a new py3langid gets a new file); None when the cache cannot be written."""
    packaged = _packaged_model()
    try:
        digest = hashlib.sha256(packaged.read_bytes()).hexdigest()[:16]
        path = cache_dir() / f"py3langid-{digest}.npz"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            # A private name, then a rename: processes starting together each write their own
            # copy and the last rename wins; no reader sees half a file.
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as out, lzma.open(packaged) as src:
                    shutil.copyfileobj(src, out, length=1 << 20)
                os.replace(tmp, path)
            except BaseException:
                os.unlink(tmp)
                raise
        return path
    except OSError as error:
        LOG.debug("language model cache unusable (%s); loading the packaged model", error)
        return None


def _from_npz(path: Path, **kwargs):
    """A LanguageIdentifier from a decompressed model (the arrays py3langid's own loader
    reads from the npz inside its xz file)."""
    import numpy as np
    from py3langid.langid import LanguageIdentifier
    from py3langid.modelio import _to_array

    with np.load(path, allow_pickle=False) as data:
        return LanguageIdentifier(
            np.asarray(data["ptc"]),
            np.asarray(data["pc"]),
            data["classes"].tolist(),
            _to_array(data["nextmove"]),
            data["out_feat"].tolist(),
            tk_row=_to_array(data["nextmove_row"]),
            **kwargs,
        )


@functools.cache
def _identifier():  # -> py3langid.langid.LanguageIdentifier
    # Imported here so that importing pipelines.clean stays cheap on the launcher.
    from py3langid.langid import LanguageIdentifier

    # norm_probs: confidences are probabilities in [0, 1] (py3langid calibrates them by text
    # length), which is what a user-set threshold can mean something against.
    cached = decompressed_model()
    if cached is not None:
        try:
            return _from_npz(cached, norm_probs=True)
        except (KeyError, TypeError, ValueError, OSError) as error:  # another model layout
            LOG.debug("%s: not loadable (%s); loading the packaged model", cached, error)
    return LanguageIdentifier.from_model_file(_packaged_model(), norm_probs=True)


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


@functools.cache
def supported_languages() -> tuple[str, ...]:
    """Every code `identify_language` can return (for validating a user's --language): the
    model's class list, read alone from the cached npz when there is one."""
    cached = decompressed_model()
    if cached is not None:
        import numpy as np

        try:
            with np.load(cached, allow_pickle=False) as data:
                # distinct, in model order, as LanguageIdentifier.labels (aliases share one)
                return tuple(dict.fromkeys(str(label) for label in data["classes"].tolist()))
        except (KeyError, ValueError, OSError):
            pass
    return tuple(_get_identifier().labels)
