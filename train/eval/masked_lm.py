"""BERT masked-LM accuracy and perplexity on a held-out shard set.

The samples are the trainer's own BERT samples (``train.data``), built with a fixed seed: the
same sentences get the same masks on every run and every rank count, so two checkpoints (or
ours and an imported HF BERT) are scored on identical inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from train.data import collate
from train.eval.scoring import ONE_PROCESS, Partition
from train.eval.wikitext import safe_exp


@dataclass(frozen=True)
class MaskedLMResult:
    samples: int
    predicted: int  # masked positions scored
    correct: int
    nll: float

    def to_json(self) -> dict:
        return {
            "samples": self.samples,
            "predicted_tokens": self.predicted,
            "mlm_accuracy": self.correct / max(self.predicted, 1),
            "mlm_loss": self.nll / max(self.predicted, 1),
            "mlm_ppl": safe_exp(self.nll / max(self.predicted, 1)),
        }


@torch.no_grad()
def score_masked_lm(
    model,
    dataset,
    num_samples: int,
    *,
    batch_size: int,
    partition: Partition = ONE_PROCESS,
    progress: Callable[[int], None] | None = None,
) -> MaskedLMResult:
    """Masked-token accuracy and summed nll over the first ``num_samples`` samples."""
    model.eval()
    device = next(model.parameters()).device
    samples = predicted = correct = 0
    nll = 0.0
    for batch_indices in partition.batches(num_samples, batch_size):
        real = [i for i in batch_indices if i is not None]
        batch = collate([dataset[i] for i in (real or [0])])
        batch = {k: v.to(device) for k, v in batch.items()}
        labels = batch["mlm_labels"]
        out = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], labels)
        target = labels[labels != -100]  # the order of the model's gathered MLM logits
        if real:
            samples += len(real)
            predicted += int(target.numel())
            correct += int((out.mlm_logits.argmax(-1) == target).sum())
            nll += float(F.cross_entropy(out.mlm_logits.float(), target, reduction="sum"))
        if progress is not None:
            progress(1)
    samples, predicted, correct, nll = partition.all_reduce(
        [float(samples), float(predicted), float(correct), nll]
    )
    return MaskedLMResult(int(samples), int(predicted), int(correct), nll)
