"""What the unit and the integration tests of tokenizer_files_trust share."""

from __future__ import annotations

import base64
import json

from dataset_format.tokenizer import gpt2_byte_to_unicode
from tests.conftest import CORPORA
from tests.conftest import GPT2_VOCAB as GPT2

BOOK = CORPORA / "books" / "pg1080.txt"


def gpt2_copy(directory, vocab_edit=None, merges_edit=None) -> str:
    """A copy of the shared GPT-2 vocab.json + merges.txt in `directory`, edited."""
    vocab = json.loads((GPT2 / "vocab.json").read_text("utf-8"))
    if vocab_edit:
        vocab_edit(vocab)
    (directory / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), "utf-8")
    merges = (GPT2 / "merges.txt").read_bytes().decode("utf-8")
    (directory / "merges.txt").write_bytes((merges_edit or str)(merges).encode("utf-8"))
    return str(directory)


def tiktoken_from_vocab_json(path) -> list[str]:
    """GPT-2's vocab.json written as a tiktoken ranks file: each token's bytes (through GPT-2's
    byte alphabet) base64-encoded, with its id as its rank; <|endoftext|> left out as tiktoken
    leaves it out."""
    byte_of_char = {char: byte for byte, char in gpt2_byte_to_unicode().items()}
    vocab = json.loads((GPT2 / "vocab.json").read_text("utf-8"))
    del vocab["<|endoftext|>"]
    return [
        f"{base64.b64encode(bytes(byte_of_char[c] for c in token)).decode()} {rank}"
        for token, rank in sorted(vocab.items(), key=lambda item: item[1])
    ]
