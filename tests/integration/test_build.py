"""The tests of tests/unit/test_build.py that start a process or run a Beam pipeline (that file
holds the in-process ones and says what they cover)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.conftest import REPO
from tests.helpers.build import glob_files


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("bazel") is None, reason="bazel not installed (see docs/development.md)"
)
def test_bazel_loads_the_targets_and_runs_a_test():
    local_rc = REPO / "bazel" / "local.bazelrc"
    assert local_rc.exists(), "./dev setup writes bazel/local.bazelrc"
    query = subprocess.run(
        ["bazel", "query", "tests(//:all)"], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert query.returncode == 0, query.stderr[-2000:]
    listed = {line.split(":")[-1] for line in query.stdout.split()}
    files = {p[len("tests/") : -len(".py")] for p in glob_files(["tests/**/test_*.py"])}
    assert listed == files
    run = subprocess.run(
        ["bazel", "test", "//:unit/dataset_format/test_dataset_format"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "1 test passes" in run.stdout + run.stderr
