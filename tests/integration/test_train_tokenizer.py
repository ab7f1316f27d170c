from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from dataset_format.tokenizer import load_tokenizer
from pipelines.tokenize.train_tokenizer import main
from tests.conftest import REPO

ROOT = REPO
CORPORA = ROOT.parent / "shared" / "corpora"
BOOKS = CORPORA / "books"
WEBTEXT = CORPORA / "web" / "text" / "webtext_train_10"


def _train(tmp_path: Path, capsys, *extra: str) -> dict:
    output = tmp_path / "tokenizer.json"
    argv = ["--source", "books", "--input", str(BOOKS / "*.txt"), "--vocab-size", "2000"]
    assert main([*argv, "--output", str(output), "--sample-mb", "1", *extra]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["output"] == str(output) and output.is_file()
    return summary


def test_byte_level_bpe_round_trips_and_gets_the_fast_path(tmp_path, capsys):
    summary = _train(tmp_path, capsys, "--kind", "byte-level-bpe")
    assert summary["kind"] == "byte_level_bpe" and summary["vocab_size"] == 2000
    assert summary["special_ids"] == {"eod": 0}
    # Candide is French: the English cleaner rejects it, and the sample stays in budget.
    assert summary["rejected"] == 1 and 900_000 < summary["bytes"] <= 1_000_000
    tokenizer = load_tokenizer(summary["output"])
    assert tokenizer.uses_fast_path
    texts = [p.read_text("utf-8") for p in sorted(WEBTEXT.glob("*.txt"))]
    texts.append((BOOKS / "46-0.txt").read_text("utf-8")[:50_000])
    fast, slow = tokenizer.encode_batch(texts), tokenizer.encode_batch_hf(texts)
    assert all(np.array_equal(a, b) for a, b in zip(fast, slow))
    for text, ids in zip(texts, fast):
        assert tokenizer.decode(ids) == text
    # A 2,000-token vocabulary learnt real merges: well under one token per byte.
    assert sum(map(len, fast)) < 0.5 * sum(len(t.encode()) for t in texts)


def test_wordpiece_lowercase(tmp_path, capsys):
    summary = _train(tmp_path, capsys, "--kind", "wordpiece", "--lowercase")
    assert summary["kind"] == "wordpiece"
    assert summary["special_ids"] == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    tokenizer = load_tokenizer(summary["output"])
    assert not tokenizer.uses_fast_path
    (ids,) = tokenizer.encode_batch(["Call me Ishmael. The WHALE!"])
    assert tokenizer.special_ids["unk"] not in ids.tolist()
    assert tokenizer.decode(ids) == "call me ishmael. the whale!"


def test_module_entry_point():
    result = subprocess.run(
        [sys.executable, "-m", "pipelines.tokenize.train_tokenizer", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0 and "--vocab-size" in result.stdout
