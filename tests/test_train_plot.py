"""tools/plot: curves of several runs to one PNG; clear errors for what it cannot read."""

from __future__ import annotations

import json
import math
import subprocess

from tests.conftest import REPO

PLOT = str(REPO / "tools" / "plot")


def write_run(directory, steps: int, start_loss: float) -> None:
    directory.mkdir(parents=True)
    with open(directory / "metrics.jsonl", "w") as f:
        for step in range(1, steps + 1):
            record = {
                "kind": "train", "step": step, "loss": start_loss * math.exp(-step / 30),
                "lr": 1e-3 * min(1.0, step / 5), "grad_norm": 1.0, "tokens_per_s": 1000.0 + step,
            }  # fmt: skip
            if step == 7:
                record.update(loss=None, skip="overflow")  # a skipped step: no finite loss
            f.write(json.dumps(record) + "\n")
        f.write(json.dumps({"kind": "eval", "split": "valid", "step": steps, "loss": 2.0}) + "\n")


def test_plots_two_runs(tmp_path):
    write_run(tmp_path / "a", 40, 10.0)
    write_run(tmp_path / "b", 25, 9.0)
    png = tmp_path / "curves.png"
    result = subprocess.run(
        [PLOT, str(tmp_path / "a"), str(tmp_path / "b" / "metrics.jsonl"), "-o", str(png),
         "--smooth", "3"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_missing_and_broken_input(tmp_path):
    result = subprocess.run(
        [PLOT, str(tmp_path / "nope"), "-o", str(tmp_path / "x.png")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1 and "no such file" in result.stderr
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"kind": "train", "step": 1}\n{oops\n')
    result = subprocess.run(
        [PLOT, str(broken), "-o", str(tmp_path / "x.png")], capture_output=True, text=True
    )
    assert result.returncode == 1 and "broken.jsonl:2: not a JSON line" in result.stderr
