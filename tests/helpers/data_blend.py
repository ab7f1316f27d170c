"""What the unit and the integration tests of data_blend share."""

from __future__ import annotations

import numpy as np


def greedy_reference(weights, size):
    """The rule as stated (megatron-core's build_blending_indices): sample i from the dataset
    with the largest weight * max(i, 1) - drawn."""
    weights = [w / sum(weights) for w in weights]
    drawn = [0] * len(weights)
    choice, index_in_dataset = [], []
    for i in range(size):
        errors = [w * max(i, 1) - n for w, n in zip(weights, drawn)]
        best = errors.index(max(errors))  # ties to the lowest index
        choice.append(best)
        index_in_dataset.append(drawn[best])
        drawn[best] += 1
    return np.array(choice), np.array(index_in_dataset)


WEIGHTS = [
    [0.3, 0.7],
    [1, 1],
    [0.2, 0.3, 0.5],
    [5, 1, 1, 1, 0.01],
    list(np.random.RandomState(0).random_sample(8)),
    [1e-3, 1],
]
