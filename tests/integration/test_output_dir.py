"""The tests of tests/unit/common/test_output_dir.py that start a process or run a Beam pipeline (that file
holds the in-process ones and says what they cover)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from common.output_dir import (
    OutputError,
    claim_output_folder,
)
from tests.conftest import REPO

REPO = str(REPO)


def test_the_lock_is_held_across_processes_and_dropped_when_the_holder_dies(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from common.output_dir import claim_output_folder; "
         "c = claim_output_folder(sys.argv[1], 'pretrain'); print('held', flush=True); "
         "time.sleep(60)", str(tmp_path)],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(OutputError, match="being written by another run"):
            claim_output_folder(tmp_path, tool="pretrain")
    finally:
        holder.kill()
        holder.wait()
    claim_output_folder(tmp_path, tool="pretrain").release()
