"""Shared test fixtures: the real corpora in ../shared/corpora and tokenizers built from them."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

# Tokenizers' Rust thread pool: one thread keeps tests from fighting over the 2 cores.
os.environ.setdefault("RAYON_NUM_THREADS", "1")

# The commands keep a stop signal ignored that they were started ignoring (nohup; a shell's `&`
# without job control ignores SIGINT), and the processes the tests start inherit the test run's
# dispositions: a suite run in the background would see its Ctrl-C and SIGHUP tests' commands
# ignore the signal. The tests' commands start as they would at a terminal.
for _signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    if signal.getsignal(_signum) is signal.SIG_IGN:
        signal.signal(
            _signum, signal.default_int_handler if _signum == signal.SIGINT else signal.SIG_DFL
        )

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


@pytest.fixture
def gpt_checkpoint(tmp_path) -> str:
    """A real one-process GPT checkpoint with the model config evaluation and export need."""
    from tests.helpers.checkpoints import gpt_checkpoint_for_export

    return gpt_checkpoint_for_export(tmp_path / "run")
