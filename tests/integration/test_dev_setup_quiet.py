"""./dev set-up's editable install prints no setuptools box ("Editable installation ...
folders in your working directory"), while a real build error still shows: the warnings filter
./dev sets (QUIET_EDITABLE) is applied to the real editable build of a copy of the project."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO

PACKAGES = ("common", "pipelines", "dataset_format", "train")


def _dev_filter() -> str:
    return re.search(r'^QUIET_EDITABLE="([^"]+)"', (REPO / "dev").read_text(), re.M).group(1)


def _project_copy(root) -> str:
    root.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (REPO / name).exists():
            shutil.copy(REPO / name, root / name)
    for package in PACKAGES:
        shutil.copytree(REPO / package, root / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "README.md"))
    return str(root)


def _editable_install(project: str, target, warnings: str | None):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    if warnings:
        env["PYTHONWARNINGS"] = warnings
    return subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--no-index", "--target", str(target), "-e", project],
        capture_output=True, text=True, timeout=300, env=env,
    )


@pytest.mark.timeout(600)
def test_the_editable_install_is_quiet_and_a_build_error_is_not(tmp_path):
    project = _project_copy(tmp_path / "project")
    loud = _editable_install(project, tmp_path / "t1", None)
    assert loud.returncode == 0 and "Editable installation" in loud.stderr  # what it hides
    quiet = _editable_install(project, tmp_path / "t2", _dev_filter())
    assert quiet.returncode == 0, quiet.stderr
    assert "Editable installation" not in quiet.stderr and "*****" not in quiet.stderr
    pyproject = tmp_path / "project" / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('name = "shardsmith"', 'name = 7'))
    broken = _editable_install(project, tmp_path / "t3", _dev_filter())
    assert broken.returncode != 0 and "project.name" in broken.stderr
