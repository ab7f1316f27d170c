"""The tests of tests/unit/pipelines/sources/web/test_sources_urls.py that start a process or run a Beam pipeline (that file
holds the in-process ones and says what they cover)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.sources.web.urls import (
    filter_urls,
    main,
    read_url_lines,
)
from tests.conftest import REPO
from tests.helpers.sources_urls import GZ, TXT


def test_cli_writes_the_filtered_list(tmp_path: Path, capsys) -> None:
    output = tmp_path / "kept.txt"
    assert main(["--input", str(GZ), "--output", str(output)]) == 0
    printed = capsys.readouterr().out
    assert "kept: 2090" in printed
    assert "blacklisted_domain: 53" in printed and "blacklisted_extension: 36" in printed
    kept, _ = filter_urls(read_url_lines(str(TXT)))
    assert output.read_text(encoding="utf-8").splitlines() == kept


def test_cli_refuses_a_list_cut_short_in_one_line(tmp_path: Path, capsys) -> None:
    cut = tmp_path / "cut.json.gz"
    data = GZ.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    output = tmp_path / "kept.txt"
    assert main(["--input", str(cut), "--output", str(output)]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"urls: error: {cut}: truncated_input: gzip data ends")
    assert not output.exists() and sorted(tmp_path.iterdir()) == [cut]


@pytest.mark.slow
def test_module_runs_as_a_program(tmp_path: Path) -> None:
    output = tmp_path / "kept.txt"
    result = subprocess.run(
        [sys.executable, "-m", "pipelines.sources.web.urls", "--input", str(TXT), "--output",
         str(output)], cwd=REPO, capture_output=True, text=True, timeout=120, check=True)
    assert "kept: 2090" in result.stdout
    assert len(output.read_text(encoding="utf-8").splitlines()) == 2090
