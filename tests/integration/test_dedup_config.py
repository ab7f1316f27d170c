"""The tests of tests/unit/pipelines/dedup/test_dedup_config.py that start a process or run a Beam pipeline (that file
holds the in-process ones and says what they cover)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO


def test_cli_refuses_a_bad_setting_with_a_message(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "pipelines.dedup", "--input", "x", "--output", str(tmp_path),
         "--dedup-threshold", "1.5"],
        capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 2
    assert "error: --dedup-threshold must be in (0, 1], got 1.5" in result.stderr
