"""The in-process tests of what tests/integration/test_train_distributed.py covers (that file holds the
tests that start a process or run a Beam pipeline, and says what they cover)."""

from __future__ import annotations

import shutil

import pytest

from tests.helpers.train_runs import (
    single,
)

pytestmark = pytest.mark.slow


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
