"""Greedy blending: identical to the rule applied sample by sample, shares within one sample."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.data_blend import WEIGHTS, greedy_reference
from train.data import blending_indices


@pytest.mark.parametrize("weights", WEIGHTS)
@pytest.mark.parametrize("size", [1, 1000, 40_000])
def test_blend_equals_the_rule_sample_by_sample(weights, size):
    dataset_index, sample_index = blending_indices(weights, size)
    expected_index, expected_sample = greedy_reference(weights, size)
    assert np.array_equal(dataset_index, expected_index)
    assert np.array_equal(sample_index, expected_sample)
