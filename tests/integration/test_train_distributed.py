"""torchrun jobs on CPU (gloo): DDP, FSDP2 and tensor parallelism against one process, a job that
loses a rank and restarts itself from its last checkpoint, and torch.compile.

Every parallel run uses the same global batch, seeds and data as its one-process reference,
fp32 with --deterministic. Tolerances (absolute, on per-step losses around 10):

* DDP 1e-6: the same arithmetic except how gradients are summed (an all-reduce of two
  halves instead of one accumulation), float32 rounding of the order of 1e-7 per step;
* FSDP2 and TP 1e-5: these also change the order of reductions inside the forward pass
  (reduce-scatter of gradient shards; row-parallel matmuls summed over ranks; vocab-parallel
  embedding), and Adam divides by sqrt(v) of tiny second moments in the first steps, which
  can scale a 1e-7 gradient difference up by a few orders of magnitude for some weights.
  Seen here: max differences of 5e-7 over 6 steps, so 1e-5 still catches any real error (a
  wrong shard, a missing all-reduce, an untied head all change step-2 losses by > 1e-3).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time

import pytest

from tests.conftest import REPO
from tests.helpers.train_runs import (
    COMMON,
    PAD_FOR_TP,
    TORCHRUN,
    env,
    losses,
    max_difference,
    single,
    torchrun,
)

pytestmark = pytest.mark.slow

@pytest.fixture(scope="module")
def reference(gpt_shards, tmp_path_factory) -> list[float]:
    return single(gpt_shards, tmp_path_factory.mktemp("one-process"))


@pytest.fixture(scope="module")
def reference_padded(gpt_shards, tmp_path_factory) -> list[float]:
    return single(gpt_shards, tmp_path_factory.mktemp("one-process-256"), *PAD_FOR_TP)


def test_ddp_matches_one_process(gpt_shards, reference, tmp_path):
    output = torchrun(gpt_shards, tmp_path, "--parallel", "ddp")
    assert "2 process(es) on cpu (ddp, dp=2, tp=1)" in output
    assert "micro 2 x dp 2 x accumulation 2" in output
    assert max_difference(losses(tmp_path), reference) < 1e-6
    assert reference[-1] < reference[0] - 0.5  # it trains


def test_fsdp_matches_one_process(gpt_shards, reference, tmp_path):
    output = torchrun(gpt_shards, tmp_path, "--parallel", "fsdp")
    assert "(fsdp, dp=2, tp=1)" in output
    assert max_difference(losses(tmp_path), reference) < 1e-5


def test_tensor_parallel_matches_one_process(gpt_shards, reference_padded, tmp_path):
    output = torchrun(gpt_shards, tmp_path, "--parallel", "tp", "--tp", "2")
    assert "(tp, dp=1, tp=2)" in output
    assert max_difference(losses(tmp_path), reference_padded) < 1e-5


def test_bert_tensor_parallel_matches_one_process(bert_shards, tmp_path):
    """BERT's vocab-parallel MLM decoder has its own bias; dropout off so runs can match."""
    flags = ["--model", "bert", "--dropout", "0", "--seq-len", "48"]
    expected = single(bert_shards, tmp_path / "one", *flags, *PAD_FOR_TP)
    torchrun(bert_shards, tmp_path / "tp", *flags, "--parallel", "tp", "--tp", "2")
    assert max_difference(losses(tmp_path / "tp"), expected) < 1e-5


def test_fsdp_over_tensor_parallel_on_four_ranks(gpt_shards, reference_padded, tmp_path):
    """2-D: tp=2 inside each pair of ranks, FSDP2 across the two pairs (dp=2)."""
    output = torchrun(gpt_shards, tmp_path, "--parallel", "tp", "--tp", "2", nproc=4)
    assert "4 process(es) on cpu (tp, dp=2, tp=2)" in output
    assert max_difference(losses(tmp_path), reference_padded) < 1e-5


