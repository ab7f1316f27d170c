"""bench/gpu.sh --smoke: the GPU benchmark's whole path (ours and HF's models, optimizer steps,
the table written row by row) on CPU with tiny models."""

from __future__ import annotations

import importlib.util
import os
import subprocess

import pytest

from tests.conftest import REPO


def cells_of(table: str, case: str, side: str) -> list[str]:
    row = next(line for line in table.splitlines() if line.startswith(f"| {case} | {side} |"))
    return [c.strip() for c in row.strip("|").split("|")]


@pytest.mark.slow
def test_gpu_benchmark_smoke_writes_its_table(tmp_path):
    environment = dict(os.environ, OUT=str(tmp_path), OMP_NUM_THREADS="1")
    result = subprocess.run(
        [str(REPO / "bench" / "gpu.sh"), "--smoke"],
        cwd=REPO, env=environment, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    table = (tmp_path / "gpu.md").read_text()
    for case, shape in (("gpt-tiny seq 64 fp32", "2 x 64"), ("bert-tiny seq 64 fp32", "4 x 64")):
        ours = cells_of(table, case, "ours")
        assert ours[2] == "off" and ours[3] == shape
        assert float(ours[4].replace(",", "")) > 0  # tokens/s
        assert float(ours[5].replace(",", "")) > 0  # seq/s
        assert ours[7] == "n/a"  # no MFU on CPU: no peak to compare with
        assert ours[12] == "0"  # no recompiles (nothing compiled on the smoke path)
        hf = cells_of(table, case, "hf")
        if importlib.util.find_spec("transformers") is None:
            assert hf[2].startswith("skipped")
        else:
            assert float(hf[4].replace(",", "")) > 0
            assert ours[8].endswith("x")  # ours over HF's tokens/s
