"""The tests of tests/unit/pipelines/sources/web/test_sources_urls.py that start a process or run a Beam pipeline (that file
holds the in-process ones and says what they cover)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.helpers.sources_urls import TXT


@pytest.mark.slow
def test_module_runs_as_a_program(tmp_path: Path) -> None:
    output = tmp_path / "kept.txt"
    result = subprocess.run(
        [sys.executable, "-m", "pipelines.sources.web.urls", "--input", str(TXT), "--output",
         str(output)], cwd=REPO, capture_output=True, text=True, timeout=120, check=True)
    assert "kept: 2090" in result.stdout
    assert len(output.read_text(encoding="utf-8").splitlines()) == 2090
