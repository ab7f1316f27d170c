"""tools/plot: curves of several runs to one PNG; clear errors for what it cannot read."""

from __future__ import annotations

import json
import math
import os
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
    broken.write_text('{"kind": "train", "step": 1, "lr": 0.001}\n{oops\n')
    result = subprocess.run(
        [PLOT, str(broken), "-o", str(tmp_path / "x.png")], capture_output=True, text=True
    )
    assert result.returncode == 1 and "broken.jsonl:2: not a JSON line" in result.stderr


def _plot(*args):
    return subprocess.run([PLOT, *map(str, args)], capture_output=True, text=True, timeout=120)


def test_unreadable_metrics_are_one_line(tmp_path):
    """Non-UTF-8 bytes, JSON past the depth or integer bounds, fields that are not numbers, a
    FIFO or a device: exit 1 with one line naming the file (and line), never a traceback."""
    good = json.dumps({"kind": "train", "step": 1, "loss": 2.0, "lr": 1e-3}).encode() + b"\n"
    cases = {
        "latin1.jsonl": (good + b'{"kind": "train", "note": "caf\xe9"}\n', ":2: not UTF-8"),
        "deep.jsonl": (good + b"[" * 100_000 + b"]" * 100_000 + b"\n", ":2: not a JSON line"),
        "digits.jsonl": (good + b'{"step": ' + b"9" * 5000 + b"}\n", "5000 digits"),
        "strings.jsonl": (good + b'{"kind": "train", "step": "x", "lr": 1}\n', "'step' is not"),
        "list.jsonl": (good + b"[1, 2]\n", ":2: not a JSON object"),
    }
    for name, (content, fault) in cases.items():
        (tmp_path / name).write_bytes(content)
        result = _plot(tmp_path / name, "-o", tmp_path / "x.png")
        assert result.returncode == 1, (name, result.stderr)
        assert result.stderr.count("\n") == 1 and fault in result.stderr, (name, result.stderr)
        assert name in result.stderr
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    for path, kind in ((fifo, "a FIFO"), ("/dev/zero", "a character device")):
        result = _plot(path, "-o", tmp_path / "x.png")
        assert result.returncode == 1 and f"is {kind}, not a regular file" in result.stderr
    (tmp_path / "ok.jsonl").write_bytes(good)
    result = _plot(tmp_path / "ok.jsonl", "-o", tmp_path / "no-such-dir" / "x.png")
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert "--out" in result.stderr and "No such file or directory" in result.stderr
