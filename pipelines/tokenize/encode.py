"""A batch of documents to token sequences, one `encode_batch` call each.

    tokenizer = load_tokenizer("/path/gpt2")            # dataset_format.tokenizer
    docs, rejects = tokenize_batch(batch, tokenizer, split_sentences=False, append_eod=True,
                                   min_tokens=128)

Minimum length: Megatron's OpenWebText cleanup drops documents shorter than 128 GPT-2 tokens;
preprocess should pass `min_tokens=128` for web text with a GPT-2 vocabulary and 0 (keep every
non-empty document) for curated sources. A document that carries a higher floor of its own
(`document.MIN_TOKENS_META`: a staged run's first pass wrote it) is held to that one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dataset_format import SPECIAL_TOKEN_NAMES
from dataset_format.tokenizer import TextTokenizer
from pipelines.document import (
    Document,
    Provenance,
    Reject,
    TokenizedDocument,
    carried_min_tokens,
)
from pipelines.sentences import split_sentences

TOO_FEW_TOKENS = "too_few_tokens"
# The reason this stage drops with, and the flag that changes it.
DROP_FLAGS = {TOO_FEW_TOKENS: "--min-tokens"}

def unknown_tokens(tokenized: Sequence[TokenizedDocument], tokenizer: TextTokenizer) -> int:
    """How many of the tokens of `tokenized` stand for text the vocabulary cannot spell
    (`TextTokenizer.unknown_ids`: the unknown token, [UNK] or <unk>, lost to the model, and a
    byte-fallback model's byte pieces); 0 for byte-level BPE, which spells every byte."""
    sequences = [ids for doc in tokenized for ids in doc.sequences]
    if not tokenizer.unknown_ids or not sequences:
        return 0
    # One search over the batch: split into sentences, a batch holds thousands of short
    # sequences, and a numpy call per sequence cost more than the search itself.
    return int(np.isin(np.concatenate(sequences), tokenizer.unknown_ids).sum())


# tokenize_batch's flag of the same name shadows the function there.
_split_into_sentences = split_sentences


def tokenize_batch(
    docs: Sequence[Document],
    tokenizer: TextTokenizer,
    *,
    split_sentences: bool,
    append_eod: bool,
    min_tokens: int = 0,
) -> tuple[list[TokenizedDocument], list[Reject]]:
    """Tokenize a batch of documents with one `encode_batch` call.

    One sequence per document, or with `split_sentences` one per sentence (BERT). With
    `append_eod` the end-of-document id is appended to each document's last sequence. A
    document with fewer than `min_tokens` tokens (counted before the EOD), or with none at all,
    is rejected as TOO_FEW_TOKENS.
    """
    eod = None
    if append_eod:
        if "eod" not in tokenizer.special_ids:
            raise ValueError(
                f"append_eod: the {tokenizer.kind} tokenizer has no end-of-document token "
                f"(one of {', '.join(SPECIAL_TOKEN_NAMES['eod'])})"
            )
        eod = np.array([tokenizer.special_ids["eod"]], dtype=np.int32)
    pieces: list[str] = []
    piece_counts: list[int] = []
    for doc in docs:
        doc_pieces = (
            _split_into_sentences(doc.text) if split_sentences else ([doc.text] if doc.text else [])
        )
        pieces.extend(doc_pieces)
        piece_counts.append(len(doc_pieces))
    encoded = tokenizer.encode_batch(pieces)

    tokenized: list[TokenizedDocument] = []
    rejects: list[Reject] = []
    position = 0
    for doc, count in zip(docs, piece_counts):
        sequences = [ids for ids in encoded[position : position + count] if len(ids)]
        position += count
        token_count = sum(len(ids) for ids in sequences)
        floor = max(min_tokens, carried_min_tokens(doc.meta))  # a staged run's first floor
        if token_count == 0 or token_count < floor:
            rejects.append(
                Reject(
                    doc.id,
                    doc.source,
                    TOO_FEW_TOKENS,
                    f"{token_count} tokens < {max(floor, 1)}",
                    doc.text,
                    url=doc.url,
                )
            )
            continue
        if eod is not None:
            sequences[-1] = np.concatenate([sequences[-1], eod])
        tokenized.append(
            TokenizedDocument(
                doc.id,
                doc.source,
                tuple(sequences),
                len(doc.text.encode("utf-8")),
                Provenance.of(doc),
            )
        )
    return tokenized, rejects
