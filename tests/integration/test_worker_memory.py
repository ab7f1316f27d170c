"""The tests of tests/unit/pipelines/runner/test_worker_memory.py that start a process or run a Beam pipeline (that file
holds the in-process ones and says what they cover)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pipelines.sources.sizes import WORKER_BYTES_PER_DOCUMENT_BYTE
from tests.conftest import REPO


@pytest.mark.slow
def test_peak_memory_per_document_byte_is_within_the_stated_factor(tmp_path):
    size = 8_000_000
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "bench_worker_memory.py"), "--child", str(size),
         "--workdir", str(tmp_path)],
        capture_output=True, text=True, timeout=600, cwd=REPO,
        env={**os.environ, "RAYON_NUM_THREADS": "1"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    measured = json.loads(result.stdout.strip().splitlines()[-1])
    assert measured["document_bytes"] == size and measured["tokens"] > size // 5
    grown = measured["peak_rss"] - measured["base_rss"]
    assert grown <= WORKER_BYTES_PER_DOCUMENT_BYTE * size + (128 << 20), measured
