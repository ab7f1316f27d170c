"""Sharded checkpoints under torchrun (gloo, CPU): a checkpoint saved at one parallel layout
resumes at another with the same losses, no rank's memory holds the full optimizer state while
saving or resuming, async checkpoints, offline export, and a second job refused on an old --out.

Data: the Moby-Dick shard set of tests/shard_fixtures.py (real text, GPT-2 BPE).
"""

from __future__ import annotations

import json
import subprocess

import pytest
import torch

from tests.conftest import REPO
from tests.helpers.train_runs import COMMON, TORCHRUN, env, launch, losses, torchrun
from train import checkpoint as ckpt

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def gpt_shards(tmp_path_factory) -> str:
    from tests.shard_fixtures import make_gpt_shards

    return make_gpt_shards(tmp_path_factory.mktemp("dcp-data"), 200)


def test_save_at_tp2_resume_at_dp2_gives_the_same_losses(gpt_shards, tmp_path):
    """DCP at (tp=2, dp=1), resumed with FSDP2 at (tp=1, dp=2); fp32, 1e-5 (as the TP and FSDP
    equivalence tests of test_train_distributed). The tp=2 run pads the vocabulary to 256; the
    resumed one keeps the checkpoint's size though its own padding would be 128."""
    whole = tmp_path / "whole"
    torchrun(gpt_shards, whole, "--parallel", "tp", "--tp", "2")
    split = tmp_path / "split"
    torchrun(gpt_shards, split, "--parallel", "tp", "--tp", "2", "--stop-at", "3",
             "--save-interval", "2", "--async-checkpoint")  # fmt: skip
    # the async step-2 checkpoint was committed by the step-3 save
    assert [s for s, _ in ckpt.list_checkpoints(str(split))] == [2, 3]
    output = torchrun(gpt_shards, split, "--parallel", "fsdp", "--resume")
    assert "(fsdp, dp=2, tp=1)" in output and "step-00000003 at step 3" in output
    assert "vocab 50432" in output  # 50257 padded for tp=2, kept at tp=1
    expected, got = losses(whole), losses(split)
    assert len(got) == len(expected) == 8
    assert max(abs(a - b) for a, b in zip(got, expected)) < 1e-5

    # offline export of the sharded checkpoint: one file, and a Hugging Face directory
    final = ckpt.latest_checkpoint(str(split))
    subprocess.run(
        [str(REPO / "tools" / "convert"), "checkpoint-to-torch", final, str(tmp_path / "m.pt")],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    consolidated = torch.load(tmp_path / "m.pt", weights_only=True)
    assert consolidated["model"]["wte.weight"].shape == (50432, 64)
    assert consolidated["trainer"]["step"] == 6


def test_no_rank_holds_the_full_optimizer_state_while_saving_or_resuming(tmp_path):
    """tests/dcp_memory_probe.py: 19M parameters, FSDP2 on 2 ranks. Gathering full state to
    one rank (the previous checkpoint format) needs at least the full AdamW moments (151 MB)
    on top; sharded DCP stays within a fraction of one rank's half."""
    result = tmp_path / "peaks.json"
    launch(
        [*TORCHRUN, "--standalone", "--nproc_per_node=2", "tests/dcp_memory_probe.py",
         str(tmp_path / "run"), str(result)],
    )  # fmt: skip
    peaks = json.loads(result.read_text())
    full = peaks["optimizer_state"]
    assert full > 100e6
    for operation in ("save", "load"):
        assert max(peaks[operation]) < full / 4, (operation, peaks)


def test_a_second_job_with_another_config_on_an_old_out_is_refused(gpt_shards, tmp_path):
    """torchrun without --standalone or --rdzv-id gives every job the run id "none": two jobs
    must still be told apart (the trainer's job id lives in the job's own rendezvous store).
    Without --resume a new job is refused; with --resume but another --global-batch too."""
    launcher = ["--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0", "--nnodes", "1"]

    def job(*flags: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*TORCHRUN, *launcher, "--nproc_per_node=2", "train/pretrain.py", "--data",
             gpt_shards, "--out", str(tmp_path), *COMMON, "--max-steps", "2", *flags],
            cwd=REPO, env=env(), capture_output=True, text=True, timeout=600,
        )  # fmt: skip

    first = job("--stop-at", "1")
    assert first.returncode == 0, first.stderr[-3000:]
    second = job()
    assert second.returncode != 0 and "already holds checkpoints" in second.stderr
    third = job("--resume", "--global-batch", "4", "--micro-batch", "1")
    assert third.returncode != 0
    assert "saved with --global-batch 8, this run has --global-batch 4" in third.stderr
    assert 'train/loop.py", line' not in third.stderr  # one line, no trainer traceback
