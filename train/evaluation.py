"""The model's loss on a batch of its family's kind, and the evaluations the trainer runs: the
valid and test splits (a fixed set of batches each) and, for a causal LM, the WikiText task of
train/evaluate.py."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.utils.data import DataLoader

from train.config import TrainConfig, fail
from train.data.loader import make_loader, to_device
from train.metrics import Console, MetricsLog
from train.models.layers import masked_cross_entropy
from train.models.registry import get_spec
from train.models.spec import CAUSAL_LM, MASKED_LM
from train.parallel import loss_context
from train.precision import Precision
from train.runtime import Runtime, all_reduce_mean


def forward_loss(
    model: nn.Module, batch: dict, kind: str, next_sentence: bool, parallel_loss: bool = False
):
    """The model's loss on one micro-batch of the batch kind ``kind`` (its family's spec's
    ``batch``), and named parts of it for the metrics.

    ``parallel_loss``: the model's logits come out sharded by vocabulary (a causal LM under
    tensor parallelism); its loss function runs on the shards (call inside ``loss_context``).
    """
    if kind == CAUSAL_LM:
        return _causal_lm_loss(model, batch, parallel_loss), {}
    if kind == MASKED_LM:
        return _masked_lm_loss(model, batch, next_sentence)
    raise ValueError(f"unknown batch kind {kind!r}")


def _causal_lm_loss(model: nn.Module, batch: dict, parallel_loss: bool) -> torch.Tensor:
    if parallel_loss:
        from train.parallel import vocab_parallel_loss

        logits, _ = model(batch["input_ids"])
        return vocab_parallel_loss(
            masked_cross_entropy, logits, batch["labels"], batch["loss_mask"]
        )
    _, loss = model(batch["input_ids"], batch["labels"], batch["loss_mask"])
    return loss


def _masked_lm_loss(model: nn.Module, batch: dict, next_sentence: bool):
    # BertDataset's fixed-shape targets (mlm_positions/mlm_targets): one compiled graph
    static = "mlm_positions" in batch
    out = model(
        batch["input_ids"],
        batch["token_type_ids"],
        batch["attention_mask"],
        batch["mlm_targets"] if static else batch["mlm_labels"],
        batch["nsp_label"] if next_sentence else None,
        **({"mlm_positions": batch["mlm_positions"]} if static else {}),
    )
    parts = {"mlm_loss": out.mlm_loss}
    if out.nsp_loss is not None:
        parts["nsp_loss"] = out.nsp_loss
    if not model.training:  # evaluation: how many masked tokens / sentence pairs it gets right
        labels = batch["mlm_targets"] if static else batch["mlm_labels"]
        counted = labels != -100
        target = labels[counted]  # the order of the model's gathered MLM logits
        logits = out.mlm_logits[counted.flatten()] if static else out.mlm_logits
        parts["mlm_counts"] = _right_and_total(logits, target)
        if out.nsp_logits is not None and next_sentence:
            parts["nsp_counts"] = _right_and_total(out.nsp_logits, batch["nsp_label"].view(-1))
    return out.loss, parts


def _right_and_total(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """[predictions equal to target, predictions] as float64, on the logits' device."""
    return torch.stack(
        [
            (logits.argmax(-1) == target).sum(),
            torch.tensor(target.numel(), device=target.device),  # same device for stack
        ]
    ).double()


def uses_parallel_loss(config: TrainConfig, runtime: Runtime) -> bool:
    """A family whose plan allows it keeps its logits sharded by vocabulary into the loss
    under tensor parallelism."""
    plan = get_spec(config.model).parallel
    return plan.parallel_loss and config.parallel == "tp" and runtime.tp > 1


@torch.no_grad()
def evaluate(model, loader, config, runtime, precision, next_sentence) -> dict[str, float]:
    """Mean loss over the split's first ``eval_iters`` global batches (``loader``, built once
    per split: the same samples at every evaluation and under any parallelism, so the figures
    are comparable), and ``ppl``: the exponential of the language-model loss.

    For BERT the loss is MLM + NSP, so ``ppl`` is exp(MLM loss) alone; ``mlm_loss``,
    ``mlm_accuracy`` (over all predicted tokens) and, with a next-sentence head, ``nsp_loss``
    and ``nsp_accuracy`` (over all pairs) are reported apart.
    """
    model.eval()
    sums: dict[str, torch.Tensor] = {}
    batches = 0
    for batch in loader:
        with precision.autocast(), loss_context(uses_parallel_loss(config, runtime)):
            loss, parts = forward_loss(
                model, to_device(batch, runtime.device), get_spec(config.model).batch,
                next_sentence,
                uses_parallel_loss(config, runtime),
            )  # fmt: skip
        for name, value in {"loss": loss, **parts}.items():
            value = value.detach().double().to(runtime.device)
            sums[name] = sums[name] + value if name in sums else value
        batches += 1
    model.train()
    result = {}
    for name, value in sums.items():
        value = all_reduce_mean(value / max(batches, 1), runtime)
        if name.endswith("_counts"):  # [right, total]: the means' ratio is the counts' ratio
            right, total = value.tolist()
            result[name.replace("_counts", "_accuracy")] = right / total if total else math.nan
        else:
            result[name] = float(value)
    lm_loss = result.get("mlm_loss", result.get("loss", math.nan))
    result["ppl"] = math.exp(lm_loss) if lm_loss < 50 else math.inf
    return result


