"""The tests of tests/unit/train/models/test_models_gpt.py that start a process or run a Beam pipeline (that file
holds the in-process ones and says what they cover)."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.models_gpt import VOCAB, tiny_config, tokens
from train.models.gpt import GPT


def _tensor_parallel_worker(rank: int, port: int, results: dict) -> None:
    import os

    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from train.models.bert import Bert, BertConfig
    from train.parallel import apply_tensor_parallel

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        torch.set_num_threads(1)
        mesh = init_device_mesh("cpu", (2,))
        x = tokens(2, 16, seed=13)
        attention_mask = torch.ones_like(x)
        attention_mask[0, 10:] = 0
        diffs = []
        for build, run in (
            (lambda: GPT(tiny_config()), lambda m: m(x, x)[0]),
            (
                lambda: Bert(BertConfig(vocab_size=VOCAB, n_layer=2, n_head=4, n_embd=32,
                                        intermediate_size=64, max_position_embeddings=16)),
                lambda m: m(x, attention_mask=attention_mask).mlm_logits,
            ),
        ):  # fmt: skip
            torch.manual_seed(0)
            reference = build().eval()
            torch.manual_seed(0)
            sharded = build().eval()
            # the trainer's block plan (Colwise q/k/v/fc_in, Rowwise out_proj/fc_out), not a copy
            apply_tensor_parallel(sharded, mesh, vocab_parallel=False)
            assert sharded.blocks[0].attn.q_proj.weight.to_local().shape == (16, 32)
            diffs.append((run(sharded) - run(reference)).abs().max().item())
        results[rank] = diffs
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_real_tensor_parallel_plan_matches_unsharded_model() -> None:
    """2 CPU ranks (gloo): DTensor ColwiseParallel on q/k/v/fc_in and RowwiseParallel on
    out_proj/fc_out, applied from outside by train.parallel, give the unsharded logits (GPT
    and BERT)."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(_tensor_parallel_worker, args=(port, results), nprocs=2)
        for rank in (0, 1):
            assert all(diff < 1e-5 for diff in results[rank]), dict(results)
