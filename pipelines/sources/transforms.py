"""The read stage's Beam transform: ReadSource, input patterns -> Documents (and Failures),
planned, split and read on workers by the source module `--source` names."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence

import apache_beam as beam
from apache_beam import pvalue

from pipelines.document import (
    INPUT_META,
    PARTS_REMOVED,
    PARTS_REMOVED_TEXT,
    Document,
    Failure,
    ReadTask,
    Reject,
)
from pipelines.inputs import as_patterns
from pipelines.reason_log import ReasonLog
from pipelines.sources import get_source, input_bytes, split_task
from pipelines.sources.input_errors import printable_name
from pipelines.stage import CountingDoFn, stage_error
from pipelines.stats import INPUT_BYTES, file_failure_key, input_loss_counts

LOG = logging.getLogger(__name__)
# A file the splitter raises on is read whole: logged in one line, a few per process.
_SPLIT_FAILURES = ReasonLog(LOG)


def _where(task: ReadTask) -> str:
    return task.path if task.end < 0 else f"{task.path}[{task.start}:{task.end}]"


def task_input_bytes(task: ReadTask) -> int:
    """Bytes of input a task reads (sources.input_bytes): its own byte range or row groups, not
    the whole file of a split one, so that N tasks of a file together get one file's bound."""
    return input_bytes(get_source(task.source), task)


# Below this much text a task is never stopped, whatever its ratio: a tiny file may hold a
# short, very repetitive document.
MIN_EXPANSION_BOUND_BYTES = 64 << 20


def expansion_bound(input_bytes: int, max_expansion: float) -> float:
    """Most bytes of text a task of `input_bytes` may produce (inf: no bound)."""
    if max_expansion <= 0:
        return float("inf")
    return max(input_bytes * max_expansion, MIN_EXPANSION_BOUND_BYTES)


class _SourceTaskDoFn(CountingDoFn):
    """A DoFn on one source's ReadTasks: the source module is set up once per worker."""

    def __init__(self, source: str, progress_dir: str | None):
        self.source_name = source
        self.progress_dir = progress_dir

    def setup(self) -> None:
        super().setup()
        self.source = get_source(self.source_name)


class ReadDoFn(_SourceTaskDoFn):
    STAGE = "read"

    def __init__(
        self,
        source: str,
        keep_failures: bool,
        progress_dir: str | None,
        max_expansion: float = 0.0,
    ):
        super().__init__(source, progress_dir)
        self.keep_failures = keep_failures
        self.max_expansion = max_expansion

    def process(self, task: ReadTask) -> Iterator:
        records = 0
        text_bytes, bound = 0, float("inf")
        task_bytes = task_input_bytes(task)
        self.stat_update(INPUT_BYTES, task_bytes)
        # the sidecar's input column, for every document of the task; a name that is not UTF-8
        # as its escaped text (Parquet, JSON and Beam's coders refuse a lone surrogate)
        input_name = printable_name(task.path)
        if self.max_expansion > 0:
            bound = expansion_bound(task_bytes, self.max_expansion)
        try:
            for record in self.clock.items(self.source.read(task)):
                records += 1
                if isinstance(record, Document):
                    size = len(record.text.encode("utf-8"))
                    text_bytes += size
                    if text_bytes > bound:
                        # A decompression bomb: stop the task here, so its output (spill,
                        # shards) stays within max_expansion x the input.
                        self.stat_update("read_failures")
                        yield from self._fail(
                            Failure(
                                location=_where(task),
                                reason="expansion_limit",
                                detail=f"more than {bound / 1e6:,.0f} MB of text from "
                                f"{task_bytes:,} input bytes (--max-expansion "
                                f"{self.max_expansion:g}); the rest of the task is skipped",
                            ),
                            self.keep_failures,
                        )
                        break
                    self.stat_update("docs_read")
                    self.stat_update("bytes_read", size)
                    cut_text = record.meta.get(PARTS_REMOVED_TEXT, "")
                    meta = {k: v for k, v in record.meta.items() if k != PARTS_REMOVED_TEXT}
                    meta[INPUT_META] = input_name
                    record = record.with_meta(meta)
                    yield record
                    yield from self._parts_removed(record, cut_text)
                else:
                    self.stat_update("read_failures")
                    self.stat_update(file_failure_key(input_name, record.reason))
                    for name, lost in input_loss_counts(record, task_bytes).items():
                        self.stat_update(name, lost)
                    yield from self._fail(record, self.keep_failures)
        except Exception as error:  # a reader bug must not end a long run: count it, go on
            records += 1
            self.stat_update("read_failures")
            # The records after the error were never read, so nothing can count them: the
            # run fails at the end (stats.check_stats) rather than report a false account.
            self.stat_update("read_tasks_cut_short")
            yield from self._fail(stage_error(_where(task), "read", error), self.keep_failures)
        if records == 0 and task.start == 0 and task.end < 0:
            # Nothing to account for, but an empty file is usually a mistake worth seeing (a
            # range of a split file may hold no record start: a longer record owns it).
            LOG.warning("%s: no records (an empty input)", _where(task))
            self.stat_update("empty_tasks")
        self.stat_update("tasks_read")

    def _parts_removed(self, doc: Document, cut_text: str) -> Iterator:
        """A kept document the source cut parts of (a book's apparatus): counted, and its note
        (the count by kind) with the cut text written to the parts-removed audit file when
        rejects are kept (write/rejects.py sends it there by its reason: it is no drop)."""
        removed = doc.meta.get(PARTS_REMOVED)
        if removed:
            self.stat_update("docs_with_parts_removed")
            if self.keep_failures:
                yield pvalue.TaggedOutput(
                    "failures", Reject(doc.id, doc.source, PARTS_REMOVED, removed, cut_text, doc.url)
                )