def wikitext_eval_data(config: TrainConfig) -> tuple[list[int], int] | None:
    """--eval-wikitext: the file's ids under the data's tokenizer and its WikiText token count,
    made once before training."""
    if config.eval_wikitext is None:
        return None
    if get_spec(config.model).batch != CAUSAL_LM:
        fail(f"--eval-wikitext scores a causal language model; {config.model} is not one")
    from train.eval.run import wikitext_ids
    from train.run_record import LoadError, run_tokenizer_path

    tokenizer_path = run_tokenizer_path(config.to_dict())
    try:
        with open(config.eval_wikitext, encoding="utf-8") as f:
            return wikitext_ids(f.read(), tokenizer_path)
    except (LoadError, OSError, UnicodeDecodeError) as e:
        fail(f"--eval-wikitext {config.eval_wikitext}: {e}")


def format_eval_line(split: str, record: dict) -> str:
    line = f"step {record['step']} | {split} loss {record['loss']:.4f}"
    if "mlm_loss" in record:
        line += f" | mlm loss {record['mlm_loss']:.4f} | mlm ppl {record['ppl']:.2f}"
        line += f" | mlm accuracy {record['mlm_accuracy']:.3f}"
        if "nsp_accuracy" in record:
            line += f" | nsp loss {record['nsp_loss']:.4f}"
            line += f" | nsp accuracy {record['nsp_accuracy']:.3f}"
        return line
    return line + f" | ppl {record['ppl']:.2f}"


class Evaluator:
    """Runs the evaluations of one training run and logs their records.

    Each split's loader is built at its first evaluation and reused, so every evaluation of a
    split scores the same samples; the WikiText ids are made once, before training.
    """

    def __init__(
        self, config: TrainConfig, runtime: Runtime, model: nn.Module, train_model: nn.Module,
        precision: Precision, metrics: MetricsLog, console: Console,
    ) -> None:  # fmt: skip
        self.config, self.runtime, self.precision = config, runtime, precision
        self.model, self.train_model = model, train_model
        self.metrics, self.console = metrics, console
        self.next_sentence = bool(getattr(model.config, "next_sentence", False))
        self.parallel_loss = uses_parallel_loss(config, runtime)
        self.loaders: dict[str, DataLoader] = {}
        self.wikitext = wikitext_eval_data(config)

    def split(self, split: str, dataset, step: int) -> None:
        config = self.config
        if dataset is None or config.eval_iters == 0:
            return
        if split not in self.loaders:
            self.loaders[split] = make_loader(
                dataset, config.eval_iters * config.global_batch, 0, config, self.runtime
            )
        result = evaluate(
            self.train_model, self.loaders[split], config, self.runtime, self.precision,
            self.next_sentence,
        )  # fmt: skip
        record = {"kind": "eval", "split": split, "step": step, **result}
        self.metrics.write(record)
        self.console.print(format_eval_line(split, record))

    def wikitext_task(self, step: int) -> None:
        """The WikiText task of train/evaluate.py on the model being trained, every rank of
        a data-parallel group scoring its share of the windows."""
        if self.wikitext is None:
            return
        from train.eval.run import perplexity_of_ids
        from train.eval.scoring import Partition

        config, runtime = self.config, self.runtime
        ids, word_tokens = self.wikitext
        group = runtime.mesh["dp"].get_group() if runtime.mesh is not None else None

        def loss_of(inputs, targets):
            batch = {"input_ids": inputs, "labels": targets, "loss_mask": targets != -100}
            with self.precision.autocast(), loss_context(self.parallel_loss):
                return _causal_lm_loss(self.train_model, batch, self.parallel_loss)

        result = perplexity_of_ids(
            self.model,
            ids,
            context=config.seq_len,
            stride=max(1, config.seq_len // 2),
            batch_size=config.micro_batch,
            partition=Partition(runtime.dp_rank, runtime.dp_size, group),
            word_tokens=word_tokens,
            loss_of=loss_of,
        )
        self.train_model.train()
        record = {"kind": "eval", "split": "wikitext", "step": step, **result.to_json()}
        self.metrics.write(record)
        self.console.print(
            f"step {step} | wikitext loss {result.loss:.4f} | ppl {result.ppl:.2f} | "
            f"adjusted ppl {result.adjusted_ppl:.2f}"
        )
