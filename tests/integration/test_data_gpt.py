"""The tests of tests/unit/train/data/test_data_gpt.py that start a process or run a Beam pipeline (that file
holds the in-process ones and says what they cover)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO
from tests.shard_fixtures import make_gpt_shards


@pytest.fixture(scope="module")
def gpt_set(tmp_path_factory):
    return make_gpt_shards(tmp_path_factory.mktemp("gpt"), n_docs=240, num_shards=3)


@pytest.mark.slow
def test_distributed_ranks_build_once_per_node(gpt_set, tmp_path):
    """Two gloo ranks: local rank 0 builds the index, rank 1 waits and reads the same files."""
    script = textwrap.dedent(
        f"""
        import json, os, sys
        sys.path.insert(0, {str(REPO)!r})
        import torch.distributed as dist
        from train.data import build_gpt_datasets, gpt_dataset
        calls = []
        real = gpt_dataset.build_gpt_indices
        gpt_dataset.build_gpt_indices = lambda *a, **k: calls.append(1) or real(*a, **k)
        dist.init_process_group("gloo", init_method="file://{tmp_path}/rendezvous",
                                rank=int(os.environ["RANK"]), world_size=2)
        ds = build_gpt_datasets([(1.0, {gpt_set!r})], seq_len=32, split="1", seed=11,
                                num_samples={{"train": 500}}, cache_dir={str(tmp_path / "c")!r})
        out = {{"builds": len(calls), "first": ds["train"][0]["input_ids"].tolist()}}
        json.dump(out, open(os.path.join({str(tmp_path)!r}, os.environ["RANK"] + ".json"), "w"))
        dist.destroy_process_group()
        """
    )
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", script],
            env={**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank)},
        )
        for rank in range(2)
    ]
    assert [p.wait(timeout=300) for p in processes] == [0, 0]
    results = [json.loads((tmp_path / f"{rank}.json").read_text()) for rank in range(2)]
    assert [r["builds"] for r in results] == [1, 0]
    assert results[0]["first"] == results[1]["first"]
