"""The pipeline's composite PTransforms: ReadSource, Clean, Tokenize (WriteShards is in
pipelines/write/; the tokenizer reference the Tokenize DoFn holds, TokenizerRef, in
tokenizer_ref.py).

Each is a few small DoFns around the stage's pure function (a source's `read`,
`clean_document`, `tokenize_batch`). Every transform returns a dict of PCollections:
"documents" (what goes on), "counts" (one small dict per bundle, merged into stats.json),
and "failures" / "rejects" (records that went elsewhere; emitted only when someone keeps
them, otherwise just counted, so rejected text never travels).

A stage that raises on one record (a bug, or an input nobody foresaw) does not kill the run:
the record becomes a Failure named after the stage, counted and logged with its location;
--max-failure-rate turns many of them into a failed run.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.transforms.window import GlobalWindows

from pipelines import progress as progress_lib
from pipelines.document import PARTS_REMOVED, Document, Failure, ReadTask, Reject
from pipelines.reason_log import ReasonLog
from pipelines.stats import (
    DROPPED,
    FAILED,
    INPUT_BYTES,
    BundleCounts,
    file_failure_key,
    input_loss_counts,
)
from pipelines.tokenizer_ref import TokenizerRef

LOG = logging.getLogger(__name__)
# Every failure is counted; per reason, the first ones of each process are logged one by one,
# then one line each time the count doubles, so a corpus of broken files does not flood the log.
_FAILURES = ReasonLog(LOG)


def _windowed(output):
    """An output of finish_bundle must carry its window (the global one: this is batch)."""
    if isinstance(output, pvalue.TaggedOutput):
        return pvalue.TaggedOutput(output.tag, GlobalWindows.windowed_value(output.value))
    return GlobalWindows.windowed_value(output)


def _stage_error(location: str, stage: str, error: Exception) -> Failure:
    LOG.exception(
        "%s: %s stage raised on this record; counted as failed_%s_error", location, stage, stage
    )
    return Failure(
        location=location, reason=f"{stage}_error", detail=f"{type(error).__name__}: {error}"
    )


class _CountingDoFn(beam.DoFn):
    """Bundle-local counts, emitted once per bundle on the "counts" output."""

    def start_bundle(self) -> None:
        self.counts = BundleCounts()

    def _fail(self, failure: Failure, keep: bool) -> Iterator:
        _FAILURES.warning(failure.reason, "skipped %s: %s %s", failure.location, failure.reason,
                          failure.detail)
        self.counts.inc(FAILED + failure.reason)
        if keep:
            yield pvalue.TaggedOutput("failures", failure)

    def _reject(self, reject: Reject, keep: bool) -> Iterator:
        self.counts.inc(DROPPED + reject.reason)
        if keep:
            yield pvalue.TaggedOutput("rejects", reject)

    def finish_bundle(self) -> Iterator:
        yield _windowed(pvalue.TaggedOutput("counts", self.counts.drain()))


# -- read -------------------------------------------------------------------------------------
def _where(task: ReadTask) -> str:
    return task.path if task.end < 0 else f"{task.path}[{task.start}:{task.end}]"


def task_input_bytes(task: ReadTask) -> int:
    """Bytes of input a task reads (sources.input_bytes): its own byte range or row groups, not
    the whole file of a split one, so that N tasks of a file together get one file's bound."""
    from pipelines.sources import get_source, input_bytes

    return input_bytes(get_source(task.source), task)


# Below this much text a task is never stopped, whatever its ratio: a tiny file may hold a
# short, very repetitive document.
MIN_EXPANSION_BOUND_BYTES = 64 << 20


def expansion_bound(input_bytes: int, max_expansion: float) -> float:
    """Most bytes of text a task of `input_bytes` may produce (inf: no bound)."""
    if max_expansion <= 0:
        return float("inf")
    return max(input_bytes * max_expansion, MIN_EXPANSION_BOUND_BYTES)


