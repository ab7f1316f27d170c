"""The tests of tests/unit/pipelines/dedup/test_dedup_sizing.py that start a process or run a Beam pipeline (that file
holds the in-process ones and says what they cover)."""

from __future__ import annotations

import json
import logging

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.dedup.components import rounds_for
from tests.helpers.dedup_sizing import book_paragraphs


@pytest.mark.slow
def test_the_dedup_tool_sizes_its_rounds_from_the_parquet_rows(tmp_path, caplog):
    from pipelines.dedup.__main__ import main

    texts = book_paragraphs(6)
    table = pa.table({"id": [f"p{i}" for i in range(6)], "text": texts})
    pq.write_table(table, tmp_path / "docs.parquet")
    out = tmp_path / "out"
    with caplog.at_level(logging.INFO, logger="pipelines.dedup.transforms"):
        assert main(["--input", str(tmp_path / "*.parquet"), "--output", str(out)]) == 0
    logged = [r.getMessage() for r in caplog.records if r.name == "pipelines.dedup.transforms"]
    assert logged == ["dedup: 5 connected-components rounds"]
    stats = json.loads((out / "stats.json").read_text())
    assert stats["config"]["cc_rounds"] == rounds_for(6) == 5
    assert stats["kept"] == 6
