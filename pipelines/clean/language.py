"""Language identification with py3langid (its naive Bayes model ships inside the package, so
nothing is downloaded).

The packaged model is an xz-compressed npz whose decompression takes ~0.6 s in every process
that loads it: the launcher (to check --language) and each worker, a large part of a small
run's start-up. It is decompressed once into the user's cache directory, one .npy file per
array (125 MB for py3langid 0.4, the float32 copy of the feature table the vectorised walk
scores with included), and memory-mapped from there: loading takes ~0.01 s instead of the
0.2-0.6 s of reading and widening the arrays, only the pages a run touches are read, and the
processes of a run share them through the page cache. The launcher reads only the label list.
Without a usable cache (read-only home, another model layout) the packaged file is loaded.

The cache is untrusted like any file read: its folder's name says which packaged model it was
built from, not what it holds now. The sha256 of every array file is written last into
`content.sha256`, and each process checks them before it maps the arrays (~0.1 s for the 125
MB); a missing or wrong digest (a zeroed or edited array, a half-copied folder) rebuilds the
cache, with one warning line.

py3langid walks the UTF-8 bytes through its n-gram automaton one byte at a time in Python, at
about 1-2 MB/s, the slowest step of cleaning. Four things cut it:

- a long document is decided from as much text as the decision needs (`identify_language`):
  a document of up to 3 x `WINDOW_CHARS` characters is classified whole; a longer one on three
  windows of `WINDOW_CHARS` (its start, middle and end, cut at whitespace), each classified
  alone. When all three name one language, each with a probability clear of the caller's
  threshold by `THRESHOLD_MARGIN`, that is the label (with the least of the three
  probabilities); otherwise, windows that disagree (a Project Gutenberg book in French opens
  and ends with an English licence) or a window near the threshold, the whole text is
  classified. On the shared corpora the label equals the whole text's for every document
  (bench/bench_language.py, bench/results/language.md).
- the walk is done for all bytes at once in numpy (`_VectorIdentifier`). The automaton
  synchronises: from any two states, the same `SYNC_BYTES` bytes lead to the same state (checked
  for the packaged model by `synchronizing_length`, `VERIFIED_MODELS`). So the state after byte i
  is the state reached from the start state on bytes i-5..i alone, and `SYNC_BYTES` vector
  steps over all positions give every state py3langid's loop gives, hence the same feature
  counts, in the same order, and bit-identical scores. A model not in `VERIFIED_MODELS` (a newer
  py3langid) is walked by py3langid's own loop.
- the features' counts in order of first occurrence come from one stable sort, straight into
  the product py3langid scores with (no dict, no numpy.unique): on a short web document (~800
  bytes) most of the cost is numpy's per-call overhead, not the bytes.
- many texts are classified at once (`identify_languages`, `classify_many` in
  language_batch.py: the clean stage's batches), each to the same bits as alone.
"""

from __future__ import annotations

import functools
import hashlib
import io
import logging
import lzma
import os
import shutil
import tempfile
import threading
from pathlib import Path

from common import storage
from common.safe_io import (
    MIB,
    UnsafeInputError,
    format_bytes,
    read_text_capped,
    require_regular_file,
)

# The windows a long document is decided on (characters), and how far above the caller's
# threshold each window's probability must be for the windows alone to decide.
WINDOW_CHARS = 2000
THRESHOLD_MARGIN = 0.1
# The probability a document's language must reach to be kept, unless the caller says otherwise
# (CleanConfig.language_threshold's default).
DEFAULT_THRESHOLD = 0.65
# sha256 (first 16 hex digits) of py3langid's packaged model -> bytes after which its automaton
# synchronises; each entry checked with `synchronizing_length` (py3langid 0.4.0: 6 bytes).
VERIFIED_MODELS = {"f4f4a2c3465ca1f0": 6}
# Where decompressed models are kept between runs (XDG's cache directory).
CACHE_ENV = "XDG_CACHE_HOME"

LOG = logging.getLogger(__name__)
_load_lock = threading.Lock()


def packaged_model() -> Path:
    from py3langid.langid import MODEL_DIR, MODEL_FILE

    return Path(MODEL_DIR) / MODEL_FILE


def cache_dir() -> Path:
    base = os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "shardsmith"


@functools.cache
def model_digest() -> str:
    """The first 16 hex digits of the packaged model file's sha256."""
    return hashlib.sha256(packaged_model().read_bytes()).hexdigest()[:16]


# The arrays of the cached model: the packaged npz's, plus the widened feature table.
_ARRAYS = ("ptc", "pc", "classes", "nextmove", "nextmove_row", "out_feat")
_PTC32 = "ptc32"
# "<sha256>  <name>.npy" a line for every array file, written after them (sha256sum's format)
_CONTENT = "content.sha256"


