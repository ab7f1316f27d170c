"""A full disk at a checkpoint save ends the run in one line: what failed, in which folder, how
much room the checkpoint needs and how much there is; the exit status is not 0."""

from __future__ import annotations

import errno
import os
import re

import pytest
from torch.distributed.checkpoint import filesystem as dcp_filesystem

from train.config import parse_args
from train.loop import main

FLAGS = ["--seq-len", "16", "--global-batch", "2", "--micro-batch", "1", "--split", "90,5,5",
         "--eval-iters", "0", "--no-progress", "--max-steps", "1"]  # fmt: skip
UNITS = {"bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def _disk_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_at_a_save_is_one_line_naming_the_folder_and_the_room_needed(
    gpt_shards, tmp_path, monkeypatch
):
    saved = tmp_path / "saved"
    main(parse_args(["--data", gpt_shards, "--out", str(saved), *FLAGS]))
    step = saved / "checkpoints" / "step-00000001"
    written = sum(f.stat().st_size for f in step.iterdir() if f.suffix == ".distcp")

    full = tmp_path / "full"
    monkeypatch.setattr(dcp_filesystem, "_write_item", _disk_full)
    with pytest.raises(SystemExit) as failed:
        main(parse_args(["--data", gpt_shards, "--out", str(full), *FLAGS]))
    message = str(failed.value.code)  # a string: printed as is, exit status 1
    assert "\n" not in message and "Traceback" not in message
    found = re.fullmatch(
        r"error: checkpoint of step 1 not saved \(no space left on device\): it needs "
        rf"([0-9.]+) (\w+) in {full}/checkpoints, which has [0-9.]+ \w+ free; make room or "
        rf"choose another --out; its temporary directory {full}/checkpoints/.tmp-step-00000001 "
        r"was removed; the last complete checkpoint is none",
        message,
    )
    assert found, message
    needed = float(found[1]) * UNITS[found[2]]
    # the weights and both Adam moments: what a save that had room wrote, to a few percent
    assert 0.97 * written <= needed <= written
    assert os.listdir(full / "checkpoints") == []
