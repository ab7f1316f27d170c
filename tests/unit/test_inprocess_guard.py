"""The unit tier's guard (tests/helpers/inprocess_guard.py): each way of starting a process or
running a Beam pipeline is stopped before anything starts, with a message naming what it was; a
test whose code swallows the raised error still fails; what the guard leaves alone still works.
These tests run under the guard of tests/unit/conftest.py as well, so a leak here fails them."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import subprocess

import apache_beam as beam
import pytest
import torch.multiprocessing

from tests.helpers.inprocess_guard import UnitTierViolation, _phase, guarded


def _starts(start) -> str:
    """The message of the violation `start()` raises inside a fresh guard."""
    with guarded() as seen:
        with pytest.raises(UnitTierViolation) as raised:
            start()
    assert len(seen) == 1
    return str(raised.value)


def test_every_way_of_starting_a_process_is_stopped_and_named():
    message = _starts(lambda: subprocess.run(["git", "--version"], check=True))
    assert message.startswith("unit tier: the test started a subprocess (git --version): ")
    assert "tests/integration/" in message
    assert "os.system (echo hi)" in _starts(lambda: os.system("echo hi"))
    assert "os.fork" in _starts(lambda: os.fork())
    assert "os.posix_spawn (/bin/true)" in _starts(
        lambda: os.posix_spawn("/bin/true", ["true"], dict(os.environ))
    )
    spawned = multiprocessing.get_context("spawn").Process(target=print)
    assert "a multiprocessing process (<SpawnProcess" in _starts(lambda: spawned.start())
    assert "a multiprocessing process" in _starts(
        lambda: torch.multiprocessing.start_processes(print, nprocs=1, start_method="spawn")
    )


def test_a_beam_pipeline_run_is_stopped_in_each_spelling():
    def with_block():
        with beam.Pipeline() as pipeline:
            _ = pipeline | beam.Create([1, 2]) | beam.Map(print)

    def explicit():
        pipeline = beam.Pipeline()
        _ = pipeline | beam.Create([1])
        pipeline.run()

    for run in (with_block, explicit):
        assert "started a Beam pipeline run: " in _starts(run)


def test_a_swallowed_violation_still_fails_the_test():
    class Item:
        nodeid = "tests/unit/x.py::test_y"

    phase = _phase(Item(), "call")
    next(phase)  # the hook wrapper's code before the test runs
    try:
        subprocess.run(["true"])
    except Exception:  # what a command's catch-all does with the guard's error
        pass
    with pytest.raises(pytest.fail.Exception) as failed:
        phase.send(None)
    assert str(failed.value).startswith(
        "unit tier: tests/unit/x.py::test_y (call) started a subprocess (true): "
    )
    quiet = _phase(Item(), "setup")
    next(quiet)
    with pytest.raises(StopIteration) as finished:
        quiet.send("result")
    assert finished.value.value == "result"


def test_the_guard_undoes_its_patches_and_pickles_what_it_replaces():
    before = (subprocess.Popen._execute_child, os.system, multiprocessing.Process.start)
    with guarded():
        assert os.system is not before[1]
        reduced = pickle.dumps(os.system)
    assert (subprocess.Popen._execute_child, os.system, multiprocessing.Process.start) == before
    assert reduced == pickle.dumps(os.system)  # a pickle naming os.system is the same bytes
