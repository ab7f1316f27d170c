"""The in-process tests of what tests/integration/test_train_start.py covers (that file holds the
tests that start a process or run a Beam pipeline, and says what they cover)."""

from __future__ import annotations

import torch

from train.resume import fit_positions


def test_fit_positions_keeps_learned_rows_and_the_new_rows_initialisation():
    learned = torch.arange(12.0).reshape(4, 3)  # a phase trained with 4 positions
    fresh = torch.full((6, 3), -1.0)  # this model's table: 6 positions, initialised
    fitted = fit_positions(learned, fresh)
    assert torch.equal(fitted[:4], learned) and torch.equal(fitted[4:], fresh[4:])
    assert fit_positions(learned, torch.zeros(4, 3)) is learned  # same size: as saved
