"""Training metrics: `metrics.jsonl` (one JSON object per line), a console progress bar, and
throughput as tokens/s, achieved TFLOP/s per device and MFU (model FLOPs utilisation, PaLM
appendix B: model FLOPs per token x tokens/s over the devices' peak).
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections import deque

from common.storage import base_name, write_lines_atomic

# Dense (no sparsity) peak TFLOP/s per device from the vendors' datasheets. "fp32" is the
# plain (non-tensor-core) fp32 rate, what fp32 runs use: torch does not enable TF32 matmuls
# by default. Patterns are matched in order against torch.cuda.get_device_name(), so the
# specific H100 variants come before the generic SXM entry.
PEAK_TFLOPS: list[tuple[str, str, dict[str, float]]] = [
    (r"H100.*PCIe", "H100 PCIe", {"bf16": 756.0, "fp16": 756.0, "fp32": 51.0}),
    (r"H100.*NVL", "H100 NVL", {"bf16": 835.0, "fp16": 835.0, "fp32": 60.0}),
    (r"H100|GH200", "H100 SXM", {"bf16": 989.0, "fp16": 989.0, "fp32": 67.0}),
    (r"H200", "H200", {"bf16": 989.0, "fp16": 989.0, "fp32": 67.0}),
    (r"A100", "A100", {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5}),
    (r"L40S", "L40S", {"bf16": 362.0, "fp16": 362.0, "fp32": 91.6}),
    (r"\bL4\b", "L4", {"bf16": 121.0, "fp16": 121.0, "fp32": 30.3}),
    (r"\bA10\b", "A10", {"bf16": 125.0, "fp16": 125.0, "fp32": 31.2}),
    (r"V100", "V100", {"fp16": 125.0, "fp32": 15.7}),
    (r"\bT4\b", "T4", {"fp16": 65.0, "fp32": 8.1}),
]


def lookup_peak_tflops(device_name: str, precision: str) -> float | None:
    """Peak TFLOP/s of a known GPU in ``precision``; None if unknown (MFU is then not shown)."""
    for pattern, _, peaks in PEAK_TFLOPS:
        if re.search(pattern, device_name):
            return peaks.get(precision)
    return None


def throughput(
    tokens: int,
    seconds: float,
    flops_per_token: float,
    world_size: int,
    peak_tflops: float | None,
) -> dict[str, float | None]:
    """tokens/s over all ranks, achieved TFLOP/s per device, and MFU against ``peak_tflops``."""
    tokens_per_s = tokens / seconds if seconds > 0 else math.nan
    tflops = flops_per_token * tokens_per_s / world_size / 1e12
    mfu = tflops / peak_tflops if peak_tflops else None
    return {"tokens_per_s": tokens_per_s, "tflops": tflops, "mfu": mfu}


def _json_value(value):
    # JSON has no inf/nan: write them as null so every line stays parseable by any reader.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_value(v) for k, v in value.items()}
    return value


class MetricsLog:
    """Appends records to ``path``. A resumed run first drops the records after the step it
    resumes from (the interrupted run may have logged steps past its last checkpoint), so the
    file ends up as if the run had never been interrupted."""

    def __init__(self, path: str | None, resume_step: int | None = None) -> None:
        self.path = path
        if path is None:
            return
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        kept: list[str] = []
        if resume_step is not None and os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                for line in f:
                    try:
                        record = json.loads(line)
                    except json.JSONDecodeError:
                        break  # a line cut by the interruption: nothing after it is kept
                    if record.get("step", 0) <= resume_step:
                        kept.append(line if line.endswith("\n") else line + "\n")
        write_lines_atomic(path, kept, sync=False)
        _remove_stray_temporaries(path)
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - held for the run

    def write(self, record: dict) -> None:
        if self.path is None:
            return
        self._file.write(json.dumps(_json_value(record)) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self.path is not None:
            self._file.close()


def _remove_stray_temporaries(path: str) -> None:
    """Delete what a run killed while rewriting ``path`` left under a temporary name of it
    (the run folder is claimed by now: no other run writes it)."""
    folder, name = os.path.split(os.path.abspath(path))
    for entry in os.listdir(folder):
        if entry != name and base_name(entry) == name:
            os.remove(os.path.join(folder, entry))


def read_metrics(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


class StepTimes:
    """The wall time of the last ``window`` steps, for the ETA: a mean over recent steps
    follows a run whose speed changes (the first step's start-up, a slower data shard)."""

    def __init__(self, window: int = 10) -> None:
        self.recent: deque[float] = deque(maxlen=window)

    def add(self, seconds: float) -> None:
        self.recent.append(seconds)

    def eta(self, remaining_steps: int) -> float:
        """Seconds left for ``remaining_steps`` at the recent mean step time."""
        return remaining_steps * sum(self.recent) / len(self.recent) if self.recent else math.nan


def format_duration(seconds: float) -> str:
    """H:MM:SS, as nanoGPT and Megatron users read an ETA; "?" before any step is timed."""
    if not math.isfinite(seconds):
        return "?"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def format_count(value: float) -> str:
    """A rate in three significant figures at most: 512, 9.4k, 1.25M."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.0f}"


def format_train_line(record: dict, total_steps: int) -> str:
    parts = [
        f"step {record['step']}/{total_steps}",
        f"loss {record['loss']:.4f}",
        f"lr {record['lr']:.3e}",
        f"grad_norm {record['grad_norm']:.3f}",
        f"{record['step_ms']:.0f} ms/step",
        f"{format_count(record['tokens_per_s'])} tok/s",
        f"{record['tflops']:.2f} TFLOP/s",
    ]
    if record.get("mfu") is not None:
        parts.append(f"MFU {100 * record['mfu']:.1f}%")
    if record.get("loss_scale") is not None:
        parts.append(f"scale {record['loss_scale']:g}")
    skipped = record.get("skipped", {})
    if any(skipped.values()):
        parts.append("skipped " + " ".join(f"{k}={v}" for k, v in skipped.items() if v))
    parts.append(f"ETA {format_duration(record['eta_s'])}")
    return " | ".join(parts)


class Console:
    """Progress bar on rank 0 (a tqdm bar on a terminal), plus log lines every few steps."""

    def __init__(self, enabled: bool, total_steps: int, start_step: int, bar: bool) -> None:
        self.enabled = enabled
        self.bar = None
        if enabled and bar and sys.stderr.isatty():
            from tqdm import tqdm  # only for a terminal: batch jobs and benchmarks need no tqdm

            self.bar = tqdm(total=total_steps, initial=start_step, unit="step", dynamic_ncols=True)

    def step(self, record: dict) -> None:
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix_str(
                f"loss {record['loss']:.4f} {record['tokens_per_s']:,.0f} tok/s", refresh=False
            )

    def print(self, line: str) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.write(line)
        else:
            print(line, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
