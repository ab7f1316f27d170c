"""Runs of the trainer for the tests that compare parallel layouts: train/pretrain.py in one
process or under torchrun (gloo, CPU), the flags every such run shares, and its losses.

Every run uses the same global batch, seeds and data, fp32 with --deterministic, so that a
parallel run's losses can be compared with its one-process reference (max_difference).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import REPO

TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
COMMON = [
    "--seq-len", "32", "--global-batch", "8", "--micro-batch", "2", "--max-steps", "6",
    "--split", "90,5,5", "--eval-iters", "1", "--no-progress", "--log-interval", "1000",
    "--lr", "3e-3", "--warmup-steps", "1", "--deterministic", "--precision", "fp32",
    "--device", "cpu",
]  # fmt: skip


def env(**extra: str) -> dict:
    environment = dict(os.environ)
    environment.pop("RANK", None)
    environment.pop("WORLD_SIZE", None)
    environment.update(OMP_NUM_THREADS="1", RAYON_NUM_THREADS="1", **extra)
    return environment


def launch(argv: list[str], environment: dict | None = None, timeout: int = 600) -> str:
    result = subprocess.run(
        argv, cwd=REPO, env=environment or env(), capture_output=True, text=True, timeout=timeout
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    return output


def single(data: str, out, *flags: str, **extra_env: str) -> list[float]:
    launch(
        [sys.executable, "train/pretrain.py", "--data", data, "--out", str(out), *COMMON, *flags],
        env(**extra_env),
    )
    return losses(out)


def torchrun(data: str, out, *flags: str, nproc: int = 2, launcher=(), faults=()) -> str:
    """``faults``: flags of tests/train_with_faults.py, which then runs the trainer."""
    script = ["tests/train_with_faults.py", *faults, "--"] if faults else ["train/pretrain.py"]
    return launch(
        [*TORCHRUN, "--standalone", f"--nproc_per_node={nproc}", *launcher, *script,
         "--data", data, "--out", str(out), *COMMON, *flags],
    )  # fmt: skip


def losses(out) -> list[float]:
    """Per-step train losses, then the final valid and test losses."""
    with open(os.path.join(out, "metrics.jsonl")) as f:
        records = list(map(json.loads, f))
    train = [r["loss"] for r in records if r["kind"] == "train"]
    evals = [r["loss"] for r in records if r["kind"] == "eval"]
    assert len(evals) == 2  # valid and test, once, at the end
    return train + evals


def max_difference(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b) == 8  # 6 steps, valid, test
    return max(abs(x - y) for x, y in zip(a, b))


# tp=2 pads the vocabulary to a multiple of 256: one-process runs to compare with must pad alike
PAD_FOR_TP = ["--make-vocab-size-divisible-by", "256"]