class _SourceTaskDoFn(_CountingDoFn):
    """A DoFn on one source's ReadTasks: the source module and the progress reporter are set up
    once per worker, and the reporter flushed at each bundle's end."""

    def __init__(self, source: str, progress_dir: str | None):
        self.source_name = source
        self.progress_dir = progress_dir

    def setup(self) -> None:
        from pipelines.sources import get_source

        self.source = get_source(self.source_name)
        self.progress = progress_lib.reporter(self.progress_dir)

    def finish_bundle(self) -> Iterator:
        if self.progress:
            self.progress.flush()
        yield from super().finish_bundle()


class ReadDoFn(_SourceTaskDoFn):
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
        input_bytes = task_input_bytes(task)
        self.counts.inc(INPUT_BYTES, input_bytes)
        if self.max_expansion > 0:
            bound = expansion_bound(input_bytes, self.max_expansion)
        try:
            for record in self.source.read(task):
                records += 1
                if isinstance(record, Document):
                    size = len(record.text.encode("utf-8"))
                    text_bytes += size
                    if text_bytes > bound:
                        # A decompression bomb: stop the task here, so its output (spill,
                        # shards) stays within max_expansion x the input.
                        self.counts.inc("read_failures")
                        yield from self._fail(
                            Failure(
                                location=_where(task),
                                reason="expansion_limit",
                                detail=f"more than {bound / 1e6:,.0f} MB of text from "
                                f"{task_input_bytes(task):,} input bytes (--max-expansion "
                                f"{self.max_expansion:g}); the rest of the task is skipped",
                            ),
                            self.keep_failures,
                        )
                        break
                    self.counts.inc("docs_read")
                    self.counts.inc("bytes_read", size)
                    if self.progress:
                        self.progress.add(docs_read=1, bytes_read=size)
                    yield record
                    yield from self._parts_removed(record)
                else:
                    self.counts.inc("read_failures")
                    self.counts.inc(file_failure_key(task.path, record.reason))
                    for name, lost in input_loss_counts(record, input_bytes).items():
                        self.counts.inc(name, lost)
                    yield from self._fail(record, self.keep_failures)
        except Exception as error:  # a reader bug must not end a long run: count it, go on
            records += 1
            self.counts.inc("read_failures")
            # The records after the error were never read, so nothing can count them: the
            # run fails at the end (stats.check_stats) rather than report a false account.
            self.counts.inc("read_tasks_cut_short")
            yield from self._fail(_stage_error(_where(task), "read", error), self.keep_failures)
        if records == 0 and task.start == 0 and task.end < 0:
            # Nothing to account for, but an empty file is usually a mistake worth seeing (a
            # range of a split file may hold no record start: a longer record owns it).
            LOG.warning("%s: no records (an empty input)", _where(task))
            self.counts.inc("empty_tasks")
        self.counts.inc("tasks_read")
        if self.progress:
            self.progress.add(tasks=1)

    def _parts_removed(self, doc: Document) -> Iterator:
        """A kept document the source cut parts of (a book's front matter): counted, and its
        note written to the rejects audit when rejects are kept."""
        removed = doc.meta.get(PARTS_REMOVED)
        if removed:
            self.counts.inc("docs_with_parts_removed")
            if self.keep_failures:
                yield pvalue.TaggedOutput(
                    "failures", Reject(doc.id, doc.source, PARTS_REMOVED, removed)
                )


class PlanDoFn(_CountingDoFn):
    """The input pattern -> the source's per-file ReadTasks (a listing: one worker does it, as
    Beam's MatchFiles does). A pattern that cannot be planned is one counted, logged Failure.
    Its input is one Impulse: the pattern is the DoFn's own (a Create is four transforms)."""

    def __init__(self, source: str, pattern: str, options: Mapping[str, str], keep_failures: bool):
        self.source_name = source
        self.pattern = pattern
        self.options = dict(options)
        self.keep_failures = keep_failures

    def process(self, _once: bytes) -> Iterator:
        from pipelines.sources import get_source

        try:
            tasks = get_source(self.source_name).plan(self.pattern, self.options)
        except (ValueError, OSError) as error:  # FileNotFoundError included
            self.counts.inc("read_failures")
            failure = Failure(location=self.pattern, reason="plan_error", detail=str(error))
            yield from self._fail(failure, self.keep_failures)
            return
        self.counts.inc("files_planned", len(tasks))
        yield from tasks


