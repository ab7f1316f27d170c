"""The unit tier runs in this process only: a test here that starts a process or runs a Beam
pipeline fails, naming what it started (tests/helpers/inprocess_guard.py). Such a test belongs in
tests/integration/. The fixtures of tests/conftest.py reach this tier as every other."""

from tests.helpers.inprocess_guard import (  # noqa: F401 (pytest finds hooks by their names)
    pytest_runtest_call,
    pytest_runtest_setup,
    pytest_runtest_teardown,
)
