"""What every stage's Beam wrapper shares: a DoFn that counts per bundle, and the rule for a
record a stage raised on.

Each stage (sources/transforms.py, clean/transforms.py, tokenize/transforms.py, and dedup's and
write's own) is a few small DoFns around the stage's pure function. Every stage transform returns
a dict of PCollections: "documents" (what goes on), "counts" (one small dict per bundle, merged
into stats.json), and "failures" / "rejects" (records that went elsewhere; emitted only when
someone keeps them, otherwise just counted, so rejected text never travels).

A stage that raises on one record (a bug, or an input nobody foresaw) does not kill the run:
the record becomes a Failure named after the stage, counted and logged with its location;
--max-failure-rate turns many of them into a failed run.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.transforms.window import GlobalWindows

from pipelines.document import Failure, Reject
from pipelines.reason_log import ReasonLog
from pipelines.stats import DROPPED, FAILED, BundleCounts

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
    LOG.exception(
        "%s: %s stage raised on this record; counted as failed_%s_error", location, stage, stage
    )
    return Failure(
        location=location, reason=f"{stage}_error", detail=f"{type(error).__name__}: {error}"
    )


class CountingDoFn(beam.DoFn):
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
        yield windowed(pvalue.TaggedOutput("counts", self.counts.drain()))


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
