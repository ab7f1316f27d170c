"""Scoring token windows and last words with a GPT model, split over data-parallel ranks.

Each rank scores every ``dp_size``-th item and the sums are all-reduced, so a torchrun launch
gives the same totals as one process. Every rank runs the same number of forward calls (a rank
out of items repeats its first one with zero weight): a sharded model (FSDP) needs all ranks in
each forward.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from train.eval.wikitext import Window


@dataclass(frozen=True)
class Partition:
    """This process's share of the items: every ``size``-th from ``rank``; ``group`` is the
    process group the sums are reduced over (None: the default group when initialised)."""

    rank: int = 0
    size: int = 1
    group: object | None = None

    def batches(self, num_items: int, batch_size: int) -> list[list[int | None]]:
        """Item indices per batch for this rank; ``None`` pads ranks that run out."""
        mine = list(range(self.rank, num_items, self.size))
        per_rank = math.ceil(num_items / self.size)
        padded: list[int | None] = mine + [None] * (per_rank - len(mine))
        return [padded[i : i + batch_size] for i in range(0, len(padded), batch_size)]

    def all_reduce(self, values: list[float]) -> list[float]:
        if self.size == 1 or not dist.is_initialized():
            return values
        tensor = torch.tensor(values, dtype=torch.float64)
        if dist.get_backend(self.group) == "nccl":
            tensor = tensor.cuda()
        dist.all_reduce(tensor, group=self.group)
        return tensor.cpu().tolist()


ONE_PROCESS = Partition()


def _device_of(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def _padded(rows: Sequence[Sequence[int]], fill: int) -> torch.Tensor:
    width = max(len(r) for r in rows)
    out = np.full((len(rows), width), fill, dtype=np.int64)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return torch.from_numpy(out)


@torch.no_grad()
def score_windows(
    model,
    ids: Sequence[int] | np.ndarray,
    windows: Sequence[Window],
    *,
    batch_size: int,
    partition: Partition = ONE_PROCESS,
    progress: Callable[[int], None] | None = None,
    loss_of: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
) -> tuple[float, int]:
    """(summed nll, number of scored targets) over ``windows`` of ``ids``, all ranks summed.

    ``loss_of(inputs, targets)`` is the mean loss over the targets that are not -100 (default:
    the model's own ``model(inputs, targets)``); the trainer passes its loss path, so a model
    that is sharded or keeps its logits split by vocabulary is scored the same way.
    """
    model.eval()
    device = _device_of(model)
    if loss_of is None:

        def loss_of(inputs, targets):
            return model(inputs, targets)[1]

    ids = np.asarray(ids, dtype=np.int64)
    nll_sum, scored = 0.0, 0
    for batch in partition.batches(len(windows), batch_size):
        real = [i for i in batch if i is not None]
        chosen = [windows[i] for i in real] or [windows[0]]
        inputs = [ids[w.start : w.end] for w in chosen]
        targets = []
        for w in chosen:
            row = ids[w.start + 1 : w.end + 1].copy()
            row[: w.score_from - w.start] = -100  # predicted by an earlier window
            targets.append(row)
        targets_t = _padded(targets, -100).to(device)
        loss = loss_of(_padded(inputs, 0).to(device), targets_t)
        if hasattr(loss, "full_tensor"):  # a DTensor loss (tensor parallel)
            loss = loss.full_tensor()
        if real:
            counted = int((targets_t != -100).sum())
            nll_sum += float(loss.double()) * counted
            scored += counted
        if progress is not None:
            progress(1)
    nll_sum, scored = partition.all_reduce([nll_sum, float(scored)])
    return nll_sum, int(scored)


@dataclass(frozen=True)
class LastWordCounts:
    examples: int = 0
    correct: int = 0  # every token of the last word predicted greedily
    nll: float = 0.0  # summed over the last words' tokens

    def add(self, other: LastWordCounts) -> LastWordCounts:
        return LastWordCounts(
            self.examples + other.examples, self.correct + other.correct, self.nll + other.nll
        )


@torch.no_grad()
def score_last_words(
    model,
    examples: Sequence[tuple[list[int], list[int]]],
    *,
    batch_size: int,
    partition: Partition = ONE_PROCESS,
    progress: Callable[[int], None] | None = None,
) -> LastWordCounts:
    """Greedy accuracy and nll of each example's target tokens after its context.

    ``examples`` are (context ids, target ids); the model sees context + target[:-1] and
    predicts each target token. Contexts longer than the model's window keep their end.
    """
    model.eval()
    device = _device_of(model)
    block_size = model.config.block_size
    total = LastWordCounts()
    for batch in partition.batches(len(examples), batch_size):
        real = [i for i in batch if i is not None]
        chosen = [examples[i] for i in real] or [examples[0]]
        inputs, targets = [], []
        for context, target in chosen:
            sequence = (list(context) + list(target))[-(block_size + 1) :]
            inputs.append(sequence[:-1])
            labels = [-100] * (len(sequence) - 1)
            labels[-len(target) :] = target
            targets.append(labels)
        inputs_t = _padded(inputs, 0).to(device)
        targets_t = _padded(targets, -100).to(device)
        logits, _ = model(inputs_t)
        nll = F.cross_entropy(
            logits.float().flatten(0, 1), targets_t.flatten(), ignore_index=-100, reduction="none"
        ).view(targets_t.shape)
        counted = targets_t != -100
        hit = (logits.argmax(-1) == targets_t) | ~counted
        if real:
            total = total.add(
                LastWordCounts(len(real), int(hit.all(dim=1).sum()), float(nll.double().sum()))
            )
        if progress is not None:
            progress(1)
    examples_n, correct, nll_sum = partition.all_reduce(
        [float(total.examples), float(total.correct), total.nll]
    )
    return LastWordCounts(int(examples_n), int(correct), nll_sum)
