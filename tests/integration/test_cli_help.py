"""The tests of tests/unit/test_cli_help.py that start a process or run a Beam pipeline (that file
holds the in-process ones and says what they cover)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO


def test_convert_help_lists_all_its_commands():
    out = subprocess.run([sys.executable, str(REPO / "tools" / "convert"), "--help"],
                         capture_output=True, text=True, check=True).stdout
    for command in ("import-nanogpt", "import-llmc", "export-nanogpt", "export-llmc",
                    "checkpoint-to-torch", "checkpoint-to-hf"):
        assert f"\n    {command}" in out, command
