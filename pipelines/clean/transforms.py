"""The clean stage's Beam transform: Clean, Documents -> cleaned Documents (and Rejects)."""

from __future__ import annotations

from collections.abc import Iterator

import apache_beam as beam

from pipelines.document import Document, Reject
from pipelines.stage import CountingDoFn, stage_error
from pipelines.stats import seen_key


class CleanDoFn(CountingDoFn):
    STAGE = "clean"

    def __init__(self, config, keep_rejects: bool):
        self.config = config
        self.keep_rejects = keep_rejects

    def setup(self) -> None:
        super().setup()
        # imported here, once, not in process: a from-import costs ~1 us a document
        from pipelines.clean import clean_document, language_seen

        self.clean_document, self.language_seen = clean_document, language_seen

    def process(self, doc: Document) -> Iterator:
        try:
            result = self.clock.call(self.clean_document, doc, self.config)
        except Exception as error:
            yield from self._fail(stage_error(doc.id, "clean", error), self.keep_rejects)
            return
        language = self.language_seen(result)
        if language:  # the languages a filter that drops most saw are named at the end
            self.stat_update(seen_key("language", language))
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
