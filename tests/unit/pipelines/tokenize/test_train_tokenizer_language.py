"""train_tokenizer keeps the documents of a Wikipedia dump in the dump's own language, as
preprocess does (CleanConfig.for_run: the <siteinfo> language where --language is not given)."""

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


def test_the_run_language_is_decided_as_preprocess_decides_it():
    from pipelines.clean import CleanConfig
    from pipelines.options import PreprocessConfig

    for source, language in [("wikipedia", None), ("books", None), ("wikipedia", "fr")]:
        config = PreprocessConfig(source, "x", "y", "t", language=language, dedup=False)
        assert config.clean_config() == CleanConfig.for_run(source, language)
    assert CleanConfig.for_run("wikipedia", None).language_from_source
    assert not CleanConfig.for_run("books", None).language_from_source
