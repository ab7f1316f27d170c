"""The tests of tests/unit/pipelines/test_run_outcomes.py that start a process or run a Beam pipeline (that file
holds the in-process ones and says what they cover)."""

from __future__ import annotations

import json

import pytest

from pipelines.clean import CleanConfig, clean_document
from pipelines.document import Document, ReadTask
from pipelines.preprocess import main
from pipelines.sources.wikipedia import wikipedia
from tests.conftest import CORPORA, GPT2_VOCAB

WIKI = CORPORA / "wikipedia"
GREEK = WIKI / "elwiki-pages-articles-head933.xml.bz2"
SIMPLE = WIKI / "simplewiki-sample.xml.bz2"
GPT2 = str(GPT2_VOCAB)
IN_PROCESS = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]


def _run(capsys, inputs: str, out, *flags: str, dedup: bool = False,
         tokenizer: tuple[str, ...] = (f"--tokenizer={GPT2}", "--append-eod")):
    code = main(["--source=wikipedia", f"--input={inputs}", f"--output={out}", *tokenizer,
                 *([] if dedup else ["--no-dedup"]), "--progress-interval=0", *flags,
                 *IN_PROCESS])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.slow
def test_a_greek_dump_is_kept_in_greek_by_default_and_dropped_with_language_en(
        tmp_path, capsys):
    code, report, err = _run(capsys, str(GREEK), tmp_path / "own")
    assert code == 0, err
    assert "language: el (from the input's own siteinfo; --language overrides)" in err
    stats = json.loads((tmp_path / "own" / "stats.json").read_text())
    assert stats["read"] == 500 and stats["written"] >= 495
    assert stats["seen"]["language"]["el"] >= 495 and stats["notes"] == []

    code, report, err = _run(capsys, str(GREEK), tmp_path / "en", "--language=en")
    assert code == 1
    assert "language: en (--language)" in err
    assert err.strip().splitlines()[-1] == (
        "preprocess: FAILED: no document was written: of 500 records read, 500 dropped as "
        "'language' (--language, e.g. --language any)"
    )


@pytest.mark.slow
def test_a_language_filter_that_drops_most_documents_says_so(tmp_path, capsys):
    inputs = tmp_path / "dumps"
    inputs.mkdir()
    for dump in (GREEK, SIMPLE):
        (inputs / dump.name).symlink_to(dump)
    code, report, err = _run(capsys, f"{inputs}/*", tmp_path / "en", "--language=en")
    assert code == 0, err
    stats = json.loads((tmp_path / "en" / "stats.json").read_text())
    seen = stats["seen"]["language"]
    assert seen["el"] >= 495 and seen["en"] == stats["written"] > 0
    dropped = stats["dropped"]["language"]
    top = ", ".join(f"{language} {n:,}" for language, n in list(seen.items())[:3])
    note = (f"'language' dropped {dropped:,} of {stats['read']:,} documents read "
            f"({dropped / stats['read']:.1%}); it saw {top}; changed by --language, "
            "e.g. --language any")
    assert stats["notes"] == [note]
    assert f"note: {note}" in report


@pytest.mark.slow
def test_the_unknown_token_share_of_a_bert_set_is_reported(tmp_path, capsys):
    # Cased text through the uncased BERT vocabulary with --lowercase no: a quarter of the
    # tokens of the Simple English sample are [UNK], which no line said before.
    from dataset_format.tokenizer import load_tokenizer
    from pipelines.tokenize.encode import tokenize_batch

    bert = str(CORPORA / "vocab" / "bert-base-uncased" / "vocab.txt")
    flags = (f"--tokenizer={bert}", "--split-sentences")
    code, report, err = _run(capsys, str(SIMPLE), tmp_path / "cased", "--lowercase=no",
                             tokenizer=flags)
    assert code == 0, err
    tokenizer = load_tokenizer(bert, lowercase=False)
    articles = [r for r in wikipedia.read(ReadTask("wikipedia", str(SIMPLE)))]
    kept = [clean_document(doc, CleanConfig()) for doc in articles]
    tokenized, _ = tokenize_batch([d for d in kept if isinstance(d, Document)], tokenizer,
                                  split_sentences=True, append_eod=False)
    ids = [int(i) for doc in tokenized for sequence in doc.sequences for i in sequence]
    unknown = ids.count(tokenizer.special_ids["unk"])
    stats = json.loads((tmp_path / "cased" / "stats.json").read_text())
    assert stats["tokens_written"] == len(ids) and stats["unknown_tokens"] == unknown
    assert stats["unknown_token_share"] == unknown / len(ids) > 0.2
    (row,) = [line.split() for line in report.splitlines() if line.startswith("  unknown")]
    assert row[:3] == ["unknown", f"{unknown:,}", f"{unknown / len(ids):.1%}"]
    code, report, err = _run(capsys, str(SIMPLE), tmp_path / "uncased", tokenizer=flags)
    assert code == 0, err
    stats = json.loads((tmp_path / "uncased" / "stats.json").read_text())
    assert stats["unknown_tokens"] == 0 and "unknown token" not in report


@pytest.mark.slow
def test_each_stage_reports_the_cpu_time_of_its_own_work(tmp_path, capsys):
    # In one process (the in-memory runner) the stages' times are parts of the process's CPU
    # time: each is there, and together they are no more than the run took.
    import time

    started = time.process_time()
    code, report, err = _run(capsys, str(SIMPLE), tmp_path / "out", dedup=True)
    spent = time.process_time() - started
    assert code == 0, err
    cpu = json.loads((tmp_path / "out" / "stats.json").read_text())["cpu_s"]
    assert set(cpu) == {"read", "clean", "dedup", "tokenize", "write"}
    assert all(seconds > 0 for seconds in cpu.values())
    assert sum(cpu.values()) < spent
    (row,) = [line for line in report.splitlines() if line.startswith("cpu ")]
    assert f"read {cpu['read']:,.1f} s" in row and f"write {cpu['write']:,.1f} s" in row


def test_a_run_that_writes_nothing_names_its_failed_records_among_the_causes(tmp_path, capsys):
    # Four French paragraphs of Candide (not English) and two records without text, under a
    # failure rate that lets the failures pass: the failures are among the causes named.
    text = (CORPORA / "books" / "Candide-fr.txt").read_text(encoding="utf-8-sig")
    french = [" ".join(p.split()) for p in text.split("\n\n") if len(p) > 600][5:9]
    lines = [json.dumps({"text": p}) for p in french] + ["{}", "{}"]
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    code = main(["--source=jsonl", f"--input={tmp_path / 'in.jsonl'}", f"--output={tmp_path}/o",
                 f"--tokenizer={GPT2}", "--no-dedup", "--max-failure-rate=1",
                 "--progress-interval=0", *IN_PROCESS])
    err = capsys.readouterr().err
    assert code == 1
    assert err.strip().splitlines()[-1] == (
        "preprocess: FAILED: no document was written: of 6 records read, 4 dropped as "
        "'language' (--language, e.g. --language any); 2 failed as 'missing_text' "
        "(unreadable; the logs name each record)"
    )