# An array file of the cache read for its digest: the largest is ~57 MB (ptc32); a bound, not a fit.
_ARRAY_CAP = 256 * MIB


def _file_sha256(path: Path) -> str:
    """The sha256 of a cache file, which must be a regular file of at most `_ARRAY_CAP` bytes: a
    cache entry replaced by a link to /dev/zero or a FIFO fails the check instead of being read
    for ever."""
    what = "language model cache file"
    if require_regular_file(path, what).st_size > _ARRAY_CAP:
        raise UnsafeInputError(f"{what} {path} is larger than {format_bytes(_ARRAY_CAP)}")
    digest, left = hashlib.sha256(), _ARRAY_CAP
    with open(path, "rb") as file:
        while left > 0 and (chunk := file.read(min(MIB, left))):
            digest.update(chunk)
            left -= len(chunk)
    return digest.hexdigest()


def _content_digests(directory: Path) -> str:
    names = sorted(f"{name}.npy" for name in (*_ARRAYS, _PTC32))
    return "".join(f"{_file_sha256(directory / name)}  {name}\n" for name in names)


def cache_mismatch(directory: Path) -> str | None:
    """Why the cached model in `directory` is not what was built (None: every array file has
    the digest written when it was built)."""
    try:
        recorded = read_text_capped(directory / _CONTENT, "language model cache digest", MIB)
    except UnsafeInputError as error:
        return f"no content digest ({error})"
    try:
        found = _content_digests(directory)
    except (OSError, UnsafeInputError) as error:
        return f"an array file cannot be read ({error})"
    if found != recorded:
        changed = sorted(set(found.splitlines()) - set(recorded.splitlines()))
        names = ", ".join(line.split("  ", 1)[1] for line in changed) or _CONTENT
        return f"{names} changed since it was built"
    return None


def _set_aside(path: Path) -> None:
    """Remove a cache folder that failed its check: renamed first, so no process starting now
    maps half of it (one that mapped it already keeps its mapping)."""
    aside = Path(tempfile.mkdtemp(dir=path.parent, prefix=f"{path.name}.", suffix=".bad"))
    try:
        storage.replace(path, aside / "model")
    except OSError:
        pass  # another process set it aside first
    shutil.rmtree(aside, ignore_errors=True)


@functools.cache
def decompressed_model() -> Path | None:
    """The packaged model decompressed into the cache, a directory of one .npy per array (named
    by the packaged file's sha256, so a new py3langid gets a new one) whose content digest
    matches (else it is rebuilt); None when the cache cannot be written."""
    import numpy as np

    try:
        path = cache_dir() / f"py3langid-{model_digest()}"
        if path.is_dir():
            mismatch = cache_mismatch(path)
            if mismatch is None:
                return path
            LOG.warning("language model cache %s: %s; rebuilding it", path, mismatch)
            _set_aside(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        # A private directory, then a rename: processes starting together each write their
        # own copy and the first rename wins; no reader sees half a model.
        tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f"{path.name}.", suffix=".tmp"))
        try:
            with (
                lzma.open(packaged_model()) as src,
                np.load(io.BytesIO(src.read()), allow_pickle=False) as data,
            ):
                arrays = {name: data[name] for name in _ARRAYS}
            arrays[_PTC32] = arrays["ptc"].astype(np.float32)
            for name, array in arrays.items():
                np.save(tmp / f"{name}.npy", array, allow_pickle=False)
            (tmp / _CONTENT).write_text(_content_digests(tmp), encoding="ascii")
            try:
                storage.replace(tmp, path)
            except OSError:
                if not path.is_dir():
                    raise
                shutil.rmtree(tmp, ignore_errors=True)  # another process's copy won
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        # the single-npz cache of earlier versions (68 MB), superseded by this one
        path.with_name(f"{path.name}.npz").unlink(missing_ok=True)
        return path
    except (OSError, KeyError, ValueError) as error:
        LOG.debug("language model cache unusable (%s); loading the packaged model", error)
        return None


def _mapped(directory: Path, name: str):
    """A cached array, memory-mapped read-only (as a plain ndarray: np.memmap's subclass would
    follow every result computed from it)."""
    import numpy as np

    return np.asarray(np.load(directory / f"{name}.npy", mmap_mode="r", allow_pickle=False))


def identifier_class():
    """`_VectorIdentifier` for a model whose synchronising length is verified, else
    py3langid's own class."""
    from py3langid.langid import LanguageIdentifier

    return _vector_identifier_class() if model_digest() in VERIFIED_MODELS else LanguageIdentifier


