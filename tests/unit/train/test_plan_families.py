"""train.plan covers every family the registry lists, from each family's own counts: the
parameters it plans equal the built model's (sum of p.numel(), built on the meta device), and
its activation bytes agree with what autograd really keeps for a small model of the family."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tests.helpers.plan_families import built
from tests.measure import saved_activation_bytes
from train.models.presets import get_preset
from train.models.registry import SPECS, get_spec
from train.plan import MASK_PROB, Layout, activation_bytes, main, plan, plan_counts

SMALL = [name for spec in SPECS.values() for name in spec.presets if "tiny" in name or "cpu" in name]


@pytest.mark.parametrize("name", [*SMALL, "bert-large"])
def test_planned_parameters_are_the_built_models(name):
    config = get_preset(name).config
    model = built(config)
    assert plan(config, Layout()).params == sum(p.numel() for p in model.parameters())
    assert plan_counts(config).block_params == sum(p.numel() for p in model.blocks[0].parameters())


def test_every_family_has_small_presets_planned():
    assert {get_preset(name).model for name in SMALL} == set(SPECS)


def _batch(name: str, config, seq: int, rows: int) -> dict:
    ids = torch.randint(0, config.vocab_size, (rows, seq))
    if get_preset(name).model == "bert":  # the trainer's masked LM: labels at MASK_PROB
        positions = torch.arange(seq).expand(rows, seq)[:, : int(seq * MASK_PROB)]
        labels = torch.gather(ids, 1, positions)
        return {"input_ids": ids, "mlm_labels": labels, "mlm_positions": positions}
    return {"input_ids": ids, "targets": ids}


@pytest.mark.parametrize("name", ["gpt-tiny", "bert-tiny", "llama-tiny"])
def test_planned_activations_agree_with_what_autograd_keeps(name):
    """Blocks measured (a 128-token vocabulary keeps the logits, planned alike for every
    family, out of the comparison)."""
    spec = get_spec(get_preset(name).model)
    config = spec.reshape(get_preset(name).config, {"num_layers": 4, "dropout": 0.0})
    config = dataclasses.replace(config, vocab_size=128)
    torch.manual_seed(0)
    model = spec.build(config)
    seq = spec.positions(config)
    layout = Layout(seq_len=seq, micro_batch=2, activation_bytes=4)
    predicted = activation_bytes(config, layout)
    batch = _batch(name, config, seq, 2)
    measured = saved_activation_bytes(model, lambda: model(**batch))
    assert abs(measured - predicted) / measured < 0.15, (measured, predicted)


@pytest.mark.parametrize("name", ["llama-small-cpu", "bert-large"])
def test_the_cli_plans_every_family(name, capsys):
    assert main(["--preset", name, "--gpu", "a100-40gb"]) == 0
    out = capsys.readouterr().out.splitlines()
    config = get_preset(name).config
    params = sum(p.numel() for p in built(config).parameters())
    assert out[0].startswith(f"{name}: {params / 1e9:.3f}B parameters (L={config.n_layer}, ")
    assert out[-2].startswith("a100-40gb: fits")
