"""What every stage's Beam wrapper shares: a DoFn that counts per bundle, and the rule for a
record a stage raised on.

Each stage (sources/transforms.py, clean/transforms.py, tokenize/transforms.py, and dedup's and
write's own) is a few small DoFns around the stage's pure function. Every stage transform returns
a dict of PCollections: "documents" (what goes on), "counts" (one small dict per bundle, merged
into stats.json), and "failures" / "rejects" (records that went elsewhere; emitted only when
someone keeps them, otherwise just counted, so rejected text never travels).

A stage counts through one hook, `CountingDoFn.stat_update(name, value)`: the count goes to the
bundle's counts (stats.json), to the Beam metric of that name (at the bundle's end) and, where
the progress display shows it (progress.HEARTBEAT), to the worker's heartbeat file.

A stage that raises on one record (a bug, or an input nobody foresaw) does not kill the run:
the record becomes a Failure named after the stage, counted and logged with its location;
--max-failure-rate turns many of them into a failed run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.transforms.window import GlobalWindows

from pipelines import progress as progress_lib
from pipelines.document import Failure, Reject
from pipelines.reason_log import ReasonLog
from pipelines.stats import CPU_US, DROPPED, FAILED, BundleCounts

LOG = logging.getLogger(__name__)
# Every failure is counted; per reason, the first ones of each process are logged one by one,
# then one line each time the count doubles, so a corpus of broken files does not flood the log.
_FAILURES = ReasonLog(LOG)


def windowed(output):
    """An output of finish_bundle must carry its window (the global one: this is batch)."""
    if isinstance(output, pvalue.TaggedOutput):
        return pvalue.TaggedOutput(output.tag, GlobalWindows.windowed_value(output.value))
    return GlobalWindows.windowed_value(output)


def stage_error(location: str, stage: str, error: Exception) -> Failure:
    """The Failure of a record `stage` raised on. Its one line reaches the log through
    CountingDoFn._fail, limited per reason; the traceback only at DEBUG: a stage that raises on
    every record must not write a traceback for each."""
    LOG.debug("%s: %s stage raised on this record", location, stage, exc_info=error)
    message = str(error).strip().split("\n", 1)[0][:300]
    return Failure(
        location=location, reason=f"{stage}_error", detail=f"{type(error).__name__}: {message}"
    )


class StageClock:
    """The CPU time of a stage's own work in one DoFn, counted as `cpu_us_<stage>` (stats.json
    cpu_s). Only the calls it times count: a fused stage's outputs go straight into the next
    stage's DoFn, whose time must not count here, so an output's production is timed and its
    consumption is not.

    The process's CPU clock (time.process_time: this process, the threads a stage starts
    included, as a tokenizer's pool) is a system call, ~1-4 us on a VM: too dear to read twice
    for every document a stage times. So each call is timed on the wall clock (perf_counter, no
    system call), and the CPU clock is read once a WINDOW_S window: the stage's wall time in the
    window times the process's CPU per wall second over it, never more than the process's CPU
    in the window. Where the process runs one thread and is not descheduled this is the stage's
    CPU time; threads of the process running in the window (a tokenizer's pool, bundles run at
    once) raise the rate, and waiting in it (for input) lowers it; the window is short so that
    this stays local."""

    WINDOW_S = 0.01

    def __init__(self, stage: str) -> None:
        self.stage = stage
        self.seconds = 0.0
        self._wall = 0.0  # the stage's wall time in the open window
        self._window = None  # (perf_counter, process_time) when the window opened

    def _start(self) -> float:
        """perf_counter now; a window opens here if none is open."""
        if self._window is None:
            self._window = (time.perf_counter(), time.process_time())
            return self._window[0]
        return time.perf_counter()

    def _timed(self, started: float) -> None:
        """Add the wall time since `started` (perf_counter); close the window once it is long."""
        now = time.perf_counter()
        self._wall += now - started
        if now - self._window[0] >= self.WINDOW_S:
            self._close(now)

    def _close(self, now: float) -> None:
        opened, cpu = self._window
        elapsed = now - opened
        if elapsed > 0:
            self.seconds += self._wall * (time.process_time() - cpu) / elapsed
        self._wall, self._window = 0.0, None

    def call(self, function: Callable, *args, **kwargs):
        """function(*args, **kwargs), timed."""
        started = self._start()
        try:
            return function(*args, **kwargs)
        finally:
            self._timed(started)

    def items(self, produced: Iterable) -> Iterator:
        """The items of `produced`, the making of each timed (not what the caller does with it)."""
        iterator = iter(produced)
        while True:
            started = self._start()
            try:
                item = next(iterator)
            except StopIteration:
                return
            finally:
                self._timed(started)
            yield item

    def drain(self, counts: BundleCounts) -> None:
        """Add the time so far to `counts` (in microseconds) and start again."""
        if self._window is not None:
            self._close(time.perf_counter())
        if self.seconds > 0:
            counts.inc(CPU_US + self.stage, round(self.seconds * 1e6))
        self.seconds = 0.0


class CountingDoFn(beam.DoFn):
    """Bundle-local counts (`stat_update`), emitted once per bundle on the "counts" output; the
    stage's CPU time is what its `clock` timed."""

    STAGE = ""  # the stage whose CPU time `clock` counts (stats.json cpu_s); "" for none
    # The heartbeat directory of a local run the launcher watches (progress.py); None: unwatched
    progress_dir: str | None = None
    progress: progress_lib.ProgressReporter | None = None  # this process's, set up by setup()

    def setup(self) -> None:
        self.progress = progress_lib.reporter(self.progress_dir)

    def start_bundle(self) -> None:
        self.counts = BundleCounts()
        self.clock = StageClock(self.STAGE)

    def stat_update(self, name: str, value: int = 1) -> None:
        """Count `value` more of `name`: in this bundle's counts (stats.json, and the Beam
        metric of that name at the bundle's end) and in the heartbeat that shows it."""
        self.counts.inc(name, value)
        if self.progress is not None and name in progress_lib.HEARTBEAT:
            self.progress.add(**{progress_lib.HEARTBEAT[name]: value})

    def _fail(self, failure: Failure, keep: bool) -> Iterator:
        _FAILURES.warning(failure.reason, "skipped %s: %s %s", failure.location, failure.reason,
                          failure.detail)
        self.stat_update(FAILED + failure.reason)
        if keep:
            yield pvalue.TaggedOutput("failures", failure)

    def _reject(self, reject: Reject, keep: bool) -> Iterator:
        self.stat_update(DROPPED + reject.reason)
        if keep:
            yield pvalue.TaggedOutput("rejects", reject)

    def finish_bundle(self) -> Iterator:
        if self.progress is not None:
            self.progress.flush()
        if self.STAGE:
            self.clock.drain(self.counts)
        yield windowed(pvalue.TaggedOutput("counts", self.counts.drain()))