@functools.cache
def _vector_identifier_class():
    # Defined on first use so that importing this module does not import py3langid.
    import numpy as np
    from py3langid.langid import LanguageIdentifier

    from pipelines.clean.language_batch import BatchScoring

    class _VectorIdentifier(BatchScoring, LanguageIdentifier):
        """py3langid's classifier with the automaton walked for all bytes at once (see the
        module docstring), and many texts classified at once (`classify_many`); everything
        else is py3langid's."""

        __slots__ = ("_sync_bytes", "_next_state", "_row_start", "_feature_of", "_ptc32")

        def __init__(self, *args, ptc32=None, **kwargs):
            super().__init__(*args, **kwargs)
            self._sync_bytes = VERIFIED_MODELS[model_digest()]
            self._next_state = _as_numpy(self.tk_nextmove)
            self._row_start = np.asarray(self._rowbase, dtype=np.int64)
            self._feature_of = np.asarray(self.tk_output, dtype=np.int64)
            # The float16 feature table widened (57 MB instead of 28; the cache holds it
            # widened): numpy widens the gathered rows to float32 before the product anyway, so
            # the scores are the same bits, and the product runs 4x faster without the
            # per-call conversion.
            self._ptc32 = np.asarray(self.nb_ptc, dtype=np.float32) if ptc32 is None else ptc32

        def _raw_score(self, text):
            data = np.frombuffer(text, dtype=np.uint8)
            size = len(data)
            states = np.zeros(size, dtype=np.int64)
            # Step k feeds byte i-k to position i (oldest first); positions before byte k
            # started at the start state with fewer bytes, as py3langid's loop did.
            for k in range(min(self._sync_bytes, size) - 1, -1, -1):
                states[k:] = self._next_state[self._row_start[states[k:]] + data[: size - k]]
            features = self._feature_of[states]
            features = features[features >= 0]
            if len(features) == 0:  # py3langid's own answer for featureless input
                return super()._raw_score(b"")
            ids, counts = _first_occurrence_counts(features)
            # set_languages (unused here) narrows nb_ptc; the widened copy is the full table's.
            full = self.nb_ptc is self._full_model[0]
            table = self._ptc32 if full else self.nb_ptc
            # py3langid's _sparse_score on the same features in the same order (the order of
            # its Counter: first occurrence), so the float32 sums and the scores are the same.
            # take(mode="clip"), not table[ids]: the same rows at a third of the cost (the ids
            # are the model's own, so no bounds check)
            rows = table.take(ids, axis=0, mode="clip")
            return np.log1p(counts.astype(np.float32)) @ rows + self.nb_pc

    return _VectorIdentifier


def _first_occurrence_counts(values):
    """(distinct values, how often each occurs), in order of first occurrence: what a Counter
    over `values` holds, from one stable sort."""
    import numpy as np

    sorter = values.argsort(kind="stable")  # stable: a run of equal values starts at the earliest
    ordered = values[sorter]
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    counts = np.diff(starts, append=len(values))
    by_first = sorter[starts].argsort()
    return ordered[starts][by_first], counts[by_first]


def _as_numpy(table):
    """The automaton's transition table as a numpy array (py3langid holds an array.array)."""
    import numpy as np

    if isinstance(table, np.ndarray):
        return table
    return np.frombuffer(table, dtype=table.typecode)


