"""The unit tier's rule, enforced: a unit test runs in this process only.

While a test's setup, call and teardown run, starting a process (subprocess, os.fork and the
spawn calls, multiprocessing and torch.multiprocessing, which start through multiprocessing's
Process.start) or running a Beam pipeline (apache_beam.Pipeline.run, which TestPipeline and
`with beam.Pipeline() as p` both reach) fails the test with a message naming what it started.
Such a test belongs in tests/integration/.

tests/unit/conftest.py takes these hooks for the tests under it. To find the tier of a new test
file, run it under the guard: `pytest -p tests.helpers.inprocess_guard tests/test_x.py`; a test
that fails with "unit tier:" belongs in tests/integration/, the others in tests/unit/.

The guard both raises where the process would start and records it: code under test that
catches the raised error (a command turning any failure into an exit code) still fails the test.
"""

from __future__ import annotations

import contextlib
import multiprocessing.process
import os
import subprocess
import sys

import pytest

RULE = (
    "a unit test starts no process and runs no Beam pipeline; "
    "move this test to tests/integration/ (or test the function the command calls)"
)


class UnitTierViolation(RuntimeError):
    """Raised where a unit test would start a process or run a Beam pipeline."""


def _describe(what: str, args: tuple, shown: int | None) -> str:
    """`what`, with the argument at index `shown` (the command line, the process) if any."""
    if shown is None or len(args) <= shown:
        return what
    value = args[shown]
    if isinstance(value, (list, tuple)):
        value = " ".join(map(str, value))
    return f"{what} ({str(value)[:160]})"


def _blocker(seen: list[str], what: str, shown: int | None, original):
    def blocked(*args, **kwargs):
        seen.append(_describe(what, args, shown))
        raise UnitTierViolation(f"unit tier: the test started {seen[-1]}: {RULE}")

    # pickle names a function by its module and name: a test that pickles os.system (a pickle
    # that would run a command, for the loaders' refusal tests) gets the same bytes as unguarded
    blocked.__module__ = getattr(original, "__module__", blocked.__module__)
    blocked.__name__ = blocked.__qualname__ = getattr(original, "__name__", "blocked")
    return blocked


def _targets() -> list[tuple[object, str, str, int | None]]:
    """(owner, attribute, name, index of the argument to show) of every call that starts a
    process or runs a pipeline."""
    found: list[tuple[object, str, str, int | None]] = [
        (subprocess.Popen, "_execute_child", "a subprocess", 1),  # (self, args, ...)
        (multiprocessing.process.BaseProcess, "start", "a multiprocessing process", 0),
    ]
    found += [
        (os, name, f"os.{name}", 0)
        for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system", "execv", "execve")
        if hasattr(os, name)
    ]
    try:
        from apache_beam import pipeline as beam_pipeline
    except ImportError:  # the pipelines extra is not installed: nothing to guard there
        pass
    else:
        found.append((beam_pipeline.Pipeline, "run", "a Beam pipeline run", None))
    return found


@contextlib.contextmanager
def guarded():
    """Inside, every target raises UnitTierViolation; yields the list of what was attempted."""
    seen: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        for owner, attribute, what, shown in _targets():
            original = getattr(owner, attribute)
            blocked = _blocker(seen, what, shown, original)
            patch.setattr(owner, attribute, blocked)
            if owner is os:  # os.system is posix.system, where pickle looks it up
                patch.setattr(sys.modules[original.__module__], attribute, blocked)
        yield seen


def _phase(item, phase: str):
    with guarded() as seen:
        try:
            result = yield
        except BaseException:
            if not seen:
                raise
        if seen:  # raised above, or caught and swallowed by the code under test
            pytest.fail(f"unit tier: {item.nodeid} ({phase}) started {seen[0]}: {RULE}", False)
        return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _phase(item, "setup"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _phase(item, "call"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item):
    return (yield from _phase(item, "teardown"))
