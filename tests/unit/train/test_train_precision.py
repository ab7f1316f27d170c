"""train.precision: autocast dtypes and the dynamic loss scale's back-off / growth policy."""

from __future__ import annotations

import pytest
import torch

from train.precision import Precision


@pytest.mark.parametrize(
    "mode, dtype", [("fp32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16)]
)
def test_autocast_runs_matmuls_in_the_mode_dtype(mode, dtype):
    precision = Precision(mode, "cpu")
    a = torch.randn(4, 4)
    with precision.autocast():
        assert (a @ a).dtype == dtype
    assert a.dtype == torch.float32  # master copy untouched


def test_fp16_scales_loss_and_backs_off_on_overflow():
    p = Precision("fp16", "cpu", init_scale=1024.0, growth_interval=3)
    loss = torch.tensor(2.0)
    assert p.scale_loss(loss).item() == 2048.0
    assert p.unscale_factor == 1 / 1024
    p.update(overflow=True)
    assert p.scale == 512.0 and p.clean_steps == 0
    p.update(False)
    p.update(False)
    assert p.scale == 512.0
    p.update(False)  # third clean step in a row: grow
    assert p.scale == 1024.0 and p.clean_steps == 0


def test_bf16_and_fp32_never_scale():
    for mode in ("bf16", "fp32"):
        p = Precision(mode, "cpu")
        assert p.scale_loss(torch.tensor(3.0)).item() == 3.0
        p.update(overflow=True)
        assert p.scale == 1.0


def test_state_round_trip_and_mode_change():
    p = Precision("fp16", "cpu", init_scale=64.0)
    p.update(True)
    p.update(False)
    q = Precision("fp16", "cpu")
    q.load_state_dict(p.state_dict())
    assert (q.scale, q.clean_steps) == (32.0, 1)
    r = Precision("bf16", "cpu")
    r.load_state_dict(p.state_dict())  # another precision: its own fresh state
    assert r.scale == 1.0


def test_unknown_mode():
    with pytest.raises(ValueError, match="precision"):
        Precision("fp8", "cpu")
