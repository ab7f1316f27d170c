"""train.optim: weight-decay groups, LAMB against a transcription of FusedLAMB and against the
per-parameter LAMB it replaced, the lr schedule, clipping. (LAMB under FSDP2 and TP:
test_train_distributed.py and test_train_parallel_probes.py.)"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn

from tests.helpers.lamb import TINY_GPT, PerParameterLamb, run_lamb
from train.models.gpt import GPT
from train.models.presets import build_model
from train.optim import (
    Lamb,
    LRSchedule,
    batched_global_norms,
    build_optimizer,
    clip_grads_,
    grad_norm,
    param_groups,
    scale_grads_,
)


def _names(model: nn.Module, group: dict) -> set[str]:
    ids = {id(p) for p in group["params"]}
    return {n for n, p in model.named_parameters() if id(p) in ids}


def test_gpt_groups_exclude_norms_and_biases_and_count_the_tied_head_once():
    model = build_model("gpt-tiny", vocab_size=256)
    groups = {g["name"]: g for g in param_groups(model, weight_decay=0.1)}
    assert set(groups) == {"decay", "no_decay"}
    decay, no_decay = _names(model, groups["decay"]), _names(model, groups["no_decay"])
    assert groups["decay"]["weight_decay"] == 0.1 and groups["no_decay"]["weight_decay"] == 0.0
    assert "wte.weight" in decay and "wpe.weight" in decay
    assert "blocks.0.attn.q_proj.weight" in decay and "blocks.1.mlp.fc_out.weight" in decay
    assert "blocks.0.ln_1.weight" in no_decay and "ln_f.bias" in no_decay
    assert "blocks.0.attn.q_proj.bias" in no_decay
    assert not decay & no_decay
    # lm_head.weight is wte.weight: one parameter, in one group, once
    total = sum(len(g["params"]) for g in groups.values())
    assert total == len(list(model.parameters()))


def test_embeddings_excluded_when_configured():
    model = build_model("bert-tiny", vocab_size=256)
    groups = {g["name"]: g for g in param_groups(model, 0.01, decay_embeddings=False)}
    no_decay = _names(model, groups["no_decay"])
    assert {"wte.weight", "wpe.weight", "wtt.weight", "ln_emb.weight"} <= no_decay
    assert "mlm_head.dense.weight" in _names(model, groups["decay"])


def fused_lamb_reference(weights, grads_per_step, groups, lr, betas, eps, max_grad_norm, nvlamb):
    """An independent float64 transcription of apex's FusedLAMB (multi_tensor_lamb, adam_w_mode,
    grad_averaging): per step, g /= max(1, global ||g|| / max_grad_norm); m, v with bias
    correction; u = m_hat / (sqrt(v_hat) + eps) + wd * w; w -= lr * r * u with
    r = ||w|| / ||u|| where (nvlamb or wd != 0) and both norms > 0, else r = 1."""
    b1, b2 = betas
    w = [x.double().clone() for x in weights]
    m = [torch.zeros_like(x) for x in w]
    v = [torch.zeros_like(x) for x in w]
    for t, grads in enumerate(grads_per_step, start=1):
        g = [x.double() for x in grads]
        total = math.sqrt(sum(float((x * x).sum()) for x in g))
        divisor = max(1.0, total / max_grad_norm) if max_grad_norm > 0 else 1.0
        for i, wd in enumerate(groups):
            gi = g[i] / divisor
            m[i] = b1 * m[i] + (1 - b1) * gi
            v[i] = b2 * v[i] + (1 - b2) * gi * gi
            u = (m[i] / (1 - b1**t)) / ((v[i] / (1 - b2**t)).sqrt() + eps) + wd * w[i]
            wn, un = float(w[i].norm()), float(u.norm())
            r = wn / un if (nvlamb or wd != 0) and wn > 0 and un > 0 else 1.0
            w[i] = w[i] - lr * r * u
    return w


@pytest.mark.parametrize("nvlamb", [False, True])
def test_lamb_matches_fused_lamb_over_25_steps(nvlamb):
    """Random weights and gradients (some steps with a global norm above max_grad_norm, some
    below), a decayed matrix and two undecayed tensors, as a model's groups have."""
    torch.manual_seed(0)
    shapes, decays = [(8, 6), (6,), (5, 3)], [0.01, 0.0, 0.0]
    weights = [torch.randn(s) for s in shapes]
    grads_per_step = [[torch.randn(s) * (0.05 if t % 3 else 2.0) for s in shapes]
                      for t in range(25)]  # fmt: skip
    params = [nn.Parameter(w.clone()) for w in weights]
    groups = [{"params": [p], "weight_decay": wd} for p, wd in zip(params, decays)]
    hyper = dict(lr=0.02, betas=(0.9, 0.999), eps=1e-6, max_grad_norm=1.0, nvlamb=nvlamb)
    optimizer = Lamb(groups, **hyper)
    for grads in grads_per_step:
        for p, g in zip(params, grads):
            p.grad = g.clone()
        optimizer.step()
    expected = fused_lamb_reference(weights, grads_per_step, decays, **hyper)
    for p, e in zip(params, expected):
        torch.testing.assert_close(p.detach().double(), e, atol=1e-5, rtol=1e-5)
    # the undecayed tensors moved by plain lr x Adam steps unless nvlamb scales them
    other = fused_lamb_reference(weights, grads_per_step, decays, **{**hyper, "nvlamb": not nvlamb})
    assert not torch.allclose(params[1].detach().double(), other[1], atol=1e-4)


