"""torch.compile of a tiny BERT and GPT: one graph, no recompilation over 10 training steps
whose masks, masked positions and document boundaries change from step to step (the static
shapes of the hot path). Dynamo's own counters; the aot_eager backend traces exactly what
inductor would be given, without building kernels (seconds on a CPU)."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from train.models.bert import Bert, BertConfig
from train.models.gpt import GPT, GPTConfig

STEPS, BATCH, SEQ = 10, 4, 32


def compiled_steps(model: torch.nn.Module, batches) -> dict:
    """Train ``model`` compiled over ``batches``; dynamo's frame and graph counts after it."""
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, backend="aot_eager")
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    graphs_after_warmup = None
    for step, args in enumerate(batches):
        loss = compiled(*args[0], **args[1])
        loss = loss.loss if hasattr(loss, "loss") else loss[1]
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step == 2:
            graphs_after_warmup = counters["stats"]["unique_graphs"]
    return {
        "graphs": counters["stats"]["unique_graphs"],
        "graphs_after_warmup": graphs_after_warmup,
        "recompiles": sum(counters["recompiles"].values()),
        "graph_breaks": sum(counters["graph_break"].values()),
    }


def bert_batches(vocab: int):
    generator = torch.Generator().manual_seed(0)
    for _ in range(STEPS):
        ids = torch.randint(0, vocab, (BATCH, SEQ), generator=generator)
        lengths = torch.randint(6, SEQ + 1, (BATCH,), generator=generator)
        mask = (torch.arange(SEQ) < lengths[:, None]).long()  # padding varies per step
        labels = torch.full((BATCH, SEQ), -100)
        for row in range(BATCH):
            count = int(torch.randint(0, 6, (), generator=generator))  # 0 to 5 predictions
            where = torch.randperm(int(lengths[row]), generator=generator)[:count]
            labels[row, where] = torch.randint(0, vocab, (where.numel(),), generator=generator)
        # fixed-size targets as BertDataset makes them: positions in order, padded with 0/-100
        order = torch.sort((labels == -100).to(torch.int8), dim=1, stable=True).indices
        positions = order[:, :5]
        targets = labels.gather(1, positions)
        positions = positions.masked_fill(targets == -100, 0)
        nsp = torch.randint(0, 2, (BATCH,), generator=generator)
        yield (ids, None, mask, targets, nsp), {"mlm_positions": positions}


def gpt_batches(vocab: int, eod: int):
    generator = torch.Generator().manual_seed(0)
    for _ in range(STEPS):
        ids = torch.randint(0, vocab - 1, (BATCH, SEQ + 1), generator=generator)
        # documents end at different places each step; the loss skips the end-of-document target
        ends = torch.rand(BATCH, SEQ + 1, generator=generator) < 0.1
        ids[ends] = eod
        inputs, targets = ids[:, :-1], ids[:, 1:].clone()
        loss_mask = (inputs != eod).long()
        targets[torch.rand(BATCH, SEQ, generator=generator) < 0.05] = -100
        yield (inputs, targets, loss_mask), {}


@pytest.mark.parametrize("kind", ["bert", "gpt"])
def test_compiles_once_and_never_recompiles(kind):
    torch.manual_seed(0)
    if kind == "bert":
        config = BertConfig(vocab_size=96, n_layer=2, n_head=2, n_embd=32, intermediate_size=64,
                            max_position_embeddings=SEQ, dropout=0.1)  # fmt: skip
        found = compiled_steps(Bert(config).train(), bert_batches(config.vocab_size))
    else:
        config = GPTConfig(vocab_size=96, n_layer=2, n_head=2, n_embd=32, block_size=SEQ,
                           dropout=0.1)  # fmt: skip
        found = compiled_steps(GPT(config).train(), gpt_batches(config.vocab_size, eod=95))
    assert found["graphs"] == 1, found  # the whole forward is one graph
    assert found["graphs_after_warmup"] == found["graphs"]
    assert found["recompiles"] == 0, found
    assert found["graph_breaks"] == 0, found
