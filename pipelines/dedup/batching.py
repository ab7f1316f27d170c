"""The base of dedup's steps that work on documents in batches (shingling is vectorised over
a batch): `DocBatcher` buffers a bundle's documents into bounded batches."""

from __future__ import annotations

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.transforms.window import GlobalWindows

from pipelines.dedup.config import DedupConfig
from pipelines.document import Document
from pipelines.stage import StageClock
from pipelines.stats import BundleCounts


def emit_windowed(outputs):
    """finish_bundle must give its outputs a window; dedup runs in the global window."""
    for out in outputs:
        if isinstance(out, pvalue.TaggedOutput):
            yield pvalue.TaggedOutput(out.tag, GlobalWindows.windowed_value(out.value))
        else:
            yield GlobalWindows.windowed_value(out)


class DocBatcher(beam.DoFn):
    """Buffers documents (with a payload each) into batches that close at batch_docs documents
    or batch_bytes of text, so memory is bounded by the batch whatever the bundle; subclasses
    turn a batch into outputs in _flush_batch. Results are per document, so batching does not
    change them."""

    def __init__(self, config: DedupConfig) -> None:
        self._config = config

    def start_bundle(self) -> None:
        self._batch: list = []
        self._batch_chars = 0
        self._counts = BundleCounts()
        self._clock = StageClock("dedup")

    def _add(self, doc: Document, payload=None):
        self._batch.append((doc, payload))
        self._batch_chars += len(doc.text)
        if (
            len(self._batch) >= self._config.batch_docs
            or self._batch_chars >= self._config.batch_bytes
        ):
            yield from self._flush()

    def finish_bundle(self):
        yield from emit_windowed(self._flush())
        self._clock.drain(self._counts)
        counts = self._counts.drain()
        if counts:
            yield pvalue.TaggedOutput("counts", GlobalWindows.windowed_value(counts))

    def _flush(self):
        batch, self._batch, self._batch_chars = self._batch, [], 0
        if batch:  # its shingling, hashing, matching timed as dedup's CPU time
            yield from self._clock.items(self._flush_batch(batch))

    def _flush_batch(self, batch):
        raise NotImplementedError
