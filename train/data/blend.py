"""Weighted blending of datasets with Megatron's deterministic greedy schedule, in numpy.

Sample i of the blend comes from the dataset whose error `weight * max(i, 1) - drawn_so_far` is
largest (ties to the lowest index): megatron-core's `build_blending_indices`, so a blend picks
the same dataset for every sample as there; every prefix holds each dataset within about one
sample of its share. The rule is sequential; Megatron runs it in C++. Here it runs in parallel
over time instead: the range is cut into segments and all segments are stepped together, one
numpy operation per dataset per step across every segment. A segment cannot know its true
starting counts before the segments ahead of it are done, so it starts a warm-up stretch early
from a guess (each dataset's count rounded by largest remainder), and the rule's own correction
pulls the guess onto the true trajectory within a few steps (once two runs hold the same counts
at the same step they agree for ever). Every segment boundary is then checked: if the previous
segment's final counts equal the next segment's counts at that step, the next segment is exact;
the rare one that is not is re-run exactly from the correct counts. The result is identical to
the plain loop (`greedy_blend_loop`), which also serves for short blends.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable

import numpy as np

from dataset_format import ShardSet
from train.data.indices import (
    ensure_index_files,
    index_cache_directory,
    open_index_files,
    shard_set_location,
)
from train.data.spec import SPLIT_NAMES, Dataset, DataSource

SEGMENT_LENGTH = 2048
WARMUP_STEPS = 128
# Megatron asks each dataset for a little more than its share, so rounding never runs one dry.
OVERSAMPLE = 1.005
BLEND_VERSION = 1  # part of the blend cache key: bump when the arrays for the same inputs change


def normalized_weights(weights) -> np.ndarray:
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or w.size == 0:
        raise ValueError("blending needs at least one weight")
    if not np.all(np.isfinite(w)) or np.any(w <= 0):
        raise ValueError(f"blend weights must be positive, got {w.tolist()}")
    return w / w.sum()


def greedy_blend_loop(
    weights: np.ndarray, start: int, stop: int, counts: list[int], out: np.ndarray
) -> list[int]:
    """The rule itself, step by step, for samples [start, stop) from `counts` drawn so far.

    Writes the choices into `out[0 : stop - start]`; returns the counts after `stop`.
    """
    w = weights.tolist()
    counts = list(counts)
    others = range(1, len(w))
    for i in range(start, stop):
        step = max(float(i), 1.0)
        best, best_error = 0, w[0] * step - counts[0]
        for d in others:
            error = w[d] * step - counts[d]
            if error > best_error:
                best, best_error = d, error
        out[i - start] = best
        counts[best] += 1
    return counts


def largest_remainder_counts(weights: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Each dataset's floor(weight * n), plus one for the n - sum(floors) largest remainders."""
    shares = steps[:, None].astype(np.float64) * weights[None, :]
    floors = np.floor(shares)
    remainders = shares - floors
    extra = steps - floors.sum(axis=1).astype(np.int64)
    order = np.argsort(-remainders, axis=1, kind="stable")
    gets_extra = np.arange(weights.size)[None, :] < extra[:, None]
    counts = floors.astype(np.int64)
    np.put_along_axis(counts, order, np.take_along_axis(counts, order, axis=1) + gets_extra, axis=1)
    return counts


def _step_segments(
    weights: np.ndarray, first_step: np.ndarray, counts: np.ndarray, steps: int
) -> np.ndarray:
    """Run the rule `steps` times for every segment at once; returns choices (steps x segments).

    first_step[k] is segment k's first sample index, counts[d, k] its counts drawn so far.
    Errors are computed as `weight * max(i, 1.0) - count` in float64 like the loop, so ties
    and roundings fall the same way (counts stay exact in float64 below 2**53).
    """
    num_datasets, num_segments = counts.shape
    drawn = counts.astype(np.float64)
    drawn_flat = drawn.reshape(-1)
    choices = np.empty((steps, num_segments), dtype=np.int16)
    sample = first_step.astype(np.float64)
    step = np.empty(num_segments, dtype=np.float64)
    columns = np.arange(num_segments)
    best = np.empty(num_segments, dtype=np.intp)
    best_error = np.empty(num_segments, dtype=np.float64)
    error = np.empty(num_segments, dtype=np.float64)
    better = np.empty(num_segments, dtype=bool)
    flat = np.empty(num_segments, dtype=np.intp)
    for t in range(steps):
        np.maximum(sample, 1.0, out=step)
        best.fill(0)
        np.multiply(step, weights[0], out=best_error)
        best_error -= drawn[0]
        for d in range(1, num_datasets):
            np.multiply(step, weights[d], out=error)
            error -= drawn[d]
            np.greater(error, best_error, out=better)
            np.copyto(best, d, where=better)
            np.maximum(best_error, error, out=best_error)
        choices[t] = best
        np.multiply(best, num_segments, out=flat)
        flat += columns
        drawn_flat[flat] += 1.0
        sample += 1.0
    return choices


