"""A JSONL or Parquet input whose text is under another field than the options name fails
before the run, in one line naming `--source-option json_keys=` / `text_column=` and the
fields the first record has: not a warning per record and a run that reads nothing."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from tests.conftest import CORPORA, GPT2_VOCAB

WEB_TEXT = CORPORA / "web" / "text" / "webtext_train_10"

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


def _preprocess(capsys, tmp_path, source, data, *options):
    from pipelines.preprocess import main

    code = main([f"--source={source}", f"--input={data}", f"--output={tmp_path / 'out'}",
                 f"--tokenizer={GPT2_VOCAB}", "--no-dedup", "--progress-interval=0",
                 "--direct_running_mode=in_memory", "--direct_num_workers=1",
                 *(f"--source-option={o}" for o in options)])
    return code, capsys.readouterr().err.strip().splitlines()


def test_jsonl_without_the_text_field_names_json_keys_and_the_records_fields(tmp_path, capsys):
    code, err = _preprocess(capsys, tmp_path, "jsonl", URK)
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"preprocess: error: {URK}: the first record has no field 'text'")
    assert "--source-option json_keys=FIELD" in err[0]
    assert err[0].endswith("the record has 'u', 'r', 'k'")  # the longest string first
    assert not (tmp_path / "out").exists()


def test_parquet_without_the_text_column_names_text_column_and_the_columns(tmp_path, capsys):
    from pipelines.sources import check_input, get_source

    texts = [p.read_text(encoding="utf-8") for p in sorted(WEB_TEXT.glob("*.txt"))]
    path = tmp_path / "body.parquet"
    pq.write_table(pa.table({"id": list(range(len(texts))), "body": texts}), path)
    code, err = _preprocess(capsys, tmp_path, "parquet", path)
    assert code == 2 and len(err) == 1, err
    assert err[0] == (
        f"preprocess: error: {path}: no column 'text'; columns are ['id', 'body']; "
        "--source-option text_column=COLUMN names the text's column"
    )
    check_input(get_source("parquet"), [str(path)], {"text_column": "body"})
