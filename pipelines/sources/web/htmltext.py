"""An HTML page's main text: its bytes decoded by the right charset, then boilerplate dropped.

Charset: the one the server declared (HTTP Content-Type), else the page's `<meta charset>`, else
Resiliparse's detector. When the bytes do not decode in it (a page that declares UTF-8 but is
cp1251), charset_normalizer decides; a UTF-8 page with a few damaged bytes stays UTF-8 with
U+FFFD in their place.

Extractors (source option `extractor`), measured on the 12 pages of the article-extraction
benchmark by `bench/bench_extract.py` (bench/results/extract.md):

- `trafilatura` (default): trafilatura with datatrove's (FineWeb's) settings, precision
  favoured, comments dropped, but without its cross-document deduplication (see main_text). Bag-of-words F1 0.991 (precision 0.989); it keeps far less of the
  sidebars, teaser lists, image captions, pagers and author bios that Resiliparse keeps. Where
  the precision setting yields a sliver (under SLIVER_WORDS words) and the recall setting a
  body, the page's text is the recall setting's.
- `resiliparse`: Resiliparse main-content extraction, F1 0.961 (precision 0.928), about 10x
  the pages per second.

trafilatura's text keeps the structure it judged main content (headings, list items, table
cells, each on its own line); documents extracted by it carry `meta["extractor"]`, and the clean
stage does not put those lines through C4's per-line rules, which were made for raw text
(`pipelines.clean.VETTED_LINE_EXTRACTORS`).

trafilatura has no time limit of its own, and a pathological page can hold a worker for
minutes. Each page gets `TIME_BOUND_S` seconds of the extracting thread's CPU time (not wall
time, so a busy machine does not change which pages pass and the shards stay the same); a page
past it yields no text, is logged, and is counted under the Beam counter
`pipelines/webtext_extraction_time_bound`. datatrove gives trafilatura 0.1 s of wall time; ours
is 0.5 s of CPU: the 12 benchmark pages take 8-24 ms each here, but the first page in a process
that trafilatura hands to its justext fallback (short pages) takes ~0.17 s, building justext's
stop-word lists for 100 languages; a 0.1 s bound would cut that page, and a wall-time bound on
a loaded machine would cut real pages at random. 0.5 s is 3x that first call and 20x the
slowest benchmark page, and still caps what one pathological page can cost a worker.
The bound is enforced by raising an exception in the extracting
thread from a timer thread (`PyThreadState_SetAsyncExc`): it lands at the next Python bytecode,
so a page stuck inside one C call (lxml's parser) is stopped when that call returns.
"""

from __future__ import annotations

import codecs
import ctypes
import logging
import threading
import time
from collections.abc import Callable, Mapping

import charset_normalizer
import trafilatura
from apache_beam.metrics import Metrics
from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.encoding import bytes_to_str, detect_encoding

from pipelines.reason_log import ReasonLog

EXTRACTOR_OPTION = "extractor"
EXTRACTORS = ("trafilatura", "resiliparse")
DEFAULT_EXTRACTOR = "trafilatura"
TIME_BOUND_S = 0.5
# A page whose precision text has fewer words than this is read again with trafilatura's recall
# setting, whose text is taken when it has RECALL_MIN_WORDS words (a body past the web source's
# floor of 128 tokens) and SLIVER_RATIO times the precision text's. On the 72
# human-checked article pages of ../shared/corpora/web the precision text has 65 words or more,
# so none is read twice.
SLIVER_WORDS = 50
RECALL_MIN_WORDS = 128
SLIVER_RATIO = 4
TIME_BOUND_COUNTER = "webtext_extraction_time_bound"
# trafilatura.extract's keyword arguments besides favor_<setting> (see _trafilatura): the
# project's extractor setting is these with favor_precision.
TRAFILATURA_OPTIONS = {"include_comments": False, "deduplicate": False}

LOG = logging.getLogger(__name__)
# Counted in _TIME_BOUND; logged a few times a process (a corpus of such pages would flood it).
_TIME_BOUND_LOG = ReasonLog(LOG)
_TIME_BOUND = Metrics.counter("pipelines", TIME_BOUND_COUNTER)


class TimeBoundExceeded(BaseException):
    """Raised inside the extracting thread at its time bound. A BaseException, so the
    extractor's own `except Exception` handlers cannot swallow it."""


