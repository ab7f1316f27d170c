"""The tests of tests/unit/pipelines/test_staged_path.py that start a process or run a Beam pipeline (that file
holds the in-process ones and says what they cover)."""

from __future__ import annotations

from dataset_format import ShardSet
from tests.conftest import CORPORA, GPT2_VOCAB

# Ten real WebText pages, two of them under 128 GPT-2 tokens once cleaned.
WEB_TEXT = CORPORA / "web" / "text" / "webtext_train_10"
IN_PROCESS = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]


def _documents(path) -> list[tuple[int, ...]]:
    shard_set = ShardSet(str(path))
    return sorted(tuple(shard_set.document(i).tolist()) for i in range(shard_set.num_documents))


def _preprocess(*argv: str) -> None:
    from pipelines.preprocess import main

    common = [f"--tokenizer={GPT2_VOCAB}", "--append-eod", "--progress-interval=0", *IN_PROCESS]
    assert main([*argv, *common]) == 0


def test_the_staged_path_keeps_the_documents_of_the_one_pass_run(tmp_path, capsys):
    from pipelines.dedup.__main__ import main as dedup

    _preprocess("--source=webtext", f"--input={WEB_TEXT}", f"--output={tmp_path / 'one'}",
                f"--write-cleaned={tmp_path / 'cleaned' / 'docs'}")
    assert dedup([f"--input={tmp_path / 'cleaned'}", f"--output={tmp_path / 'dedup'}",
                  *IN_PROCESS]) == 0
    _preprocess("--source=parquet", f"--input={tmp_path / 'dedup' / 'documents'}-*.parquet",
                f"--output={tmp_path / 'staged'}", "--no-dedup")
    capsys.readouterr()
    one_pass = _documents(tmp_path / "one")
    assert 0 < len(one_pass) < 9  # the floor dropped pages the cleaner kept
    assert _documents(tmp_path / "staged") == one_pass
