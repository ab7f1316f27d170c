"""The tests of tests/unit/pipelines/tokenize/test_train_tokenizer_language.py that start a process or run a Beam pipeline (that file
holds the in-process ones and says what they cover)."""

from __future__ import annotations

import json

from tests.conftest import CORPORA

GREEK = CORPORA / "wikipedia" / "elwiki-pages-articles-head933.xml.bz2"


def _train(tmp_path, capsys, *extra: str) -> tuple[int, str, str]:
    from pipelines.tokenize.train_tokenizer import main

    code = main(["--kind=byte-level-bpe", "--source=wikipedia", f"--input={GREEK}",
                 "--vocab-size=400", f"--output={tmp_path / 'tok.json'}", "--sample-mb=0.2",
                 *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_greek_dump_trains_on_its_greek_articles(tmp_path, capsys):
    code, out, err = _train(tmp_path, capsys)
    assert code == 0, err
    summary = json.loads(out)
    assert summary["documents"] > 0 and summary["rejected"] == 0
    # --language still overrides: English keeps none of the Greek articles
    code, _, err = _train(tmp_path, capsys, "--language=en")
    assert code == 2 and "survived reading and cleaning" in err
