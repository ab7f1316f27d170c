"""The tests of tests/unit/train/test_train_checkpoint_trust.py that start a process or run a Beam pipeline (that file
holds the in-process ones and says what they cover)."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.helpers.checkpoints import rehash as _rehash
from tests.helpers.checkpoints import save_step as _save
from tests.helpers.checkpoints import trained_gpt as _trained
from tests.helpers.train_checkpoint_trust import RunsCode
from train import checkpoint as ckpt

ROOT = str(REPO)


def test_tools_convert_refuses_it_with_one_line_and_exit_1(gpt_checkpoint, tmp_path):
    marker = tmp_path / "ran"
    with open(os.path.join(gpt_checkpoint, ".metadata"), "wb") as f:
        pickle.dump(RunsCode(str(marker)), f)
    _rehash(gpt_checkpoint, ".metadata")
    run = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", "convert"), "checkpoint-to-torch",
         gpt_checkpoint, str(tmp_path / "out.pt")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 1
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("error: ")
    assert "refused" in run.stderr and not marker.exists()


@pytest.fixture
def small_disk(tmp_path):
    """A real 200 kB filesystem (tmpfs), where a checkpoint save runs out of space; skipped
    where this process may not mount one."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({done.stderr.strip()})")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_save_onto_a_really_full_disk_says_so_in_one_line(small_disk):
    """Issue 27.7: on a real full disk torch's writer fails with "[enforce fail at
    inline_container.cc] unexpected pos", not ENOSPC; the line now names the full disk."""
    model, optimizer = _trained()
    with pytest.raises(ckpt.CheckpointError) as caught:
        _save(small_disk / "run", 1, model, optimizer)
    message = str(caught.value)
    assert "\n" not in message and "step 1 not saved (no space left on device" in message
    assert os.listdir(small_disk / "run" / "checkpoints") == []
