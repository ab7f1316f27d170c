from __future__ import annotations

import pytest

from pipelines.clean import CleanConfig
from pipelines.tokenize.train_tokenizer import SampleStats, main, sample_texts, spread_indices
from tests.conftest import REPO

ROOT = REPO
CORPORA = ROOT.parent / "shared" / "corpora"
BOOKS = CORPORA / "books"


def _sample(sample_bytes: int) -> tuple[list[str], SampleStats]:
    stats = SampleStats()
    pattern = str(BOOKS / "*.txt")
    texts = sample_texts(
        "books", pattern, sample_bytes=sample_bytes, clean_config=CleanConfig(), stats=stats
    )
    return list(texts), stats


def test_sample_is_spread_over_the_inputs_and_bounded():
    texts, stats = _sample(600_000)
    assert 590_000 < stats.bytes == sum(len(t.encode()) for t in texts) <= 600_000
    # 600 kB is two 256 KiB shares: books 0 and 4 of 8 first (Alice, A Christmas Carol), both
    # smaller than their 300 kB shares, then the others in order until the budget is spent.
    assert "Alice" in texts[0] and "Scrooge" in texts[1] and "John laughs at me" in texts[2]
    assert stats.tasks == len(texts) + stats.rejected < 8  # Candide (French) is rejected
    assert all(not t[-1].isspace() for t in texts)  # a cut share ends on a word boundary
    texts, everything = _sample(10**8)
    assert everything.tasks == 8 and everything.documents == 7 and everything.rejected == 1


def test_spread_indices():
    assert spread_indices(8, 2) == [0, 4]
    assert spread_indices(3, 5) == [0, 1, 2]
    assert spread_indices(10, 3) == [0, 3, 6]


def test_nothing_left_after_cleaning_is_a_clear_error(tmp_path, capsys):
    argv = ["--kind", "byte-level-bpe", "--source", "books", "--vocab-size", "500"]
    code = main(
        [*argv, "--input", str(BOOKS / "Candide-fr.txt"), "--output", str(tmp_path / "t.json")]
    )
    assert code == 2 and "no text" in capsys.readouterr().err
    assert not (tmp_path / "t.json").exists()
    code = main([*argv, "--input", str(BOOKS / "*.txt"), "--output", "x.json", "--language", "xx"])
    assert code == 2 and "unknown language code" in capsys.readouterr().err


@pytest.mark.parametrize("size", ["200"])
def test_too_small_vocabulary_is_rejected(tmp_path, capsys, size):
    argv = ["--kind", "byte-level-bpe", "--source", "books", "--input", str(BOOKS / "11-0.txt")]
    assert main([*argv, "--vocab-size", size, "--output", str(tmp_path / "t.json")]) == 2
    assert "needs more than 257" in capsys.readouterr().err
