"""The tests of tests/unit/pipelines/test_tokenizer_files_trust.py that start a process or run a Beam pipeline (that file
holds the in-process ones and says what they cover)."""

from __future__ import annotations

import logging
import resource
import subprocess
import sys

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to

from dataset_format.tokenizer import TextTokenizer, load_tokenizer
from pipelines.document import Document
from tests.conftest import GPT2_VOCAB as GPT2
from tests.conftest import REPO
from tests.helpers.tokenizer_files_trust import BOOK, gpt2_copy, tiktoken_from_vocab_json


@pytest.fixture(scope="module")
def gpt2() -> TextTokenizer:
    return load_tokenizer(str(GPT2))


def _load_in_a_bounded_process(spec: str) -> subprocess.CompletedProcess:
    """load_tokenizer(spec) in a child with 3 GB of address space: an id near 2^31 has
    tokenizers allocate gigabytes and abort, which must not take the test run with it."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    code = (
        "import sys; from dataset_format.tokenizer import load_tokenizer\n"
        "try:\n    load_tokenizer(sys.argv[1])\n"
        "except ValueError as e:\n    print(e); sys.exit(2)\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, spec], cwd=REPO, capture_output=True, text=True,
        timeout=120, preexec_fn=limit,
    )  # fmt: skip


def test_ids_and_ranks_near_2_to_the_31_are_refused_before_tokenizers_sees_them(tmp_path):
    (tmp_path / "json").mkdir()
    spec = gpt2_copy(tmp_path / "json", lambda v: v.__setitem__("Ġthe", 2**31 - 2))
    lines = tiktoken_from_vocab_json(GPT2 / "vocab.json")
    token = lines[50255].split()[0]
    lines[50255] = f"{token} {2**31 - 2}"
    ranks = tmp_path / "gpt2.tiktoken"
    ranks.write_text("\n".join(lines) + "\n")
    for path, where in ((spec, "vocab.json: token 'Ġthe' has id"), (str(ranks), "tiktoken:50256: rank")):
        done = _load_in_a_bounded_process(path)
        assert (done.returncode, done.stderr) == (2, ""), done.stderr[-2000:]
        assert done.stdout.strip().splitlines() == [done.stdout.strip()]
        assert where in done.stdout and "2147483646" in done.stdout and "MAX_TOKENIZER_VOCAB" in done.stdout


class _BrokenTokenizer(TextTokenizer):
    """A tokenizer whose every encode raises (a bug, or a tokenizer that cannot encode)."""

    def encode_batch(self, texts):
        raise RuntimeError("cannot encode\n  a second line of detail")


class _BrokenRef:
    def __init__(self, tokenizer_json: str) -> None:
        self.json = tokenizer_json
        self.special_ids = {}
        self.kind = "byte_level_bpe"

    def load(self):
        return _BrokenTokenizer(self.json)


def test_a_failure_on_every_record_is_counted_and_logged_in_few_lines(gpt2, caplog, monkeypatch):
    """1,000 documents that each fail to tokenize: each is counted, the log holds a line per
    doubling, not a traceback each (2.7 MB of log for 1,000 documents)."""
    from pipelines import stage
    from pipelines.reason_log import FIRST, ReasonLog
    from pipelines.stats import merge_counts
    from pipelines.tokenize.transforms import Tokenize

    paragraphs = [p for p in BOOK.read_text("utf-8").split("\n\n") if p.strip()]
    docs = [Document(f"pg1080#{i}", "books", paragraphs[i % len(paragraphs)]) for i in range(1000)]
    monkeypatch.setattr(stage, "_FAILURES", ReasonLog(stage.LOG))  # this test's counts alone
    caplog.set_level(logging.WARNING)
    with beam.Pipeline(runner="DirectRunner") as pipeline:
        out = pipeline | beam.Create(docs) | Tokenize(_BrokenRef(gpt2.to_json()), batch_docs=64)
        counts = out["counts"] | beam.combiners.ToList() | beam.Map(merge_counts)
        assert_that(
            counts | beam.Map(lambda c: (c.get("failed_tokenize_error"), c.get("docs_tokenized"))),
            equal_to([(1000, None)]),
        )
    logged = [r for r in caplog.records if r.name == "pipelines.stage"]
    assert 0 < len(logged) <= FIRST + 11  # the first ones, then one line per doubling
    assert not any(r.exc_info for r in logged)
    assert all("\n" not in r.getMessage() for r in logged)
    assert "RuntimeError: cannot encode" in logged[0].getMessage()
