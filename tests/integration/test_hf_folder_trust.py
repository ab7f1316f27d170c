"""The tests of tests/unit/train/test_hf_folder_trust.py that start a process or run a Beam pipeline (that file
holds the in-process ones and says what they cover)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.helpers.hf_folder_trust import gpt2, resave, tensors_of
from tests.shard_fixtures import make_gpt_shards
from train.config import parse_args
from train.loop import main as train_main

ROOT = str(REPO)


def test_entry_points_refuse_a_broken_folder_in_one_line(tmp_path):
    hf = gpt2(tmp_path / "hf", vocab=50257)
    tensors = tensors_of(hf)
    del tensors["transformer.h.1.mlp.c_fc.weight"]
    resave(hf, tensors)
    run = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", "generate"), str(hf), "--prompt", "Call me"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode != 0 and "Traceback" not in run.stderr
    assert run.stderr.strip().count("\n") == 0 and "c_fc.weight" in run.stderr
    data = make_gpt_shards(tmp_path / "data", 20)
    args = ["--data", data, "--out", str(tmp_path / "run"), "--seq-len", "32",
            "--global-batch", "2", "--max-steps", "1", "--no-progress", "--eval-iters", "0",
            "--init-from", str(hf)]  # fmt: skip
    with pytest.raises(SystemExit) as refused:
        train_main(parse_args(args))
    assert "c_fc.weight" in str(refused.value.code) and "\n" not in str(refused.value.code)