def _raise_in_thread(thread_id: int, exception: type[BaseException] | None) -> None:
    """Have `thread_id` raise `exception` at its next bytecode (None: drop a pending one)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exception) if exception else None
    )


def _thread_cpu_clock() -> Callable[[], float]:
    """CPU seconds of the calling thread, as a function other threads can call; wall time
    where the platform has no per-thread CPU clock."""
    try:
        clock_id = time.pthread_getcpuclockid(threading.get_ident())
    except (AttributeError, OSError):
        return time.monotonic
    return lambda: time.clock_gettime(clock_id)


def run_bounded(function: Callable[[], str], cpu_seconds: float) -> str | None:
    """`function()`, or None when it used more than `cpu_seconds` of this thread's CPU time.

    A timer thread wakes when the bound could have been spent, compares the thread's CPU
    clock, and either raises TimeBoundExceeded in it or sleeps for what is left. The lock
    makes the raise and the end of `function` exclusive: once `function` has returned and
    `finished` is set no raise can come, and one that was sent but not yet delivered is dropped.
    """
    thread_id = threading.get_ident()
    clock = _thread_cpu_clock()
    deadline = clock() + cpu_seconds
    lock = threading.Lock()
    finished = threading.Event()
    raised = False

    def watch() -> None:
        nonlocal raised
        while not finished.wait(max(deadline - clock(), 0.01)):
            with lock:
                if finished.is_set():
                    return
                if clock() >= deadline:
                    raised = True
                    _raise_in_thread(thread_id, TimeBoundExceeded)
                    return

    watcher = threading.Thread(target=watch, name="extraction-time-bound", daemon=True)
    watcher.start()
    try:
        try:
            result = function()
        finally:
            with lock:
                finished.set()
                if raised:
                    _raise_in_thread(thread_id, None)
            watcher.join()
    except TimeBoundExceeded:
        return None
    # A raise lands only between bytecodes, so a page that overran inside one long C call
    # (lxml's parser) or before the watcher woke is judged here: the bound then means the same
    # whether or not the watcher got to fire.
    return None if clock() >= deadline else result


def extractor_name(options: Mapping[str, str]) -> str:
    """The `extractor` option's value; ValueError naming the known ones otherwise."""
    name = str(options.get(EXTRACTOR_OPTION, DEFAULT_EXTRACTOR)).strip().lower()
    if name not in EXTRACTORS:
        raise ValueError(f"unknown {EXTRACTOR_OPTION} {name!r}; known: {', '.join(EXTRACTORS)}")
    return name


def _codec(label: str | None) -> str | None:
    if not label:
        return None
    try:
        return codecs.lookup(label).name
    except LookupError:
        return None


def _mostly_utf8(data: bytes) -> bool:
    """Whether bytes that are not valid UTF-8 still hold more valid multi-byte UTF-8 characters
    than invalid bytes: a UTF-8 page with some damage, not a page in another charset."""
    replaced = data.decode("utf-8", errors="replace")
    invalid = replaced.count("\ufffd") - data.count("\ufffd".encode())
    non_ascii = len(replaced) - len(replaced.encode("ascii", errors="ignore"))
    return non_ascii - replaced.count("\ufffd") >= invalid


def decode_html(data: bytes, declared: str | None = None) -> tuple[str, str]:
    """(the page as text, the codec it was decoded with); `declared` is the HTTP charset."""
    encoding = _codec(declared) or _codec(detect_encoding(data, from_html_meta=True)) or "utf-8"
    try:
        return data.decode(encoding), encoding
    except UnicodeDecodeError:
        pass
    if encoding == "utf-8" and _mostly_utf8(data):
        return data.decode("utf-8", errors="replace"), "utf-8"
    best = charset_normalizer.from_bytes(data).best()
    if best is not None:
        return str(best), best.encoding
    return bytes_to_str(data, encoding, errors="replace"), encoding


def _trafilatura(html: str, favor: str) -> str | None:
    """trafilatura's text with `favor` ("precision" or "recall") favoured ("" where it finds
    none); None past the CPU bound, counted and logged. deduplicate=False (datatrove sets
    True): trafilatura's deduplication remembers text across calls in a process-wide cache,
    so a page's text would depend on which pages the same worker read before it, and shards
    would differ with the number of workers."""
    text = run_bounded(
        lambda: (
            trafilatura.extract(html, **TRAFILATURA_OPTIONS, **{f"favor_{favor}": True}) or ""
        ),  # trafilatura's None is a page with no main text, not the bound
        TIME_BOUND_S,
    )
    if text is None:
        _TIME_BOUND.inc()
        _TIME_BOUND_LOG.warning(
            "trafilatura_time_bound",
            "trafilatura passed its %.1f s CPU bound on a %d-character page: no text kept",
            TIME_BOUND_S,
            len(html),
        )
    return text


def main_text(html: str, extractor: str = DEFAULT_EXTRACTOR) -> str:
    """The main text of a decoded page (boilerplate, navigation, comments, alt texts dropped)."""
    if extractor == "trafilatura":
        text = _trafilatura(html, "precision")
        if text is None:
            return ""
        if len(text.split()) < SLIVER_WORDS:
            # A sliver (a reprint notice, nothing where the body stands in a block the precision
            # setting discards): the recall setting's text when it holds a body.
            recall = _trafilatura(html, "recall") or ""
            words = len(recall.split())
            if words >= RECALL_MIN_WORDS and words >= SLIVER_RATIO * len(text.split()):
                return recall.strip()
        return text.strip()
    if extractor == "resiliparse":
        text = extract_plain_text(
            html,
            preserve_formatting=True,
            main_content=True,
            alt_texts=False,
            comments=False,
            post_meta=False,
        )
        return text.strip()
    raise ValueError(f"unknown {EXTRACTOR_OPTION} {extractor!r}; known: {', '.join(EXTRACTORS)}")


def html_to_text(
    data: bytes, charset: str | None = None, extractor: str = DEFAULT_EXTRACTOR
) -> str:
    """The main text of an HTML page's bytes; `charset` is the encoding the server declared."""
    html, _ = decode_html(data, charset)
    return main_text(html, extractor)
