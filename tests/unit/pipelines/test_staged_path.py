"""One result by either path: the staged run (preprocess --write-cleaned, python -m
pipelines.dedup, preprocess --source parquet) keeps the documents the one-pass run keeps. The
web source drops pages under 128 tokens; its cleaned documents carry that floor
(document.MIN_TOKENS_META), which the last pass applies though the parquet source's own is 0."""

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


def test_a_documents_floor_is_the_higher_of_its_own_and_the_runs(gpt2_tokenizer):
    """tokenize_batch holds a document to the floor it carries where that is higher than the
    run's; a carried value that is no whole number carries nothing (the file is input)."""
    from pipelines.document import MIN_TOKENS_META, Document, with_min_tokens
    from pipelines.tokenize.encode import tokenize_batch

    text = (WEB_TEXT / "1.txt").read_text(encoding="utf-8")
    tokens = len(gpt2_tokenizer.encode_batch([text])[0])
    doc = Document("d", "parquet", text)
    for floor, run_floor, kept in [
        (tokens + 1, 0, False), (tokens, 0, True), (0, tokens + 1, False), (tokens + 1, 1, False),
    ]:
        docs, rejects = tokenize_batch([with_min_tokens(doc, floor)], gpt2_tokenizer,
                                       split_sentences=False, append_eod=False,
                                       min_tokens=run_floor)
        assert (len(docs), len(rejects)) == ((1, 0) if kept else (0, 1))
    for bad in ("-5", "1e9", "many", "²", "9" * 5000):
        carrying = Document("d", "parquet", text, meta={MIN_TOKENS_META: bad})
        docs, _ = tokenize_batch([carrying], gpt2_tokenizer, split_sentences=False,
                                 append_eod=False)
        assert len(docs) == 1
