"""Faults injected into training runs by tests, through train.loop.TrainHooks.

In-process tests pass ``FaultHooks`` to ``train.loop.main``; torchrun tests launch
``tests/train_with_faults.py``, which builds them from its own flags and runs the trainer.

* ``GradFault`` ("STEP[-LAST]:ACTION[@RANK]"): before the update of steps STEP..LAST, ACTION
  "inf" fills one gradient with inf (an injected fp16 overflow), "xF" multiplies all gradients
  by F (an outlier); only on rank RANK if given, else on every rank.
* ``kill_at_step`` N with ``kill_marker`` PATH: rank ``kill_rank`` SIGKILLs itself after step
  N, once: it creates PATH first and never fires while PATH exists (so the job torchrun
  restarts runs through).
* ``signal_at_step`` N with ``signal_name`` (SIGINT, SIGTERM): after step N the process
  sends itself that signal, on rank ``signal_rank`` only if given (the others must stop with
  it), else on every rank.
"""

from __future__ import annotations

import math
import os
import signal
from dataclasses import dataclass

import torch

from train.loop import TrainHooks
from train.optim import scale_grads_


@dataclass(frozen=True)
class GradFault:
    first: int
    last: int
    factor: float  # inf: fill with inf
    rank: int | None

    def applies(self, step: int, rank: int) -> bool:
        return self.first <= step <= self.last and self.rank in (None, rank)

    def apply(self, params: list[torch.Tensor]) -> None:
        if self.factor == math.inf:
            params[0].grad.fill_(math.inf)
        else:
            scale_grads_(params, self.factor)


def parse_grad_fault(spec: str) -> GradFault:
    steps, action = spec.split(":")
    action, _, rank = action.partition("@")
    first, _, last = steps.partition("-")
    factor = math.inf if action == "inf" else float(action.removeprefix("x"))
    return GradFault(int(first), int(last or first), factor, int(rank) if rank else None)


class FaultHooks(TrainHooks):
    def __init__(
        self,
        grad_fault: str | None = None,
        kill_at_step: int | None = None,
        kill_marker: str | None = None,
        kill_rank: int = 1,
        signal_at_step: int | None = None,
        signal_name: str = "SIGINT",
        signal_rank: int | None = None,
    ) -> None:
        self.grad_fault = parse_grad_fault(grad_fault) if grad_fault else None
        self.kill_at_step, self.kill_marker, self.kill_rank = kill_at_step, kill_marker, kill_rank
        self.signal_at_step, self.signal_rank = signal_at_step, signal_rank
        self.signal = signal.Signals[signal_name]

    def before_update(self, step: int, rank: int, params: list[torch.Tensor]) -> None:
        if self.grad_fault is not None and self.grad_fault.applies(step, rank):
            self.grad_fault.apply(params)

    def after_step(self, step: int, rank: int) -> None:
        if step == self.signal_at_step and self.signal_rank in (None, rank):
            os.kill(os.getpid(), self.signal)
        if step != self.kill_at_step or rank != self.kill_rank or self.kill_marker is None:
            return
        if not os.path.exists(self.kill_marker):
            with open(self.kill_marker, "w") as f:
                f.write(f"rank {rank} killed itself after step {step}\n")
            os.kill(os.getpid(), signal.SIGKILL)
