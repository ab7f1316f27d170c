"""bench/gpu.sh --smoke: the GPU benchmark's whole path (synthetic shards, trainer, table) on CPU."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.conftest import REPO


@pytest.mark.slow
def test_gpu_benchmark_smoke_writes_its_table(tmp_path):
    environment = dict(os.environ, OUT=str(tmp_path), OMP_NUM_THREADS="1")
    result = subprocess.run(
        [str(REPO / "bench" / "gpu.sh"), "--smoke"],
        cwd=REPO, env=environment, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    table = (tmp_path / "gpu.md").read_text()
    row = next(line for line in table.splitlines() if line.startswith("| gpt-tiny"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == "2 x 64"
    assert float(cells[3].replace(",", "")) > 0  # tokens/s
    assert cells[5] == "n/a"  # no MFU on CPU: no peak to compare with
    # the layout cases ran too (torchrun, 1 and 2 gloo processes on CPU)
    for case in ("gpt-tiny fsdp+ac", "gpt-tiny tp+sp"):
        row = next(line for line in table.splitlines() if line.startswith(f"| {case} |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert float(cells[3].replace(",", "")) > 0, row