def synchronizing_length(identifier, limit: int = 16) -> int | None:
    """The number of bytes after which `identifier`'s automaton is in the same state whatever
    state it started in (None if not within `limit`): a breadth-first walk over pairs of
    states (any state, the start state), dropping pairs that have met (seconds for py3langid
    0.4's model; run by the tests for the model in VERIFIED_MODELS)."""
    import numpy as np

    table = _as_numpy(identifier.tk_nextmove).reshape(-1, 256)
    rows = np.asarray(identifier.tk_row, dtype=np.int64)
    states = len(rows)
    pairs = np.arange(states, dtype=np.int64) * states
    for length in range(1, limit + 1):
        following = []
        for block in np.array_split(pairs, max(1, len(pairs) // 4096)):  # bounded memory
            left = table[rows[block // states]].astype(np.int64)
            right = table[rows[block % states]].astype(np.int64)
            apart = left != right
            following.append(np.unique(left[apart] * states + right[apart]))
        pairs = np.unique(np.concatenate(following))
        if len(pairs) == 0:
            return length
    return None


def _from_cache(directory: Path, **kwargs):
    """A LanguageIdentifier from the cached model (the arrays py3langid's own loader reads
    from the npz inside its xz file), memory-mapped where the vectorised walk reads them."""
    import numpy as np
    from py3langid.modelio import _to_array

    cls = identifier_class()
    extra = {}
    nextmove = _mapped(directory, "nextmove")
    if cls is _vector_identifier_class():
        extra["ptc32"] = _mapped(directory, _PTC32)
    else:  # py3langid's own loop indexes an array.array one byte at a time
        nextmove = _to_array(np.asarray(nextmove))
    return cls(
        _mapped(directory, "ptc"),
        np.asarray(_mapped(directory, "pc")),
        _mapped(directory, "classes").tolist(),
        nextmove,
        _mapped(directory, "out_feat").tolist(),
        # Python ints: py3langid shifts each row left by 8, which a uint16 would not hold
        tk_row=_mapped(directory, "nextmove_row").tolist(),
        **kwargs,
        **extra,
    )


@functools.cache
def load_identifier():  # -> py3langid.langid.LanguageIdentifier
    # py3langid is imported on first use so that importing pipelines.clean stays cheap on the
    # launcher.
    # norm_probs: confidences are probabilities in [0, 1] (py3langid calibrates them by text
    # length), which is what a user-set threshold can mean something against.
    cached = decompressed_model()
    if cached is not None:
        try:
            return _from_cache(cached, norm_probs=True)
        except (KeyError, TypeError, ValueError, OSError) as error:  # another model layout
            LOG.debug("%s: not loadable (%s); loading the packaged model", cached, error)
    return identifier_class().from_model_file(packaged_model(), norm_probs=True)


def get_identifier():
    # Beam may run several bundles in threads of one process: load the model once.
    with _load_lock:
        return load_identifier()


def language_windows(text: str, window_chars: int = WINDOW_CHARS) -> list[str]:
    """The parts of `text` that decide its language first: all of it when it is at most three
    windows long, else `window_chars` characters from its start, middle and end, each cut at
    whitespace so no word is split."""
    if len(text) <= 3 * window_chars:
        return [text]
    middle = (len(text) - window_chars) // 2
    head = text[:window_chars]
    windows = [head[: head.rfind(" ")] if " " in head else head]
    for start in (middle, len(text) - window_chars):
        window = text[start : start + window_chars]
        if " " in window:
            window = window[window.find(" ") + 1 : window.rfind(" ") if start == middle else None]
        windows.append(window)
    return windows


def identify_language(text: str, threshold: float = DEFAULT_THRESHOLD) -> tuple[str, float]:
    """(ISO 639-1 code, probability) of the most likely language of `text`: the windows' (see
    the module docstring) where they agree with every probability at least `threshold` +
    `THRESHOLD_MARGIN`, else the whole text's."""
    identifier = get_identifier()
    labels = [identifier.classify(window) for window in language_windows(text)]
    return _decided(identifier, text, labels, threshold)


def identify_languages(texts: list[str], threshold: float = DEFAULT_THRESHOLD):
    """[identify_language(text, threshold) for text in texts], the same labels and
    probabilities, with every short text and window classified in one `classify_many` call
    (language_batch.py: a piece of ~800 characters costs ~90 us instead of ~200)."""
    identifier = get_identifier()
    windows = [language_windows(text) for text in texts]
    parts = [window for group in windows for window in group]
    many = getattr(identifier, "classify_many", None)  # py3langid's own class has none
    labels = many(parts) if many else [identifier.classify(part) for part in parts]
    decided, start = [], 0
    for text, group in zip(texts, windows):
        decided.append(_decided(identifier, text, labels[start : start + len(group)], threshold))
        start += len(group)
    return decided


def _decided(identifier, text: str, labels: list, threshold: float) -> tuple[str, float]:
    """The label of `text` from its windows' `labels`, or from the whole text where they
    disagree or come near `threshold`."""
    if len(labels) > 1:
        decisive = min(1.0, threshold + THRESHOLD_MARGIN)
        if len({label for label, _ in labels}) > 1 or min(p for _, p in labels) < decisive:
            labels = [identifier.classify(text)]
    language, confidence = min(labels, key=lambda label: label[1])
    return str(language), float(confidence)


@functools.cache
def supported_languages() -> tuple[str, ...]:
    """Every code `identify_language` can return (for validating a user's --language): the
    model's class list, read alone from the cached model when there is one."""
    cached = decompressed_model()
    if cached is not None:
        try:
            classes = _mapped(cached, "classes").tolist()
            # distinct, in model order, as LanguageIdentifier.labels (aliases share one)
            return tuple(dict.fromkeys(str(label) for label in classes))
        except (ValueError, OSError):
            pass
    return tuple(get_identifier().labels)