def blending_indices(weights, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(dataset_index, dataset_sample_index) of the greedy blend of `size` samples.

    dataset_sample_index[i] is how many samples of dataset_index[i] came before sample i.
    """
    w = normalized_weights(weights)
    if size < 0:
        raise ValueError(f"blend size must be >= 0, got {size}")
    dataset_index = np.zeros(size, dtype=np.int16)
    if w.size > np.iinfo(np.int16).max:
        raise ValueError(f"cannot blend {w.size} datasets (at most {np.iinfo(np.int16).max})")
    if w.size > 1 and size <= 4 * SEGMENT_LENGTH:
        greedy_blend_loop(w, 0, size, [0] * w.size, dataset_index)
    elif w.size > 1:
        _blend_in_segments(w, size, dataset_index)
    dataset_sample_index = np.empty(size, dtype=np.int64)
    for d in range(w.size):
        positions = np.flatnonzero(dataset_index == d)
        dataset_sample_index[positions] = np.arange(positions.size)
    return dataset_index, dataset_sample_index


def _count_choices(choices: np.ndarray, num_datasets: int) -> np.ndarray:
    """counts[d, k] = how often column k of `choices` picks dataset d."""
    return np.stack([(choices == d).sum(axis=0) for d in range(num_datasets)]).astype(np.int64)


def _blend_in_segments(w: np.ndarray, size: int, dataset_index: np.ndarray) -> None:
    starts = np.arange(0, size, SEGMENT_LENGTH, dtype=np.int64)
    # Segment 0 starts exactly (no counts yet); the others WARMUP_STEPS early from a guess.
    # All run WARMUP_STEPS + SEGMENT_LENGTH steps so they can be stepped together.
    first = starts - WARMUP_STEPS
    first[0] = 0
    guesses = largest_remainder_counts(w, first).T.copy()
    choices = _step_segments(w, first, guesses, WARMUP_STEPS + SEGMENT_LENGTH)
    body = choices[WARMUP_STEPS:].T.copy()
    body[0] = choices[:SEGMENT_LENGTH, 0]
    dataset_index[:] = body.ravel()[:size]
    at_start = guesses + _count_choices(choices[:WARMUP_STEPS], w.size)
    at_end = at_start + _count_choices(choices[WARMUP_STEPS:], w.size)
    exact_end = _count_choices(choices[:SEGMENT_LENGTH, :1], w.size)[:, 0]
    # Segment k is exact when its counts at its start equal segment k-1's exact final counts;
    # otherwise it is re-run exactly from those (its warm-up had not converged).
    for k in range(1, starts.size):
        if np.array_equal(at_start[:, k], exact_end):
            exact_end = at_end[:, k]
            continue
        start, stop = int(starts[k]), min(int(starts[k]) + SEGMENT_LENGTH, size)
        exact_end = np.array(
            greedy_blend_loop(w, start, stop, exact_end.tolist(), dataset_index[start:stop])
        )


def blend_cache_stem(weights: np.ndarray, size: int) -> str:
    """File stem of a blend's cached indices: they depend on the weights and the size only."""
    description = {"blend_version": BLEND_VERSION, "weights": [repr(float(w)) for w in weights],
                   "size": int(size)}  # fmt: skip
    text = json.dumps(description, sort_keys=True)
    return "blend-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


class BlendedDataset:
    """Samples of several datasets interleaved by the greedy schedule of their weights.

    With ``cache_directory`` the two index arrays are built once (local rank 0 of each node)
    and memory-mapped from ``.npy`` files there, like the GPT indices, instead of every rank
    building them in RAM at start.
    """

    def __init__(
        self, datasets: list[Dataset], weights, size: int, cache_directory: str | None = None
    ):
        if len(datasets) != len(np.atleast_1d(weights)):
            raise ValueError(f"{len(datasets)} datasets but {len(np.atleast_1d(weights))} weights")
        self.datasets = list(datasets)
        self.weights = normalized_weights(weights)
        self.size = int(size)
        if cache_directory is None:
            self.dataset_index, self.dataset_sample_index = blending_indices(
                self.weights, self.size
            )
        else:
            names = ("dataset_index", "dataset_sample_index")
            paths = ensure_index_files(
                cache_directory,
                blend_cache_stem(self.weights, self.size),
                names,
                lambda: dict(zip(names, blending_indices(self.weights, self.size))),
            )
            arrays = open_index_files(paths)
            self.dataset_index = arrays["dataset_index"]
            self.dataset_sample_index = arrays["dataset_sample_index"]
        needed = np.bincount(self.dataset_index, minlength=len(self.datasets))
        for d, dataset in enumerate(self.datasets):
            if needed[d] > len(dataset):
                raise ValueError(
                    f"blend of {self.size} samples needs {int(needed[d])} from dataset {d} "
                    f"(weight {self.weights[d]:.4f}), which has only {len(dataset)}"
                )

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        index = int(index)
        if not 0 <= index < self.size:
            raise IndexError(f"blend sample {index} out of range [0, {self.size})")
        dataset = self.datasets[int(self.dataset_index[index])]
        return dataset[int(self.dataset_sample_index[index])]


def samples_per_dataset(weights, num_samples: int) -> list[int]:
    """How many samples to build of each dataset for a blend of `num_samples`: megatron-core's
    ceil(ceil(num_samples * weight) * 1.005), the 0.5% margin on the rounded share."""
    return [
        int(math.ceil(math.ceil(num_samples * float(w)) * OVERSAMPLE))
        for w in normalized_weights(weights)
    ]


def check_num_samples(num_samples: dict[str, int]) -> None:
    unknown = sorted(set(num_samples) - set(SPLIT_NAMES))
    if unknown:
        raise ValueError(f"num_samples: unknown split(s) {unknown}; expected {list(SPLIT_NAMES)}")
    for name, count in num_samples.items():
        if int(count) < 0:
            raise ValueError(f"num_samples[{name!r}] must be >= 0, got {count}")


def build_split_datasets(
    sources: list[DataSource],
    num_samples: dict[str, int],
    build_split: Callable[[ShardSet, str, str, int], Dataset],
) -> dict[str, Dataset]:
    """A dataset per split with samples wanted: one set's own, or a blend of several.

    `build_split(shard_set, path, split_name, count)` builds one set's dataset of a split. A
    single set's dataset holds every sample of the epochs built (at least the number asked
    for); a blend holds exactly that number, each set built with its weighted share.
    """
    if not sources:
        raise ValueError("no data sources")
    check_num_samples(num_samples)
    shard_sets = [ShardSet(path) for _, path in sources]
    weights = [weight for weight, _ in sources]
    datasets: dict[str, Dataset] = {}
    for split_name in SPLIT_NAMES:
        wanted = int(num_samples.get(split_name, 0))
        if wanted == 0:
            continue
        counts = [wanted] if len(sources) == 1 else samples_per_dataset(weights, wanted)
        parts = [
            build_split(shard_set, path, split_name, count)
            for shard_set, (_, path), count in zip(shard_sets, sources, counts)
        ]
        if len(parts) == 1:
            datasets[split_name] = parts[0]
            continue
        location = shard_set_location(shard_sets[0])
        directory = location if os.path.isdir(location) else os.path.dirname(location)
        datasets[split_name] = BlendedDataset(
            parts, weights, wanted, cache_directory=index_cache_directory(directory, None)
        )
    return datasets