class PlanDoFn(CountingDoFn):
    """The input patterns -> the source's per-file ReadTasks (a listing: one worker does it, as
    Beam's MatchFiles does). Patterns that cannot be planned are one counted, logged Failure.
    Its input is one Impulse: the patterns are the DoFn's own (a Create is four transforms)."""

    def __init__(self, source: str, patterns: Sequence[str], options: Mapping[str, str],
                 keep_failures: bool):
        self.source_name = source
        self.patterns = tuple(patterns)
        self.options = dict(options)
        self.keep_failures = keep_failures

    def process(self, _once: bytes) -> Iterator:
        try:
            tasks = get_source(self.source_name).plan(self.patterns, self.options)
        except (ValueError, OSError) as error:  # FileNotFoundError included
            self.stat_update("read_failures")
            location = ", ".join(self.patterns)
            failure = Failure(location=location, reason="plan_error", detail=str(error))
            yield from self._fail(failure, self.keep_failures)
            return
        self.stat_update("files_planned", len(tasks))
        yield from tasks


class SplitDoFn(_SourceTaskDoFn):
    """A file's ReadTask -> the tasks the source cuts it into (sources/ranges.py: byte ranges
    of a big JSONL file, member ranges of a big tar); most files stay one task."""

    def process(self, task: ReadTask) -> Iterator:
        try:
            tasks = split_task(self.source, task)
        except Exception as error:  # a splitting bug costs parallelism, never data: read it whole
            _SPLIT_FAILURES.warning(
                "split_error", "%s: could not be split (%s: %s); read as one task", task.path,
                type(error).__name__, str(error).strip().split("\n", 1)[0][:300])
            tasks = [task]
        self.stat_update("tasks_planned", len(tasks))
        yield from tasks


class ReadSource(beam.PTransform):
    """PBegin -> {"documents", "failures", "counts"} from input patterns (one or several, as
    pipelines/inputs.py resolves them).

    Tasks are planned at run time, not on the launcher: the graph holds the patterns only, so
    its size does not grow with the number of files a glob matches (a million small files would
    otherwise inline a million tasks into the job). The patterns are listed on one worker, each
    file's task is split where its format allows on whichever worker the first Reshuffle sends
    it to, and the second Reshuffle spreads the tasks over every worker; each task is read start
    to end on one worker.
    """

    def __init__(
        self,
        source: str,
        patterns: str | Sequence[str],
        options: Mapping[str, str] | None = None,
        *,
        keep_failures: bool = False,
        progress_dir: str | None = None,
        max_expansion: float = 0.0,
    ):
        super().__init__()
        self.source = source
        self.patterns = as_patterns(patterns)
        self.options = dict(options or {})
        self.keep_failures = keep_failures
        self.progress_dir = progress_dir
        self.max_expansion = max_expansion

    def expand(self, pbegin):
        planned = (
            pbegin
            | "Once" >> beam.Impulse()
            | "Plan"
            >> beam.ParDo(
                PlanDoFn(self.source, self.patterns, self.options, self.keep_failures)
            ).with_outputs("failures", "counts", main="tasks")
        )
        tasks = (
            planned.tasks
            | "SpreadFiles" >> beam.Reshuffle()
            | "Split"
            >> beam.ParDo(SplitDoFn(self.source, self.progress_dir)).with_outputs(
                "counts", main="tasks"
            )
        )
        read = (
            tasks.tasks
            | "SpreadTasks" >> beam.Reshuffle()
            | "Read"
            >> beam.ParDo(
                ReadDoFn(self.source, self.keep_failures, self.progress_dir, self.max_expansion)
            ).with_outputs("failures", "counts", main="documents")
        )
        return {
            "documents": read.documents,
            "failures": (planned.failures, read.failures) | "Failures" >> beam.Flatten(),
            "counts": (planned.counts, tasks.counts, read.counts) | "Counts" >> beam.Flatten(),
        }