class SplitDoFn(_SourceTaskDoFn):
    """A file's ReadTask -> the tasks the source cuts it into (sources/ranges.py: byte ranges
    of a big JSONL file, member ranges of a big tar); most files stay one task."""

    def process(self, task: ReadTask) -> Iterator:
        from pipelines.sources import split_task

        try:
            tasks = split_task(self.source, task)
        except Exception:  # a splitting bug costs parallelism, never data: read it whole
            LOG.exception("%s: could not be split; read as one task", task.path)
            tasks = [task]
        self.counts.inc("tasks_planned", len(tasks))
        if self.progress:
            self.progress.add(tasks_planned=len(tasks))
        yield from tasks


class ReadSource(beam.PTransform):
    """PBegin -> {"documents", "failures", "counts"} from an input pattern.

    Tasks are planned at run time, not on the launcher: the graph holds the pattern only, so
    its size does not grow with the number of files (a million small files would otherwise
    inline a million tasks into the job). The pattern is listed on one worker, each file's task
    is split where its format allows on whichever worker the first Reshuffle sends it to, and
    the second Reshuffle spreads the tasks over every worker; each task is read start to end
    on one worker.
    """

    def __init__(
        self,
        source: str,
        pattern: str,
        options: Mapping[str, str] | None = None,
        *,
        keep_failures: bool = False,
        progress_dir: str | None = None,
        max_expansion: float = 0.0,
    ):
        super().__init__()
        self.source = source
        self.pattern = pattern
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
                PlanDoFn(self.source, self.pattern, self.options, self.keep_failures)
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


# -- clean ------------------------------------------------------------------------------------
class CleanDoFn(_CountingDoFn):
    def __init__(self, config, keep_rejects: bool):
        self.config = config
        self.keep_rejects = keep_rejects

    def process(self, doc: Document) -> Iterator:
        from pipelines.clean import clean_document

        try:
            result = clean_document(doc, self.config)
        except Exception as error:
            yield from self._fail(_stage_error(doc.id, "clean", error), self.keep_rejects)
            return
        if isinstance(result, Reject):
            yield from self._reject(result, self.keep_rejects)
        else:
            yield result


class Clean(beam.PTransform):
    """PCollection[Document] -> {"documents", "rejects", "failures", "counts"}."""

    def __init__(self, config, *, keep_rejects: bool = False):
        super().__init__()
        self.config = config
        self.keep_rejects = keep_rejects

    def expand(self, documents):
        cleaned = documents | "Clean" >> beam.ParDo(
            CleanDoFn(self.config, self.keep_rejects)
        ).with_outputs("rejects", "failures", "counts", main="documents")
        return {
            "documents": cleaned.documents,
            "rejects": cleaned.rejects,
            "failures": cleaned.failures,
            "counts": cleaned.counts,
        }


# -- count rejects that another transform produced (dedup) -------------------------------------
class CountRejectsDoFn(_CountingDoFn):
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