@pytest.mark.parametrize("nvlamb", [False, True])
def test_multi_tensor_lamb_equals_the_per_parameter_one_over_25_steps(nvlamb):
    """On a model's real parameter groups (decayed matrices, undecayed biases and norms)."""
    torch.manual_seed(0)
    model = GPT(TINY_GPT)
    start = copy.deepcopy(model)
    reference = copy.deepcopy(model)
    run_lamb(Lamb, model, 25, nvlamb)
    run_lamb(PerParameterLamb, reference, 25, nvlamb)
    assert max_difference(model, reference) < 1e-6
    assert max_difference(model, start) > 1e-2  # the steps did move the weights


def max_difference(a: nn.Module, b: nn.Module) -> float:
    return max((x - y).abs().max().item() for x, y in zip(a.parameters(), b.parameters()))


def test_lamb_without_clipping_matches_fused_lamb_on_large_gradients():
    """max_grad_norm=0 turns clipping off: gradients with a global norm far above 1 move the
    weights as the unclipped reference does, not as the clipped one."""
    torch.manual_seed(1)
    shapes, decays = [(8, 6), (6,)], [0.01, 0.0]
    weights = [torch.randn(s) for s in shapes]
    grads_per_step = [[torch.randn(s) * 5.0 for s in shapes] for _ in range(5)]
    params = [nn.Parameter(w.clone()) for w in weights]
    hyper = dict(lr=0.02, betas=(0.9, 0.999), eps=1e-6, max_grad_norm=0.0, nvlamb=False)
    optimizer = Lamb([{"params": [p], "weight_decay": wd} for p, wd in zip(params, decays)],
                     **hyper)
    for grads in grads_per_step:
        for p, g in zip(params, grads):
            p.grad = g.clone()
        optimizer.step()
    unclipped = fused_lamb_reference(weights, grads_per_step, decays, **hyper)
    clipped = fused_lamb_reference(weights, grads_per_step, decays, **{**hyper,
                                                                       "max_grad_norm": 1.0})
    for p, u in zip(params, unclipped):
        torch.testing.assert_close(p.detach().double(), u, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(params[1].detach().double(), clipped[1], atol=1e-4)



@pytest.mark.parametrize("max_grad_norm", [0.5, 40.0])
def test_lamb_normalises_gradients_by_their_norm_over_the_bound(max_grad_norm):
    """Gradients are divided by ||g|| / max_grad_norm where that exceeds 1: the large steps
    (global norm ~60) are brought to the bound, the small ones (~0.3) are left as they are, so
    the moments see the bound itself (Adam alone does not see a scale common to every step)."""
    torch.manual_seed(2)
    shapes, decays = [(8, 6), (6,)], [0.01, 0.0]
    weights = [torch.randn(s) for s in shapes]
    grads_per_step = [[torch.randn(s) * scale for s in shapes]
                      for scale in (8.0, 0.04, 8.0, 0.04, 0.04, 8.0)]  # fmt: skip
    params = [nn.Parameter(w.clone()) for w in weights]
    hyper = dict(lr=0.02, betas=(0.9, 0.999), eps=1e-6, max_grad_norm=max_grad_norm,
                 nvlamb=False)
    optimizer = Lamb([{"params": [p], "weight_decay": wd} for p, wd in zip(params, decays)],
                     **hyper)
    for grads in grads_per_step:
        for p, g in zip(params, grads):
            p.grad = g.clone()
        optimizer.step()
    expected = fused_lamb_reference(weights, grads_per_step, decays, **hyper)
    for p, e in zip(params, expected):
        torch.testing.assert_close(p.detach().double(), e, atol=1e-6, rtol=1e-6)
    # a bound of 1 would have given other weights: the bound itself is used, not just 1
    at_one = fused_lamb_reference(weights, grads_per_step, decays, **{**hyper, "max_grad_norm": 1.0})
    assert not torch.allclose(params[1].detach().double(), at_one[1], atol=1e-5)

def test_lamb_step_without_gradients_changes_nothing():
    weight = nn.Parameter(torch.tensor([1.0, -2.0, 3.0]))
    other = nn.Parameter(torch.tensor([0.5]))
    optimizer = Lamb([weight, other], lr=0.1)
    assert optimizer.step(lambda: torch.tensor(7.0)) == torch.tensor(7.0)  # the closure's loss
    assert weight.tolist() == [1.0, -2.0, 3.0] and optimizer.state == {}
    other.grad = torch.tensor([1.0])  # only the parameter with a gradient moves
    optimizer.step()
    assert weight.tolist() == [1.0, -2.0, 3.0] and other.item() != 0.5
    assert list(optimizer.state) == [other]


@pytest.mark.parametrize("bad, fault", [
    ({"lr": 0.0}, "invalid LAMB hyper-parameters"),
    ({"lr": -1e-3}, "invalid LAMB hyper-parameters"),
    ({"eps": 0.0}, "invalid LAMB hyper-parameters"),
    ({"betas": (1.0, 0.999)}, "invalid LAMB hyper-parameters"),
    ({"betas": (0.9, -0.1)}, "invalid LAMB hyper-parameters"),
    ({"betas": (0.9, 1.0)}, "invalid LAMB hyper-parameters"),
    ({"max_grad_norm": -1.0}, "max_grad_norm must be >= 0"),
])
def test_lamb_refuses_bad_hyper_parameters(bad, fault):
    with pytest.raises(ValueError, match=fault):
        Lamb([nn.Parameter(torch.ones(2))], **bad)
    Lamb([nn.Parameter(torch.ones(2))], betas=(0.0, 0.0), max_grad_norm=0.0)  # edges allowed


def test_lamb_trust_ratio_is_one_for_zero_weights():
    weight = nn.Parameter(torch.zeros(3))
    weight.grad = torch.tensor([1.0, -2.0, 0.5])
    Lamb([weight], lr=0.1, weight_decay=0.01).step()
    # Adam's first step is sign(g) (up to eps); trust ratio 1 leaves it unscaled
    torch.testing.assert_close(weight.detach(), -0.1 * torch.sign(weight.grad), atol=1e-5, rtol=0)



def test_lamb_leaves_a_parameter_with_a_zero_update_as_it_is():
    """The trust ratio is 1 where the update's norm is 0 (FusedLAMB's rule), so a parameter
    without a gradient signal stays put under nvlamb, even with weights whose ratio
    ||w|| / ||u|| would overflow float32 and turn 0 x ratio into NaN."""
    weights = torch.tensor([4e9, -3e9])
    weight = nn.Parameter(weights.clone())
    weight.grad = torch.zeros(2)
    Lamb([{"params": [weight], "weight_decay": 0.0}], lr=0.1, nvlamb=True).step()
    expected = fused_lamb_reference([weights], [[torch.zeros(2)]], [0.0], lr=0.1,
                                    betas=(0.9, 0.999), eps=1e-6, max_grad_norm=1.0, nvlamb=True)
    assert torch.equal(weight.detach().double(), expected[0])

def test_lamb_defaults_are_the_bert_records():
    from train.config import parse_args
    from train.loop import Runtime, model_positions, resolve_config

    runtime = Runtime(0, 1, 0, torch.device("cpu"), None, 0, 1, 1)
    lamb = resolve_config(parse_args(["--data", "x", "--optimizer", "lamb"]), runtime,
                          model_positions)  # fmt: skip
    assert (lamb.beta2, lamb.eps, lamb.weight_decay) == (0.999, 1e-6, 0.01)
    adamw = resolve_config(parse_args(["--data", "x"]), runtime, model_positions)
    assert (adamw.beta2, adamw.eps, adamw.weight_decay) == (0.95, 1e-8, 0.1)
    chosen = parse_args(["--data", "x", "--optimizer", "lamb", "--beta2", "0.98",
                         "--weight-decay", "0"])  # fmt: skip
    chosen = resolve_config(chosen, runtime, model_positions)
    assert (chosen.beta2, chosen.eps, chosen.weight_decay) == (0.98, 1e-6, 0.0)


def test_a_zero_clip_norm_leaves_gradients_alone_and_a_norm_at_the_bound_is_not_scaled():
    torch.manual_seed(0)
    params = [nn.Parameter(torch.randn(4, 3)), nn.Parameter(torch.randn(3))]
    for p in params:
        p.grad = torch.randn_like(p) * 3
    before = [p.grad.clone() for p in params]
    total = grad_norm(params)
    clip_grads_(params, 0.0, total)  # 0: no clipping, never a zero scale
    assert all(torch.equal(p.grad, b) for p, b in zip(params, before))
    clip_grads_(params, total, total)  # already at the bound: left as it is
    assert all(torch.equal(p.grad, b) for p, b in zip(params, before))
    clip_grads_(params, total / 2, total)
    assert grad_norm(params) == pytest.approx(total / 2, rel=1e-5)


def test_schedule_warmup_may_last_until_the_decay_ends():
    schedule = LRSchedule(1.0, 0.1, warmup_steps=4, decay_steps=4, decay="cosine")
    assert [schedule(s) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 0.1, 0.1]
    with pytest.raises(ValueError, match="must not exceed"):
        LRSchedule(1.0, 0.1, warmup_steps=5, decay_steps=4, decay="cosine")


def test_lamb_and_build_optimizer_leave_undecayed_parameters_unscaled_by_default():
    """The BERT records' LAMB applies the trust ratio to decayed parameters only (nvlamb off)."""
    def step(**kwargs) -> torch.Tensor:
        bias = nn.Parameter(torch.tensor([3.0, -4.0]))
        bias.grad = torch.tensor([0.5, 0.25])
        Lamb([{"params": [bias], "weight_decay": 0.0}], lr=0.1, **kwargs).step()
        return bias.detach()

    torch.testing.assert_close(step(), step(nvlamb=False))
    assert not torch.allclose(step(), step(nvlamb=True))
    model = build_model("gpt-tiny", vocab_size=256)
    assert build_optimizer(model, "lamb", 1e-3, 0.1, (0.9, 0.999), 1e-6).nvlamb is False


def test_build_optimizer_kinds():
    model = build_model("gpt-tiny", vocab_size=256)
    adamw = build_optimizer(model, "adamw", 1e-3, 0.1, (0.9, 0.95), 1e-8)
    assert isinstance(adamw, torch.optim.AdamW)
    assert [g["weight_decay"] for g in adamw.param_groups] == [0.0, 0.1]
    lamb = build_optimizer(model, "lamb", 1e-3, 0.1, (0.9, 0.999), 1e-6)
    assert isinstance(lamb, Lamb)
    with pytest.raises(ValueError, match="unknown optimizer"):
        build_optimizer(model, "sgd", 1e-3, 0.1, (0.9, 0.95), 1e-8)


def test_schedule_warmup_cosine_and_floor():
    s = LRSchedule(lr=1.0, min_lr=0.1, warmup_steps=10, decay_steps=110, decay="cosine")
    assert s(0) == pytest.approx(0.1)  # (step + 1) / warmup: never a zero-lr first step
    assert s(9) == pytest.approx(1.0)
    assert s(10) == pytest.approx(1.0)
    assert s(60) == pytest.approx(0.55)  # half-way: mean of lr and min_lr
    assert s(110) == pytest.approx(0.1) and s(500) == pytest.approx(0.1)
    values = [s(i) for i in range(10, 111)]
    assert all(a >= b for a, b in zip(values, values[1:]))


def test_schedule_linear_and_no_warmup():
    s = LRSchedule(lr=2.0, min_lr=0.0, warmup_steps=0, decay_steps=4, decay="linear")
    assert [s(i) for i in range(6)] == pytest.approx([2.0, 1.5, 1.0, 0.5, 0.0, 0.0])
    with pytest.raises(ValueError, match="warmup_steps"):
        LRSchedule(1.0, 0.0, warmup_steps=5, decay_steps=4, decay="linear")


def test_schedule_applies_to_every_group():
    model = build_model("gpt-tiny", vocab_size=256)
    optimizer = build_optimizer(model, "adamw", 1e-3, 0.1, (0.9, 0.95), 1e-8)
    lr = LRSchedule(1e-3, 1e-4, 2, 10, "cosine").apply(optimizer, 0)
    assert lr == pytest.approx(5e-4)
    assert all(g["lr"] == lr for g in optimizer.param_groups)


def test_grad_norm_and_clipping_match_torch():
    torch.manual_seed(0)
    model = build_model("gpt-tiny", vocab_size=256)
    ids = torch.randint(0, 256, (2, 16))
    model(ids, ids)[1].backward()
    reference = [p.grad.clone() for p in model.parameters()]
    norm = grad_norm(model.parameters())
    expected = torch.nn.utils.get_total_norm(reference).item()
    assert norm == pytest.approx(expected, rel=1e-6)
    clip_grads_(list(model.parameters()), 0.5, norm)
    for p, r in zip(model.parameters(), reference):
        torch.testing.assert_close(p.grad, r * (0.5 / (expected + 1e-6)))
    assert grad_norm(model.parameters()) == pytest.approx(0.5, rel=1e-4)


def test_grad_norm_sees_inf_and_scale_grads():
    a, b = nn.Parameter(torch.ones(3)), nn.Parameter(torch.ones(2))
    a.grad, b.grad = torch.full((3,), 2.0), torch.full((2,), 2.0)
    scale_grads_([a, b], 0.5)
    assert grad_norm([a, b]) == pytest.approx(math.sqrt(5))
    b.grad[0] = math.inf
    assert math.isinf(grad_norm([a, b]))
    b.grad[0] = math.nan
    assert math.isnan(grad_norm([a, b]))
    assert grad_norm([nn.Parameter(torch.ones(1))]) == 0.0  # no gradients at all


def test_clipping_equals_torchs_on_gradients_of_small_norm():
    """At a global norm of 1e-3 torch's 1e-6 guard in the factor is a 0.1% difference: ours
    must scale exactly as torch.nn.utils.clip_grad_norm_ does."""
    torch.manual_seed(3)
    ours = [nn.Parameter(torch.randn(5, 4)), nn.Parameter(torch.randn(4))]
    theirs = [nn.Parameter(p.detach().clone()) for p in ours]
    for a, b in zip(ours, theirs):
        a.grad = torch.randn_like(a) * 2e-4
        b.grad = a.grad.clone()
    total = grad_norm(ours)
    assert 5e-4 < total < 2e-3
    clip_grads_(ours, total / 2, total)
    torch.nn.utils.clip_grad_norm_(theirs, total / 2)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-6, atol=0)


