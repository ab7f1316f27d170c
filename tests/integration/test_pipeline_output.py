"""The tests of tests/unit/pipelines/write/test_pipeline_output.py that start a process or run a Beam pipeline (that file
holds the in-process ones and says what they cover)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pipelines.write import (
    OutputError,
    claim_output,
)
from tests.conftest import REPO


def test_the_lock_is_held_across_processes_and_dropped_when_the_holder_dies(tmp_path):
    out = tmp_path / "set"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from pipelines.write import claim_output; "
         "c = claim_output(sys.argv[1], run_id='other'); print('held', flush=True); time.sleep(60)",
         str(out)],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(OutputError, match="another run"):
            claim_output(str(out))
    finally:
        holder.kill()
        holder.wait()
    claim_output(str(out)).release()  # the kernel dropped the dead process's lock


def test_importing_the_launcher_prints_nothing():
    """Beam's import-time warning ("apitools not found") went to every run's terminal."""
    result = subprocess.run(
        [sys.executable, "-c", "import pipelines.preprocess"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0 and result.stderr == ""
