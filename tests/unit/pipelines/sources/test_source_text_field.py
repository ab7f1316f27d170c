"""A JSONL or Parquet input whose text is under another field than the options name fails
before the run, in one line naming `--source-option json_keys=` / `text_column=` and the
fields the first record has: not a warning per record and a run that reads nothing."""

from __future__ import annotations

from tests.conftest import CORPORA

# Real JSON lines whose records are {"u": url, "r": subreddit, "k": karma}: no "text".
URK = CORPORA / "web" / "urls" / "RS_v2_2005-12.urk.json-00.gz"


def test_jsonl_check_passes_the_field_the_option_names():
    from pipelines.sources import check_input, get_source

    check_input(get_source("jsonl"), [str(URK)], {"json_keys": "u"})
    check_input(get_source("jsonl"), [str(URK)], {"json_keys": "text,r"})  # any of the keys


def test_a_later_record_without_the_field_names_json_keys(tmp_path):
    """The first record has the text, a later one has not: counted as missing_text, whose
    detail says which option names the field."""
    from pipelines.document import ReadTask
    from pipelines.sources import get_source

    path = tmp_path / "mixed.jsonl"
    path.write_text('{"text": "a document"}\n{"body": "another"}\n', encoding="utf-8")
    out = list(get_source("jsonl").read(ReadTask(source="jsonl", path=str(path))))
    assert out[1].reason == "missing_text"
    assert "--source-option json_keys=" in out[1].detail
