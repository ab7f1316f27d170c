"""--source-option keys are checked against what the source declares it reads
(SourceTraits.options): a misspelled key is refused before anything is read, in one line naming
it, the closest key the source reads and all of them."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import CORPORA, GPT2_VOCAB

WEB_TEXT = CORPORA / "web" / "text" / "webtext_train_10"


def test_each_source_reads_the_options_it_declares():
    """A key a source declares passes; the same key given to a source that does not read it
    is refused (json_keys means nothing to webtext)."""
    from pipelines.sources import check_options, get_source

    check_options(get_source("jsonl"), {"json_keys": "u", "max_document_bytes": "1KiB"})
    check_options(get_source("wikipedia"), {"wiki_task_mb": "8", "wiki_index": "x.txt"})
    with pytest.raises(ValueError, match="--source webtext reads no such option; it reads:"):
        check_options(get_source("webtext"), {"json_keys": "text"})
    with pytest.raises(ValueError, match="'task_bytes'.*did you mean 'wiki_task_mb'|"
                                         "'task_bytes'.*it reads: max_document_bytes, "
                                         "wiki_index, wiki_task_mb"):
        check_options(get_source("wikipedia"), {"task_bytes": "1MiB"})


def _parquet_with_body(path) -> str:
    """The shared WebText documents as Parquet whose text column is `body`."""
    texts = [p.read_text(encoding="utf-8") for p in sorted(WEB_TEXT.glob("*.txt"))]
    pq.write_table(pa.table({"body": texts}), path)
    return str(path)


@pytest.mark.parametrize(
    ("source", "option", "closest", "listed"),
    [
        ("webtext", "extractr=resiliparse", "extractor", "extractor, max_document_bytes, task_bytes"),
        ("webtext", "max_document_byte=1KiB", "max_document_bytes", "extractor"),
        ("parquet", "text_colum=body", "text_column", "batch_rows, max_document_bytes, task_bytes, "
         "text_column"),
    ],
)
def test_a_misspelled_source_option_is_refused_before_the_run(
    tmp_path, capsys, monkeypatch, source, option, closest, listed
):
    from pipelines import graph
    from pipelines.preprocess import main

    data = WEB_TEXT if source == "webtext" else _parquet_with_body(tmp_path / "body.parquet")
    listed_files = []
    monkeypatch.setattr(graph, "match_patterns", lambda p: listed_files.append(p) or [])
    output = tmp_path / "out"
    argv = [f"--source={source}", f"--input={data}", f"--output={output}",
            f"--tokenizer={GPT2_VOCAB}", f"--source-option={option}", "--progress-interval=0"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    key = option.split("=")[0]
    assert len(err) == 1, err
    assert f"--source-option {key!r}" in err[0]
    assert f"did you mean {closest!r}?" in err[0]
    assert listed in err[0]
    assert listed_files == [] and not output.exists()  # refused before the input was listed
