"""The language model's cache is a folder in the user's home that anyone with access to it may
have changed: its digest check reads only regular files, and only up to a cap."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

ROOT = REPO
BOOK = ROOT.parent / "shared" / "corpora" / "books" / "46-0.txt"

# Runs in a child so that a digest that never ends is a failed test, not a hung suite.
_CHILD = """
import sys
from pipelines.clean import language
directory = language.cache_dir() / f"py3langid-{language.model_digest()}"
print("mismatch:", language.cache_mismatch(directory), flush=True)
assert language.decompressed_model() == directory
assert language.cache_mismatch(directory) is None
text = open(sys.argv[1], encoding="utf-8-sig").read()[5000:8000]
print("language:", language.identify_language(text)[0], flush=True)
"""


def _child(cache: Path, timeout: float = 20) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", _CHILD, str(BOOK)], env=env, cwd=ROOT, capture_output=True,
        text=True, timeout=timeout,
    )


def _built_cache(tmp_path: Path) -> Path:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    code = "from pipelines.clean import language; print(language.decompressed_model())"
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True,
                         text=True, check=True, timeout=300)
    return Path(out.stdout.strip())


@pytest.mark.parametrize("name", ["ptc32.npy", "content.sha256"])
def test_a_cache_file_linked_to_dev_zero_is_rebuilt_not_read_for_ever(tmp_path, name):
    directory = _built_cache(tmp_path)
    (directory / name).unlink()
    (directory / name).symlink_to("/dev/zero")
    try:
        done = _child(tmp_path)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the cache check read {name} -> /dev/zero for over 120 s")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "a character device" in done.stdout and name in done.stdout
    assert "language: en" in done.stdout
    assert not (directory / name).is_symlink()


def test_a_cache_file_that_is_a_fifo_is_rebuilt(tmp_path):
    directory = _built_cache(tmp_path)
    (directory / "nextmove.npy").unlink()
    os.mkfifo(directory / "nextmove.npy")
    done = _child(tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "a FIFO" in done.stdout and "language: en" in done.stdout
