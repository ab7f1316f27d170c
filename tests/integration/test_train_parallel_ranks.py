"""train.parallel checks that need several ranks, run by tests/parallel_probe.py under torchrun
(gloo, CPU, 2 processes, tiny models built in the probe)."""

from __future__ import annotations

import json

import pytest

from tests.helpers.train_runs import TORCHRUN, launch

pytestmark = pytest.mark.slow


def probe(check: str, tmp_path) -> dict:
    result = tmp_path / "result.json"
    launch([*TORCHRUN, "--standalone", "--nproc_per_node=2", "tests/parallel_probe.py", check,
            str(result)])  # fmt: skip
    return json.loads(result.read_text())


def test_fsdp_accumulation_keeps_no_unsharded_gradients(tmp_path):
    """Between micro-batches FSDP2 reduce-scatters into sharded gradients; with gradient sync
    off (the loop's former no_sync) it keeps unsharded ones and .grad stays unset."""
    sharded = probe("fsdp-accumulation", tmp_path)["sharded_after_first_micro_batch"]
    assert sharded and all(sharded.values()), sharded


def test_meta_device_build_gives_the_eager_weights_shard_by_shard(tmp_path):
    found = probe("meta-init", tmp_path)
    for layout in ("fsdp", "tp"):
        wrong = [name for name, ok in found[layout].items() if not ok]
        assert found[layout] and not wrong, (layout, wrong)
        assert found[f"{layout}/tied"]  # the LM head is the embedding again