def test_overflow_on_one_fsdp_rank_is_skipped_by_all(gpt_shards, tmp_path):
    """The skip decision comes from the global grad norm: an inf in rank 1's shard alone makes
    every rank skip, exactly as an inf on every rank does (else rank 0's shard would move)."""
    flags = ["--parallel", "fsdp", "--precision", "fp16", "--seq-len", "16", "--max-steps", "4"]
    torchrun(gpt_shards, tmp_path / "one", *flags, faults=["--grad-fault", "3:inf@1"])
    torchrun(gpt_shards, tmp_path / "all", *flags, faults=["--grad-fault", "3:inf"])
    with open(tmp_path / "one" / "metrics.jsonl") as f:
        records = [r for r in map(json.loads, f) if r["kind"] == "train"]
    assert [r.get("skip") for r in records] == [None, None, "overflow", None]
    assert records[3]["loss_scale"] == 2.0**15 and records[3]["skipped"]["overflow"] == 1
    assert losses(tmp_path / "one") == losses(tmp_path / "all")


def test_checkpoints_move_between_parallelisms(gpt_shards, reference_padded, tmp_path):
    """Full state dicts: DDP writes step 2, FSDP2 resumes and writes step 4, TP finishes.

    The padded vocabulary must stay the same: 128 x tp=2 for the TP run is 256 for the others.
    """
    torchrun(gpt_shards, tmp_path, *PAD_FOR_TP, "--parallel", "ddp", "--stop-at", "2")
    torchrun(gpt_shards, tmp_path, *PAD_FOR_TP, "--parallel", "fsdp", "--resume", "--stop-at", "4")
    output = torchrun(gpt_shards, tmp_path, "--parallel", "tp", "--tp", "2", "--resume")
    assert "resumed from" in output and "step-00000004 at step 4" in output
    assert max_difference(losses(tmp_path), reference_padded) < 1e-5


def test_killed_rank_restarts_from_the_last_checkpoint(gpt_shards, tmp_path):
    """torchrun --max-restarts 1 with torch's default shared rendezvous store: without the
    trainer's per-attempt store (train.runtime.attempt_store) the restarted gloo group reads the
    dead attempt's addresses and fails or hangs (3 of 3 tries here)."""
    unbroken = tmp_path / "unbroken"
    torchrun(gpt_shards, unbroken, "--save-interval", "2")
    marker = tmp_path / "killed-once"
    output = torchrun(
        gpt_shards, tmp_path / "faulty", "--save-interval", "2",
        launcher=["--max-restarts", "1"],
        faults=["--kill-at-step", "3", "--kill-marker", str(marker)],
    )  # fmt: skip
    assert marker.read_text().startswith("rank 1 killed itself after step 3")
    assert "resumed from" in output and "step-00000002 at step 2" in output
    assert "SIGKILL" in output or "Signals.SIGKILL" in output or "exitcode: -9" in output
    # the restarted job dropped the logged step 3 and redid it: one record per step
    assert losses(tmp_path / "faulty") == losses(unbroken)


def exit_codes(output: str) -> list[tuple[str, str]]:
    """(rank, exit code) of every failed worker in torchrun's failure report."""
    return sorted(re.findall(r"rank\s*: (\d+) \(local_rank: \d+\)\s*exitcode\s*: (\d+)", output))


