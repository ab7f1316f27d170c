"""The in-process tests of what tests/integration/test_train_loop.py covers (that file holds the
tests that start a process or run a Beam pipeline, and says what they cover)."""

from __future__ import annotations

import os
import re

import pytest
import torch

from tests.train_faults import parse_grad_fault
from train.skipping import OutlierDetector


def test_outlier_detector_needs_a_full_window():
    detector = OutlierDetector(4)
    for value in (1.0, 1.1, 0.9):
        assert detector.zscore(value) is None
        detector.add(value)
    assert detector.zscore(5.0) is None  # 3 of 4
    detector.add(1.0)
    assert detector.zscore(1.0) == pytest.approx(0.0)
    assert detector.zscore(5.0) > 40
    fault = parse_grad_fault("3-5:x0.5@1")
    assert (fault.first, fault.last, fault.factor, fault.rank) == (3, 5, 0.5, 1)
    assert fault.applies(4, 1) and not fault.applies(4, 0) and not fault.applies(6, 1)
    assert parse_grad_fault("7:inf").applies(7, 3)


def test_allow_config_change_help_names_every_identity_setting():
    from train.config import build_parser, run_identity_fields

    names = run_identity_fields()
    assert {"data", "max_steps", "lr", "warmup_steps", "global_batch", "seq_len"} <= set(names)
    assert {"micro_batch", "eval_interval", "stop_at"}.isdisjoint(names)
    allow = next(a.help for a in build_parser()._actions if a.dest == "allow_config_change")
    assert set(re.findall(r"--[a-z-]+", allow)) == {
        f"--{name.replace('_', '-')}" for name in names
    }  # fmt: skip
    assert "--lr" in build_parser().format_help()  # marked fields keep their flags


def test_a_second_signal_while_stopping_is_noted_not_obeyed(capsys):
    """The first SIGINT/SIGTERM is the one the run stops for; another one while it finishes
    its step and saves prints a note and neither interrupts the save nor changes the status."""
    import signal

    from train.runtime import Runtime, StopRequest

    alone = Runtime(0, 1, 0, torch.device("cpu"), None, 0, 1, 1)
    before = signal.getsignal(signal.SIGINT)
    with StopRequest() as stop:
        assert stop.agreed(alone) is None
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)  # no KeyboardInterrupt
        assert stop.agreed(alone) == signal.SIGTERM
    assert signal.getsignal(signal.SIGINT) is before  # the process's handlers are back
    assert capsys.readouterr().err == (
        "SIGINT again: already stopping, saving a checkpoint first (SIGKILL stops without saving)\n"
    )
