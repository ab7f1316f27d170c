"""Entry point of every py_test target: runs pytest on the test files given as arguments."""

import os
import sys

import pytest

if __name__ == "__main__":
    # Bazel starts tests in the runfiles tree; pytest's rootdir and the import root are the
    # workspace, where pyproject.toml and conftest.py live.
    workspace = os.path.join(os.environ.get("TEST_SRCDIR", "."), os.environ.get("TEST_WORKSPACE", ""))
    os.chdir(workspace)
    sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", *sys.argv[1:]]))
