"""The tests of tests/unit/train/test_plan_families.py that start a process or run a Beam pipeline (that file
holds the in-process ones and says what they cover)."""

from __future__ import annotations

import pytest

from tests.helpers.plan_families import built
from train.models.presets import get_preset
from train.plan import main


@pytest.mark.parametrize("name", ["llama-small-cpu", "bert-large"])
def test_the_cli_plans_every_family(name, capsys):
    assert main(["--preset", name, "--gpu", "a100-40gb"]) == 0
    out = capsys.readouterr().out.splitlines()
    config = get_preset(name).config
    params = sum(p.numel() for p in built(config).parameters())
    assert out[0].startswith(f"{name}: {params / 1e9:.3f}B parameters (L={config.n_layer}, ")
    assert out[-2].startswith("a100-40gb: fits")
