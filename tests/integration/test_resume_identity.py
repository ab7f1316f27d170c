"""What a resume accepts: --seed is part of the run (it orders the documents and initialises the
model), and a temporary file the run itself left when it was killed does not block it."""

from __future__ import annotations

import json

import pytest

from train.config import parse_args
from train.loop import main

SMALL = [
    "--seq-len", "16", "--global-batch", "2", "--micro-batch", "1", "--split", "90,5,5",
    "--eval-iters", "0", "--no-progress", "--log-interval", "1000", "--warmup-steps", "1",
]  # fmt: skip


def run(data: str, out, *flags: str) -> dict:
    return main(parse_args(["--data", data, "--out", str(out), *SMALL, *flags]))


def test_resuming_with_another_seed_is_refused_naming_both(gpt_shards, tmp_path):
    run(gpt_shards, tmp_path, "--max-steps", "2", "--stop-at", "1", "--seed", "7")
    with pytest.raises(SystemExit) as refused:
        run(gpt_shards, tmp_path, "--max-steps", "2", "--resume", "--seed", "8")
    message = str(refused.value.code)
    assert "\n" not in message
    assert message.startswith(f"error: cannot resume from {tmp_path}/checkpoints/step-00000001: ")
    assert "it was saved with --seed 7, this run has --seed 8;" in message
    assert run(gpt_shards, tmp_path, "--max-steps", "2", "--resume", "--seed", "7")["step"] == 2


def test_a_metrics_rewrite_left_by_a_killed_run_does_not_block_resume(gpt_shards, tmp_path):
    """A run killed while rewriting metrics.jsonl leaves metrics.jsonl.tmp-<pid>: the folder is
    still the run's own, the resume goes on and removes it."""
    run(gpt_shards, tmp_path, "--max-steps", "2", "--stop-at", "1")
    stray = tmp_path / "metrics.jsonl.tmp-48213"
    stray.write_text((tmp_path / "metrics.jsonl").read_text()[:40])
    assert run(gpt_shards, tmp_path, "--max-steps", "2", "--resume")["step"] == 2
    assert not stray.exists()
    with open(tmp_path / "metrics.jsonl") as f:
        steps = [r["step"] for r in map(json.loads, f) if r["kind"] == "train"]
    assert steps == [1, 2]