# -- tokenize ---------------------------------------------------------------------------------
class TokenizeDoFn(_CountingDoFn):
    """Buffers documents and tokenizes them with one encode_batch call per batch."""

    def __init__(
        self,
        tokenizer_ref: TokenizerRef,
        *,
        split_sentences: bool,
        append_eod: bool,
        min_tokens: int,
        batch_docs: int,
        batch_bytes: int,
        keep_rejects: bool,
        progress_dir: str | None,
        threads: int | None = None,
    ):
        self.tokenizer_ref = tokenizer_ref
        self.threads = threads
        self.split_sentences = split_sentences
        self.append_eod = append_eod
        self.min_tokens = min_tokens
        self.batch_docs = batch_docs
        self.batch_bytes = batch_bytes
        self.keep_rejects = keep_rejects
        self.progress_dir = progress_dir

    def setup(self) -> None:
        if self.threads:
            # Before the tokenizer's first call: RAYON_NUM_THREADS sizes the pools of both
            # tokenizers and tiktoken, and Rayon reads it once per process. A value set on
            # the worker by hand wins.
            os.environ.setdefault("RAYON_NUM_THREADS", str(self.threads))
        self.tokenizer = self.tokenizer_ref.load()
        self.progress = progress_lib.reporter(self.progress_dir)

    def start_bundle(self) -> None:
        super().start_bundle()
        self.batch: list[Document] = []
        self.batch_chars = 0

    def process(self, doc: Document) -> Iterator:
        self.batch.append(doc)
        self.batch_chars += len(doc.text)  # characters: a cheap stand-in for bytes
        if len(self.batch) >= self.batch_docs or self.batch_chars >= self.batch_bytes:
            yield from self._flush()

    def _tokenize(self, docs: list[Document]):
        from pipelines.tokenize import tokenize_batch

        return tokenize_batch(
            docs,
            self.tokenizer,
            split_sentences=self.split_sentences,
            append_eod=self.append_eod,
            min_tokens=self.min_tokens,
        )

    def _flush(self) -> Iterator:
        docs, self.batch, self.batch_chars = self.batch, [], 0
        if not docs:
            return
        try:
            results = [self._tokenize(docs)]
        except Exception:
            # Find the document that breaks the batch: tokenize one by one.
            results = []
            for doc in docs:
                try:
                    results.append(self._tokenize([doc]))
                except Exception as error:
                    yield from self._fail(
                        _stage_error(doc.id, "tokenize", error), self.keep_rejects
                    )
        tokens = 0
        for tokenized, rejects in results:
            for reject in rejects:
                yield from self._reject(reject, self.keep_rejects)
            for doc in tokenized:
                tokens += sum(len(s) for s in doc.sequences)
                yield doc
            self.counts.inc("docs_tokenized", len(tokenized))
        self.counts.inc("tokens_tokenized", tokens)
        if self.progress:
            self.progress.add(docs_tokenized=len(docs), tokens=tokens)

    def finish_bundle(self) -> Iterator:
        for output in self._flush():
            yield _windowed(output)
        if self.progress:
            self.progress.flush()
        yield from super().finish_bundle()


class Tokenize(beam.PTransform):
    """PCollection[Document] -> {"documents" (TokenizedDocument), "rejects", "failures", "counts"}."""

    def __init__(
        self,
        tokenizer_ref: TokenizerRef,
        *,
        split_sentences: bool = False,
        append_eod: bool = False,
        min_tokens: int = 0,
        batch_docs: int = 256,
        batch_bytes: int = 4 << 20,
        keep_rejects: bool = False,
        progress_dir: str | None = None,
        threads: int | None = None,
    ):
        """`threads`: the tokenizer pool's size in each worker process (None: its default,
        every core of the machine); preprocess.tokenizer_threads picks it per runner."""
        super().__init__()
        if append_eod and "eod" not in tokenizer_ref.special_ids:
            raise ValueError(
                f"--append-eod: the {tokenizer_ref.kind} tokenizer has no end-of-document token"
            )
        self.dofn = TokenizeDoFn(
            tokenizer_ref,
            split_sentences=split_sentences,
            append_eod=append_eod,
            min_tokens=min_tokens,
            batch_docs=batch_docs,
            batch_bytes=batch_bytes,
            keep_rejects=keep_rejects,
            progress_dir=progress_dir,
            threads=threads,
        )

    def expand(self, documents):
        tokenized = documents | "Tokenize" >> beam.ParDo(self.dofn).with_outputs(
            "rejects", "failures", "counts", main="documents"
        )
        return {
            "documents": tokenized.documents,
            "rejects": tokenized.rejects,
            "failures": tokenized.failures,
            "counts": tokenized.counts,
        }