class BatchingDoFn(CountingDoFn):
    """A CountingDoFn that handles its documents a batch at a time (one call for many: language
    identification, a tokenizer's batch encode): a batch closes at `batch_docs` documents or
    `batch_chars` characters of text (a document over them is a batch alone), and a bundle's last
    one at its end. A subclass sets the two bounds and writes `handle_batch(docs)` (not Beam's
    `process_batch`, which makes a DoFn a batched one)."""

    batch_docs: int
    batch_chars: int

    def start_bundle(self) -> None:
        super().start_bundle()
        self._batch: list = []
        self._batch_chars = 0

    def process(self, doc) -> Iterator:
        self._batch.append(doc)
        self._batch_chars += len(doc.text)
        if len(self._batch) >= self.batch_docs or self._batch_chars >= self.batch_chars:
            yield from self._flush()

    def handle_batch(self, docs: list) -> Iterator:
        raise NotImplementedError

    def _flush(self) -> Iterator:
        docs, self._batch, self._batch_chars = self._batch, [], 0
        if docs:
            yield from self.handle_batch(docs)

    def finish_bundle(self) -> Iterator:
        for output in self._flush():
            yield windowed(output)
        yield from super().finish_bundle()


class CountRejectsDoFn(CountingDoFn):
    def __init__(self, keep_rejects: bool):
        self.keep_rejects = keep_rejects

    def process(self, reject: Reject) -> Iterator:
        yield from self._reject(reject, self.keep_rejects)


class CountRejects(beam.PTransform):
    """PCollection[Reject] -> {"rejects" (when kept), "counts"}."""

    def __init__(self, *, keep_rejects: bool = False):
        super().__init__()
        self.keep_rejects = keep_rejects

    def expand(self, rejects):
        counted = rejects | "Count" >> beam.ParDo(CountRejectsDoFn(self.keep_rejects)).with_outputs(
            "rejects", "counts"
        )
        return {"rejects": counted.rejects, "counts": counted.counts}
