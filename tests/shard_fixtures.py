"""Real shard sets for tests: paragraphs of a Gutenberg book, tokenized with the real vocabularies.

    make_gpt_shards(tmp_path, n_docs=300)   GPT-2 byte-level BPE, one sequence per document,
                                             EOD (50256) appended to each, as `--append-eod` does
    make_bert_shards(tmp_path, n_docs=300)  BERT uncased WordPiece, one sequence per sentence
                                             (sentences split naively at ". ")

Both write `num_shards` MMIDIDX pairs and a manifest with the tokenizer file into
`tmp_path / name` and return that directory as a string. Tokenization is cached per process.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np

from dataset_format import IndexedDatasetWriter, TokenizerInfo, write_shard_set_manifest
from tests.conftest import BERT_VOCAB, CORPORA, GPT2_VOCAB

os.environ.setdefault("RAYON_NUM_THREADS", "1")

GPT2_EOD = 50256
GPT2_VOCAB_SIZE = 50257
BERT_SPECIAL_IDS = {"pad": 0, "unk": 100, "cls": 101, "sep": 102, "mask": 103}
BERT_VOCAB_SIZE = 30522
DEFAULT_BOOK = "2701-0.txt"  # Moby-Dick: 1,612 paragraphs of 200+ characters


@functools.cache
def book_paragraphs(book: str = DEFAULT_BOOK, min_chars: int = 200) -> tuple[str, ...]:
    """The book's paragraphs (blank-line separated, lines joined), Gutenberg markers cut off."""
    text = (CORPORA / "books" / book).read_text(encoding="utf-8-sig").replace("\r\n", "\n")
    start = text.find("*** START OF")
    if start >= 0:
        text = text[text.index("\n", start) + 1 :]
    end = text.find("*** END OF")
    if end >= 0:
        text = text[:end]
    paragraphs = (" ".join(p.split()) for p in text.split("\n\n"))
    return tuple(p for p in paragraphs if len(p) >= min_chars)


@functools.lru_cache(maxsize=1)
def gpt2_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tok = Tokenizer(
        models.BPE.from_file(str(GPT2_VOCAB / "vocab.json"), str(GPT2_VOCAB / "merges.txt"))
    )
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok


@functools.lru_cache(maxsize=1)
def bert_tokenizer():
    from tokenizers import BertWordPieceTokenizer

    return BertWordPieceTokenizer(str(BERT_VOCAB), lowercase=True)


@functools.cache
def gpt_documents(n_docs: int, book: str = DEFAULT_BOOK) -> tuple[np.ndarray, ...]:
    paragraphs = list(book_paragraphs(book)[:n_docs])
    if len(paragraphs) < n_docs:
        raise ValueError(f"{book} has only {len(paragraphs)} paragraphs, {n_docs} asked for")
    encodings = gpt2_tokenizer().encode_batch(paragraphs)
    return tuple(np.array(e.ids + [GPT2_EOD], dtype=np.uint16) for e in encodings)


def split_sentences(paragraph: str) -> list[str]:
    parts = [s.strip() for s in paragraph.split(". ")]
    return [s for s in parts if s]


@functools.cache
def bert_documents(n_docs: int, book: str = DEFAULT_BOOK) -> tuple[tuple[np.ndarray, ...], ...]:
    paragraphs = list(book_paragraphs(book)[:n_docs])
    if len(paragraphs) < n_docs:
        raise ValueError(f"{book} has only {len(paragraphs)} paragraphs, {n_docs} asked for")
    sentences = [split_sentences(p) for p in paragraphs]
    flat = [s for doc in sentences for s in doc]
    encodings = bert_tokenizer().encode_batch(flat, add_special_tokens=False)
    ids = iter(np.array(e.ids, dtype=np.uint16) for e in encodings)
    documents = []
    for doc in sentences:
        documents.append(tuple(s for s in (next(ids) for _ in doc) if s.size))
    return tuple(documents)


def _write_set(directory: Path, documents, num_shards: int, **manifest) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    bounds = np.linspace(0, len(documents), num_shards + 1).astype(int)
    shards = []
    for i in range(num_shards):
        writer = IndexedDatasetWriter(str(directory / f"shard-{i:05d}"), np.uint16)
        for doc in documents[bounds[i] : bounds[i + 1]]:
            writer.add_document(doc)
        shards.append(writer.finalize())
    write_shard_set_manifest(str(directory), shards, dtype="uint16", **manifest)
    return str(directory)


def make_gpt_shards(
    tmp_path, n_docs: int = 300, *, num_shards: int = 2, name: str = "gpt", book: str = DEFAULT_BOOK
) -> str:
    """A GPT shard set of the book's first `n_docs` paragraphs; returns its directory."""
    directory = Path(tmp_path) / name
    Path(tmp_path).mkdir(parents=True, exist_ok=True)
    tokenizer_file = Path(tmp_path) / f"{name}-tokenizer.json"
    gpt2_tokenizer().save(str(tokenizer_file))
    documents = [[doc] for doc in gpt_documents(n_docs, book)]
    return _write_set(
        directory,
        documents,
        num_shards,
        sequence_unit="document",
        tokenizer=TokenizerInfo(
            file="tokenizer.json",
            kind="byte-level-bpe",
            vocab_size=GPT2_VOCAB_SIZE,
            special_ids={"eod": GPT2_EOD},
        ),
        tokenizer_file=str(tokenizer_file),
        source={"book": book, "documents": n_docs},
    )


def make_bert_shards(
    tmp_path,
    n_docs: int = 300,
    *,
    num_shards: int = 2,
    name: str = "bert",
    book: str = DEFAULT_BOOK,
) -> str:
    """A sentence-level BERT shard set of the book's first `n_docs` paragraphs."""
    return _write_set(
        Path(tmp_path) / name,
        list(bert_documents(n_docs, book)),
        num_shards,
        sequence_unit="sentence",
        tokenizer=TokenizerInfo(
            file="vocab.txt",
            kind="wordpiece",
            vocab_size=BERT_VOCAB_SIZE,
            special_ids=dict(BERT_SPECIAL_IDS),
        ),
        tokenizer_file=str(BERT_VOCAB),
        source={"book": book, "documents": n_docs},
    )


def spill_by_hand(output: str, bundles, num_buckets: int) -> dict[int, list[str]]:
    """Run the pipeline's SpillDoFn over `bundles` as a runner would (setup, one bundle each,
    teardown); returns {bucket: [spill names]}."""
    from pipelines.write import SpillDoFn

    dofn = SpillDoFn(output, num_buckets, "uint16")
    dofn.setup()
    refs: dict[int, list[str]] = {}
    for bundle in bundles:
        dofn.start_bundle()
        for doc in bundle:
            dofn.process(doc)
        for windowed in dofn.finish_bundle():
            bucket, name = windowed.value
            refs.setdefault(bucket, []).append(name)
    dofn.teardown()
    return refs
