"""The clean stage's Beam transform: Clean, Documents -> cleaned Documents (and Rejects)."""

from __future__ import annotations

from collections.abc import Iterator

import apache_beam as beam

from pipelines.document import Document, Reject
from pipelines.stage import BatchingDoFn, stage_error
from pipelines.stats import seen_key

# A batch of documents cleaned together (their languages identified in one call: a short web
# page's identification costs less than half of what it does alone) is at most this many
# documents or characters; a document over the characters is a batch alone.
BATCH_DOCS = 256
BATCH_CHARS = 1 << 20


class CleanDoFn(BatchingDoFn):
    """Buffers documents and cleans them a batch at a time (`clean_documents`)."""

    STAGE = "clean"
    batch_docs, batch_chars = BATCH_DOCS, BATCH_CHARS

    def __init__(self, config, keep_rejects: bool):
        self.config = config
        self.keep_rejects = keep_rejects

    def setup(self) -> None:
        super().setup()
        # imported here, once, not in process: a from-import costs ~1 us a document
        from pipelines.clean import clean_documents, language_seen

        self.clean_documents, self.language_seen = clean_documents, language_seen

    def handle_batch(self, docs: list[Document]) -> Iterator:
        results = self.clock.call(self.clean_documents, docs, self.config)
        for doc, result in zip(docs, results):
            if isinstance(result, Exception):
                yield from self._fail(stage_error(doc.id, "clean", result), self.keep_rejects)
                continue
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