def test_sigterm_on_one_rank_stops_every_rank_at_one_saved_step(gpt_shards, reference, tmp_path):
    """SIGTERM reaches rank 1 only, after step 2: both ranks agree to stop after that step,
    save it, exit 143; the resumed job ends with the uninterrupted run's losses. The DDP
    set-up warns about nothing of ours (torch 2.13 deprecated broadcast_buffers)."""
    result = subprocess.run(
        [*TORCHRUN, "--standalone", "--nproc_per_node=2", "tests/train_with_faults.py",
         "--signal-at-step", "2", "--signal-name", "SIGTERM", "--signal-rank", "1", "--",
         "--data", gpt_shards, "--out", str(tmp_path), *COMMON],
        cwd=REPO, env=env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode != 0  # torchrun reports its workers' 143 as a failure
    assert exit_codes(output) == [("0", "143"), ("1", "143")], output[-3000:]
    assert f"stopped by SIGTERM after step 2: saved {tmp_path}/checkpoints/step-00000002" in output
    assert "relaunch the job with --resume: torchrun [same options] train/pretrain.py" in output
    assert "FutureWarning" not in output and "deprecated" not in output
    assert os.listdir(tmp_path / "checkpoints") == ["step-00000002"]
    output = torchrun(gpt_shards, tmp_path, "--resume")
    assert "step-00000002 at step 2" in output
    assert max_difference(losses(tmp_path), reference) < 1e-6


def test_sigterm_to_torchrun_is_forwarded_and_every_rank_saves(gpt_shards, tmp_path):
    """A scheduler's preemption: SIGTERM to the launcher, which forwards it to both ranks."""
    process = subprocess.Popen(
        [*TORCHRUN, "--standalone", "--nproc_per_node=2", "train/pretrain.py", "--data",
         gpt_shards, "--out", str(tmp_path), *COMMON, "--max-steps", "100000"],
        cwd=REPO, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    metrics, deadline = tmp_path / "metrics.jsonl", time.monotonic() + 300
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 2):
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=120)
    # torchrun re-raises the signal it got (its own traceback, exit 1), with no worker report
    assert process.returncode != 0 and "Received 15 death signal" in output
    step = int(re.search(r"stopped by SIGTERM after step (\d+): saved", output).group(1))
    assert os.listdir(tmp_path / "checkpoints") == [f"step-{step:08d}"]
    with open(metrics) as f:
        assert max(r["step"] for r in map(json.loads, f)) == step


# tp=2 pads to 128 x 2 by itself; the others are told to pad alike
@pytest.mark.parametrize(
    "layout", [["--parallel", "fsdp", *PAD_FOR_TP], ["--parallel", "tp", "--tp", "2"]]
)
def test_lamb_under_fsdp_and_tp_matches_one_process(gpt_shards, tmp_path, layout):
    """LAMB's global-norm pre-normalisation and trust ratios need global norms of sharded
    tensors (batched reductions over the mesh): the per-step losses equal one process's."""
    flags = ["--optimizer", "lamb", "--lr", "2e-2"]
    expected = single(gpt_shards, tmp_path / "one", *flags, *PAD_FOR_TP)
    torchrun(gpt_shards, tmp_path / "parallel", *flags, *layout)
    assert max_difference(losses(tmp_path / "parallel"), expected) < 1e-5
    assert expected[5] < expected[0] - 0.1  # it trains


def test_tensor_and_sequence_parallel_match_one_process(gpt_shards, reference_padded, tmp_path):
    """tp=2 with Megatron's sequence parallelism (norms, dropouts and residuals sharded along
    the sequence) and the vocab-parallel loss (logits never gathered): one process's losses."""
    output = torchrun(gpt_shards, tmp_path, "--parallel", "tp", "--tp", "2",
                      "--sequence-parallel")  # fmt: skip
    assert "(tp, dp=1, tp=2)" in output
    assert max_difference(losses(tmp_path), reference_padded) < 1e-5


def test_fsdp_with_activation_checkpointing_matches_one_process(gpt_shards, reference, tmp_path):
    """Selective (attention) checkpointing under FSDP2: recomputed inside the block's unit."""
    torchrun(gpt_shards, tmp_path, "--parallel", "fsdp", "--activation-checkpointing",
             "selective")  # fmt: skip
    assert max_difference(losses(tmp_path), reference) < 1e-5


def test_compile(gpt_shards, tmp_path):
    if shutil.which("g++") is None and shutil.which("c++") is None:
        pytest.skip("torch.compile on CPU needs a C++ compiler")
    plain = single(gpt_shards, tmp_path / "plain", "--max-steps", "3")
    cache = tmp_path / "inductor-cache"
    compiled = single(
        gpt_shards, tmp_path / "compiled", "--max-steps", "3", "--compile",
        TORCHINDUCTOR_CACHE_DIR=str(cache),
    )  # fmt: skip
    # inductor really generated and built kernels for this run
    assert any(p.suffix in (".py", ".so", ".cpp") for p in cache.rglob("*"))
    # compiled kernels fuse and reorder float math: close, not equal
    assert max(abs(a - b) for a, b in zip(plain, compiled)) < 1e-3
