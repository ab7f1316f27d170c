"""Which samples each data-parallel rank reads, and how a micro-batch becomes tensors."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np


class PretrainingSampler:
    """Megatron-LM's MegatronPretrainingSampler: consecutive samples, no shuffling here.

    The datasets are already shuffled (their shuffle index), so the sampler only walks them in
    order: global batch g holds samples [consumed + g*G, consumed + (g+1)*G) with
    G = micro_batch_size * data_parallel_size, and rank r reads its micro-batch at offset
    r * micro_batch_size. Resuming with consumed_samples = k yields exactly what an
    uninterrupted run yields after its first k samples. An incomplete last global batch is
    dropped, as Megatron does.
    """

    def __init__(
        self,
        total_samples: int,
        consumed_samples: int,
        micro_batch_size: int,
        data_parallel_rank: int,
        data_parallel_size: int,
    ):
        if total_samples <= 0:
            raise ValueError(f"no samples to train on (total_samples={total_samples})")
        if micro_batch_size <= 0:
            raise ValueError(f"micro_batch_size must be positive, got {micro_batch_size}")
        if data_parallel_size <= 0:
            raise ValueError(f"data_parallel_size must be positive, got {data_parallel_size}")
        if not 0 <= data_parallel_rank < data_parallel_size:
            raise ValueError(
                f"data_parallel_rank {data_parallel_rank} outside [0, {data_parallel_size})"
            )
        if not 0 <= consumed_samples < total_samples:
            raise ValueError(
                f"consumed_samples {consumed_samples} must be in [0, {total_samples}): "
                "a resumed run has already consumed the whole dataset"
            )
        self.total_samples = total_samples
        self.consumed_samples = consumed_samples
        self.micro_batch_size = micro_batch_size
        self.data_parallel_rank = data_parallel_rank
        self.data_parallel_size = data_parallel_size
        self.global_batch_samples = micro_batch_size * data_parallel_size

    def __len__(self) -> int:
        """Micro-batches this rank will yield."""
        return (self.total_samples - self.consumed_samples) // self.global_batch_samples

    def __iter__(self) -> Iterator[list[int]]:
        offset = self.data_parallel_rank * self.micro_batch_size
        last_start = self.total_samples - self.global_batch_samples
        for start in range(self.consumed_samples, last_start + 1, self.global_batch_samples):
            first = start + offset
            yield list(range(first, first + self.micro_batch_size))


def collate(samples: list[dict]) -> dict:
    """Stack a micro-batch of numpy samples into torch tensors (dict[str, torch.Tensor])."""
    import torch  # only here: building datasets must not need torch (tools, workers, tests)

    if not samples:
        raise ValueError("cannot collate an empty micro-batch")
    return {key: torch.from_numpy(np.stack([s[key] for s in samples])) for key in samples[0]}