def test_batched_global_norms_of_one_tensor_and_of_several():
    tensors = [torch.tensor([3.0, 4.0]), torch.tensor([[1.0, 2.0], [2.0, 4.0]]), torch.zeros(3)]
    assert batched_global_norms(tensors[:1]).tolist() == [5.0]
    assert batched_global_norms(tensors).tolist() == [5.0, 5.0, 0.0]


def test_build_optimizer_decays_embeddings_unless_told_not_to():
    model = build_model("gpt-tiny", vocab_size=256)
    embedding = next(m.weight for m in model.modules() if isinstance(m, nn.Embedding))
    for optimizer, decayed in ((build_optimizer(model, "lamb", 1e-3, 0.1, (0.9, 0.999), 1e-6), True),
                               (build_optimizer(model, "lamb", 1e-3, 0.1, (0.9, 0.999), 1e-6,
                                                decay_embeddings=False), False)):
        group = next(g for g in optimizer.param_groups if any(p is embedding for p in g["params"]))
        assert group["weight_decay"] == (0.1 if decayed else 0.0)


@pytest.fixture
def one_rank_mesh(tmp_path):
    """A real one-process gloo group and its CPU mesh, for DTensor parameters in-process."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/rendezvous", rank=0,
                            world_size=1)
    try:
        yield init_device_mesh("cpu", (1,))
    finally:
        dist.destroy_process_group()


def test_adamw_is_fused_for_plain_parameters_and_not_for_dtensors(one_rank_mesh):
    """The fused AdamW kernel takes plain tensors only: a model with DTensor parameters gets the
    unfused one, and both step."""
    from torch.distributed.tensor import Shard, distribute_tensor

    model = build_model("gpt-tiny", vocab_size=256)
    assert build_optimizer(model, "adamw", 1e-3, 0.1, (0.9, 0.95), 1e-8).defaults["fused"] is True
    sharded = nn.Linear(4, 6)
    sharded.weight = nn.Parameter(distribute_tensor(sharded.weight.detach(), one_rank_mesh,
                                                    [Shard(0)]))
    sharded.bias = nn.Parameter(distribute_tensor(sharded.bias.detach(), one_rank_mesh,
                                                  [Shard(0)]))
    optimizer = build_optimizer(sharded, "adamw", 1e-2, 0.1, (0.9, 0.95), 1e-8)
    assert optimizer.defaults["fused"] is None
    before = sharded.weight.full_tensor().clone()
    for param in sharded.parameters():
        param.grad = distribute_tensor(torch.ones(param.shape), one_rank_mesh, [Shard(0)])
    optimizer.step()
    assert not torch.equal(sharded.weight.full_tensor(), before)


def test_grad_norm_of_dtensor_gradients(one_rank_mesh):
    from torch.distributed.tensor import Shard, distribute_tensor

    plain = nn.Parameter(torch.ones(2))
    plain.grad = torch.tensor([3.0, 0.0])
    sharded = nn.Parameter(distribute_tensor(torch.ones(4), one_rank_mesh, [Shard(0)]))
    sharded.grad = distribute_tensor(torch.tensor([0.0, 4.0, 0.0, 12.0]), one_rank_mesh, [Shard(0)])
    assert grad_norm([plain, sharded]) == pytest.approx(13.0)
    assert grad_norm([sharded]) == pytest.approx(math.sqrt(160.0))
