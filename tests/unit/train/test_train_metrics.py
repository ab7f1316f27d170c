"""train.metrics: peak lookup, throughput/MFU arithmetic, the JSONL log across a resume."""

from __future__ import annotations

import json
import math

import pytest

from train.metrics import (
    MetricsLog,
    StepTimes,
    format_count,
    format_duration,
    format_train_line,
    lookup_peak_tflops,
    read_metrics,
    throughput,
)


@pytest.mark.parametrize(
    "name, precision, peak",
    [
        ("NVIDIA A100-SXM4-80GB", "bf16", 312.0),
        ("NVIDIA A100-PCIE-40GB", "fp32", 19.5),
        ("NVIDIA H100 80GB HBM3", "bf16", 989.0),
        ("NVIDIA H100 PCIe", "bf16", 756.0),
        ("NVIDIA H200", "bf16", 989.0),
        ("Tesla V100-SXM2-16GB", "fp16", 125.0),
        ("Tesla V100-SXM2-16GB", "bf16", None),  # no bf16 on Volta
        ("NVIDIA A10", "bf16", 125.0),
        ("NVIDIA L4", "bf16", 121.0),
        ("Some Future GPU", "bf16", None),
    ],
)
def test_peak_lookup(name, precision, peak):
    assert lookup_peak_tflops(name, precision) == peak


def test_throughput_and_mfu():
    speed = throughput(
        tokens=8192, seconds=0.5, flops_per_token=1e9, world_size=2, peak_tflops=10.0
    )
    assert speed["tokens_per_s"] == 16384
    assert speed["tflops"] == pytest.approx(16384 * 1e9 / 2 / 1e12)
    assert speed["mfu"] == pytest.approx(speed["tflops"] / 10.0)
    assert throughput(1, 1.0, 1.0, 1, None)["mfu"] is None


def test_log_keeps_steps_up_to_the_resume_point(tmp_path):
    path = str(tmp_path / "run" / "metrics.jsonl")
    log = MetricsLog(path)
    for step in range(1, 6):
        log.write({"kind": "train", "step": step, "loss": 1.0 / step})
    log.write({"kind": "eval", "split": "valid", "step": 5, "loss": 0.3})
    log.close()
    with open(path, "a") as f:
        f.write('{"kind": "train", "st')  # a line cut by a SIGKILL
    resumed = MetricsLog(path, resume_step=3)
    resumed.write({"kind": "train", "step": 4, "loss": math.nan})
    resumed.close()
    records = read_metrics(path)
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    assert records[-1]["loss"] is None  # nan is written as null: every line stays JSON
    fresh = MetricsLog(path)  # a fresh run starts the file over
    fresh.close()
    assert read_metrics(path) == []


def test_disabled_log_writes_nothing(tmp_path):
    log = MetricsLog(None)
    log.write({"step": 1})
    log.close()
    assert list(tmp_path.iterdir()) == []


def test_train_line():
    record = {
        "step": 7,
        "loss": 2.5,
        "lr": 3e-4,
        "grad_norm": 0.75,
        "tokens_per_s": 12345.6,
        "tflops": 1.5,
        "mfu": 0.25,
        "loss_scale": 1024.0,
        "skipped": {"nonfinite": 0, "overflow": 2},
        "step_ms": 312.4,
        "eta_s": 3725.6,
    }
    line = format_train_line(record, 60)
    assert line.startswith("step 7/60 | loss 2.5000 |") and "| 12.3k tok/s |" in line
    assert "| 312 ms/step |" in line and line.endswith("| ETA 1:02:06")
    assert "MFU 25.0%" in line and "scale 1024" in line and "overflow=2" in line
    assert "nonfinite" not in line
    json.dumps(record)


def test_step_times_eta_is_remaining_steps_at_the_recent_mean():
    times = StepTimes(window=3)
    assert format_duration(times.eta(5)) == "?"  # nothing timed yet
    for seconds in (10.0, 1.0, 2.0, 3.0):  # the slow first step falls out of the window
        times.add(seconds)
    assert times.eta(4) == 4 * 2.0 and times.eta(0) == 0


def test_counts_and_durations_read_as_users_expect():
    assert [format_count(v) for v in (512.4, 9412.0, 1_250_000.0)] == ["512", "9.41k", "1.25M"]
    assert [format_duration(s) for s in (0.4, 59.6, 3600 * 26 + 61)] == [
        "0:00:00", "0:01:00", "26:01:01"
    ]  # fmt: skip
