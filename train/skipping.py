"""Skipping bad steps: a step whose loss or gradients are not finite (or, with
``--skip-outliers``, are z-score outliers) is skipped: gradients dropped, nothing updated, the
data consumed, a counter bumped. Every rank takes the same decision because it is made from
values reduced over all ranks."""

from __future__ import annotations

import collections
import math
import statistics
from dataclasses import asdict, dataclass


class OutlierDetector:
    """Running window of recent values; z-score of a new one against it (llm.c's detector).

    Only a full window gives a z-score, so the first steps of a run are never skipped. Values
    of skipped steps are not added: one spike must not inflate the spread that judges the next.
    """

    def __init__(self, window: int, values: list[float] | None = None) -> None:
        self.values: collections.deque[float] = collections.deque(values or [], maxlen=window)

    def zscore(self, value: float) -> float | None:
        if len(self.values) < (self.values.maxlen or 0):
            return None
        std = statistics.pstdev(self.values)
        if std == 0:
            return None
        return (value - statistics.fmean(self.values)) / std

    def add(self, value: float) -> None:
        self.values.append(value)


@dataclass
class Counters:
    nonfinite: int = 0  # loss or gradients inf/nan (bf16/fp32), or a non-finite fp16 loss
    overflow: int = 0  # fp16 gradients overflowed at the current loss scale
    outlier_loss: int = 0
    outlier_grad_norm: int = 0
    consecutive: int = 0  # current run of non-finite / overflow skips

    def skipped(self) -> dict[str, int]:
        return {
            "nonfinite": self.nonfinite,
            "overflow": self.overflow,
            "outlier_loss": self.outlier_loss,
            "outlier_grad_norm": self.outlier_grad_norm,
        }


class SkipGuard:
    """The skip decision of each step, its counters and the outlier windows, as saved in a
    checkpoint's trainer state."""

    def __init__(self, z_limit: float, window: int, saved: dict | None = None) -> None:
        self.z_limit = z_limit
        saved = saved or {"counters": {}, "outlier": {"loss": [], "grad_norm": []}}
        self.counters = Counters(**saved["counters"])
        self.loss_window = OutlierDetector(window, saved["outlier"]["loss"])
        self.grad_window = OutlierDetector(window, saved["outlier"]["grad_norm"])

    def decide(self, loss: float, norm: float, fp16: bool) -> str | None:
        """The reason to skip this step, or None to take it."""
        if not math.isfinite(loss):
            return "nonfinite"
        if not math.isfinite(norm):
            return "overflow" if fp16 else "nonfinite"
        if self.z_limit > 0:
            z_loss, z_grad = self.loss_window.zscore(loss), self.grad_window.zscore(norm)
            if z_loss is not None and z_loss > self.z_limit:
                return "outlier_loss"
            if z_grad is not None and z_grad > self.z_limit:
                return "outlier_grad_norm"
        return None

    def record(self, skip: str | None, loss: float, norm: float) -> None:
        counters = self.counters
        if skip is None:
            counters.consecutive = 0
            self.loss_window.add(loss)
            self.grad_window.add(norm)
            return
        setattr(counters, skip, getattr(counters, skip) + 1)
        if skip in ("nonfinite", "overflow"):
            counters.consecutive += 1

    def state_dict(self) -> dict:
        return {
            "counters": asdict(self.counters),
            "outlier": {
                "loss": list(self.loss_window.values),
                "grad_norm": list(self.grad_window.values),
            },
        }
