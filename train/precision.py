"""Numeric precision: fp32, bf16 autocast, fp16 autocast with dynamic loss scaling.

Parameters, gradients and optimizer state stay fp32 in every mode (fp32 master weights);
autocast runs the matmuls in bf16/fp16. fp16 needs loss scaling because its 5-bit exponent
underflows small gradients: the loss is multiplied by ``scale`` before backward, gradients
are divided by it afterwards, and a step whose gradients overflowed (inf/nan) is skipped while
the scale backs off. The policy is torch.amp.GradScaler's (start 2**16, halve on overflow,
double after 2000 clean steps); it is re-implemented here because the overflow decision has
to come from the trainer's global gradient norm, which is already reduced over every shard
of an FSDP / tensor-parallel model, so all ranks skip the same steps.
"""

from __future__ import annotations

import contextlib

import torch

AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class Precision:
    def __init__(
        self,
        mode: str,
        device_type: str,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
    ) -> None:
        if mode not in ("fp32", "bf16", "fp16"):
            raise ValueError(f"precision must be fp32, bf16 or fp16, got {mode!r}")
        self.mode = mode
        self.device_type = device_type
        self.scale = float(init_scale) if mode == "fp16" else 1.0
        self.growth_factor = growth_factor
        self.backoff_factor = backoff_factor
        self.growth_interval = growth_interval
        self.clean_steps = 0  # consecutive non-overflowing steps since the last scale change

    @property
    def dtype(self) -> torch.dtype | None:
        return AUTOCAST_DTYPES.get(self.mode)

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.mode == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device_type, dtype=AUTOCAST_DTYPES[self.mode])

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        return loss * self.scale if self.mode == "fp16" else loss

    @property
    def unscale_factor(self) -> float:
        """What gradients must be multiplied by to undo :meth:`scale_loss`."""
        return 1.0 / self.scale

    def update(self, overflow: bool) -> None:
        """After each step: back off on overflow, grow after ``growth_interval`` clean steps."""
        if self.mode != "fp16":
            return
        if overflow:
            self.scale *= self.backoff_factor
            self.clean_steps = 0
            return
        self.clean_steps += 1
        if self.clean_steps >= self.growth_interval:
            self.scale *= self.growth_factor
            self.clean_steps = 0

    def state_dict(self) -> dict:
        return {"mode": self.mode, "scale": self.scale, "clean_steps": self.clean_steps}

    def load_state_dict(self, state: dict) -> None:
        if state.get("mode") == self.mode:
            self.scale = float(state["scale"])
            self.clean_steps = int(state["clean_steps"])
        # A run resumed in another precision starts that precision's scaler fresh.
