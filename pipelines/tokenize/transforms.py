"""The tokenize stage's Beam transform: Tokenize, Documents -> TokenizedDocuments, one
`encode_batch` call per batch of documents."""

from __future__ import annotations

import os
from collections.abc import Iterator

import apache_beam as beam

from pipelines.document import Document
from pipelines.stage import BatchingDoFn, stage_error
from pipelines.stats import TOKENS_UNKNOWN
from pipelines.tokenize.tokenizer_ref import TokenizerRef


class TokenizeDoFn(BatchingDoFn):
    """Buffers documents and tokenizes them with one encode_batch call per batch."""

    STAGE = "tokenize"

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
        self.batch_chars = batch_bytes  # characters: a cheap stand-in for bytes
        self.keep_rejects = keep_rejects
        self.progress_dir = progress_dir

    def setup(self) -> None:
        if self.threads:
            # Before the tokenizer's first call: RAYON_NUM_THREADS sizes the pools of both
            # tokenizers and tiktoken, and Rayon reads it once per process. A value set on
            # the worker by hand wins.
            os.environ.setdefault("RAYON_NUM_THREADS", str(self.threads))
        self.tokenizer = self.tokenizer_ref.load()
        super().setup()

    def _tokenize(self, docs: list[Document]):
        from pipelines.tokenize.encode import tokenize_batch

        return self.clock.call(
            tokenize_batch,
            docs,
            self.tokenizer,
            split_sentences=self.split_sentences,
            append_eod=self.append_eod,
            min_tokens=self.min_tokens,
        )

    def handle_batch(self, docs: list[Document]) -> Iterator:
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
                        stage_error(doc.id, "tokenize", error), self.keep_rejects
                    )
        from pipelines.tokenize.encode import unknown_tokens

        tokens = 0
        for tokenized, rejects in results:
            for reject in rejects:
                yield from self._reject(reject, self.keep_rejects)
            self.stat_update(TOKENS_UNKNOWN, unknown_tokens(tokenized, self.tokenizer))
            for doc in tokenized:
                tokens += sum(len(s) for s in doc.sequences)
                yield doc
            self.stat_update("docs_tokenized", len(tokenized))
        self.stat_update("tokens_tokenized", tokens)


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
