"""Two-rank checks (torchrun, gloo, CPU) of the multi-tensor LAMB and the tensor-parallel
attention-dropout stream. The file is both the tests and, run by torchrun, the probe:

    torchrun --nproc_per_node 2 tests/integration/test_train_parallel_probes.py CHECK RESULT_JSON
"""

from __future__ import annotations

import copy
import json
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def probe(check: str, tmp_path) -> dict:
    from tests.helpers.train_runs import TORCHRUN, launch

    result = tmp_path / "result.json"
    launch([*TORCHRUN, "--standalone", "--nproc_per_node=2", __file__, check, str(result)])
    return json.loads(result.read_text())


@pytest.mark.slow
def test_multi_tensor_lamb_equals_the_per_parameter_one_when_sharded(tmp_path):
    """25 steps on FSDP2 and on tensor-parallel shards (global norms over the mesh, DTensor
    and replicated groups mixed under TP): the weights, gathered, equal the per-parameter
    LAMB's."""
    for layout, found in probe("lamb", tmp_path).items():
        assert found["sharded"], layout  # the layout really split the weights
        assert found["max_difference"] < 1e-6, (layout, found)
        assert found["moved"] > 1e-2, layout


@pytest.mark.slow
def test_attention_dropout_draws_its_own_stream_on_each_tensor_parallel_rank(tmp_path):
    found = probe("tp-dropout", tmp_path)
    # a plain core (what every rank ran before) drops the same elements on both ranks
    assert found["unhooked_ranks_equal"]
    # the tensor-parallel model's cores: different masks per rank ...
    assert not found["hooked_ranks_equal"]
    # ... while the default streams, which the hidden dropouts draw, stay alike on both ranks
    assert found["default_streams_equal_after"]
    # the same default state gives the same mask again (what checkpoint recomputation needs)
    assert found["replay_equal"]
    assert found["eval_ranks_equal"]  # no dropout in evaluation: no fork, same output


# -- the probe (runs under torchrun) ----------------------------------------------------------


def _lamb(layout: str) -> dict:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor

    from tests.helpers.lamb import TINY_GPT, PerParameterLamb, run_lamb
    from train.models.gpt import GPT
    from train.optim import Lamb
    from train.parallel import apply_fsdp, apply_tensor_parallel

    mesh = init_device_mesh("cpu", (2,))
    torch.manual_seed(0)
    start = GPT(TINY_GPT)
    models = [copy.deepcopy(start), copy.deepcopy(start)]
    for model in models:
        if layout == "fsdp":
            apply_fsdp(model, mesh)
        else:
            apply_tensor_parallel(model, mesh)
    run_lamb(Lamb, models[0], 25)
    run_lamb(PerParameterLamb, models[1], 25)

    def full(param):
        return param.full_tensor() if isinstance(param, DTensor) else param

    pairs = list(zip(models[0].parameters(), models[1].parameters()))
    return {
        "sharded": any(isinstance(p, DTensor) for p in models[0].parameters()),
        "max_difference": max((full(a) - full(b)).abs().max().item() for a, b in pairs),
        "moved": max(
            (full(a) - b).abs().max().item()
            for a, b in zip(models[0].parameters(), start.parameters())
        ),
    }


def _tp_dropout() -> dict:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from train.models.bert import Bert, BertConfig
    from train.models.layers import DotProductAttention
    from train.parallel import apply_tensor_parallel

    mesh = init_device_mesh("cpu", (2,))
    config = BertConfig(vocab_size=64, n_layer=1, n_head=4, n_embd=32, intermediate_size=64,
                        max_position_embeddings=16, dropout=0.5)  # fmt: skip
    torch.manual_seed(0)
    model = apply_tensor_parallel(Bert(config), mesh)
    model.train()
    core = model.blocks[0].attn.core
    # identical inputs and identical default streams on both ranks, as tp ranks have them
    torch.manual_seed(1)
    q, k, v = (torch.randn(2, 2, 8, 16) for _ in range(3))

    def same_on_both_ranks(tensor: torch.Tensor) -> bool:
        gathered = [torch.empty_like(tensor) for _ in range(2)]
        dist.all_gather(gathered, tensor.contiguous())
        return torch.equal(gathered[0], gathered[1])

    torch.manual_seed(2)
    unhooked = DotProductAttention(0.5).train()(q, k, v)
    torch.manual_seed(2)
    state = torch.get_rng_state()
    hooked = core(q, k, v)
    after = torch.rand(8)
    torch.set_rng_state(state)
    replay = core(q, k, v)
    core.eval()
    evaluated = core(q, k, v)
    return {
        "unhooked_ranks_equal": same_on_both_ranks(unhooked),
        "hooked_ranks_equal": same_on_both_ranks(hooked),
        "default_streams_equal_after": same_on_both_ranks(after),
        "replay_equal": torch.equal(hooked, replay),
        "eval_ranks_equal": same_on_both_ranks(evaluated),
    }


def main() -> None:
    import torch.distributed as dist

    check, result_path = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    try:
        if check == "lamb":
            found = {layout: _lamb(layout) for layout in ("fsdp", "tp")}
        elif check == "tp-dropout":
            found = _tp_dropout()
        else:
            raise SystemExit(f"unknown check {check!r}")
        if dist.get_rank() == 0:
            with open(result_path, "w") as f:
                json.dump(found, f)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
    from train.runtime import leave_finished_rank

    leave_finished_rank()  # as train/pretrain.py does under torchrun
