"""Shared test fixtures: the real corpora in ../shared/corpora and tokenizers built from them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Tokenizers' Rust thread pool: one thread keeps tests from fighting over the 2 cores.
os.environ.setdefault("RAYON_NUM_THREADS", "1")

REPO = Path(__file__).resolve().parents[1]
CORPORA = REPO.parent / "shared" / "corpora"
GPT2_VOCAB = CORPORA / "vocab" / "gpt2"
BERT_VOCAB = CORPORA / "vocab" / "bert-base-uncased" / "vocab.txt"


@pytest.fixture(scope="session")
def gpt2_tokenizer():
    """The real GPT-2 byte-level BPE, from the shared vocab.json + merges.txt."""
    from tests.shard_fixtures import gpt2_tokenizer as build

    return build()


# The trainer's tests: Moby-Dick's paragraphs as a GPT set (GPT-2 BPE) and a BERT set (WordPiece)
@pytest.fixture(scope="session")
def gpt_shards(tmp_path_factory) -> str:
    from tests.shard_fixtures import make_gpt_shards

    return make_gpt_shards(tmp_path_factory.mktemp("train-gpt-data"), 200)


@pytest.fixture(scope="session")
def bert_shards(tmp_path_factory) -> str:
    from tests.shard_fixtures import make_bert_shards

    return make_bert_shards(tmp_path_factory.mktemp("train-bert-data"), 300)
