"""Standby workers (pipelines/runner/beam_worker.py): the launcher starts its workers' processes early,
and the runner's workers hand over to them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from pipelines.runner import beam_worker
from tests.conftest import REPO

GPT2 = REPO.parent / "shared" / "corpora" / "vocab" / "gpt2"
BOOKS = REPO.parent / "shared" / "corpora" / "books"


def test_no_standby_left_means_the_worker_runs_itself(tmp_path):
    assert beam_worker.hand_to_standby(str(tmp_path)) is None  # empty directory
    # a standby that died while starting is not waited for
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / "starting-0").write_text(str(dead.pid))
    started = time.monotonic()
    assert beam_worker.hand_to_standby(str(tmp_path)) is None
    assert time.monotonic() - started < 5
    assert beam_worker.hand_to_standby(str(tmp_path / "missing")) is None


def test_a_standby_runs_the_handed_over_work_and_returns_its_exit_code(tmp_path, monkeypatch):
    # The standby runs `run_worker`; here a stand-in that records the environment it got and
    # exits 3, so the handing-over is seen without a Beam runner.
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import json, os, sys\n"
        "from pipelines.runner import beam_worker\n"
        "def fake():\n"
        "    with open(os.environ['PROBE_OUT'], 'w') as f:\n"
        "        json.dump({'env': os.environ.get('HANDED'), 'tmp': __import__('tempfile')"
        ".gettempdir()}, f)\n"
        "    sys.exit(3)\n"
        "beam_worker.run_worker = fake\n"
        "beam_worker.standby(sys.argv[1], sys.argv[2])\n"
    )
    directory = tmp_path / "standby"
    directory.mkdir()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    process = subprocess.Popen([sys.executable, str(probe), str(directory), "0"], env=env)
    # the standby says it is starting, first thing
    while not any(p.name.startswith(("starting-", "waiting-")) for p in directory.iterdir()):
        assert process.poll() is None
        time.sleep(0.01)
    out = tmp_path / "out.json"
    run_tmp = tmp_path / "run-tmp"
    run_tmp.mkdir()
    monkeypatch.setenv("HANDED", "yes")
    monkeypatch.setenv("PROBE_OUT", str(out))
    monkeypatch.setenv("TMPDIR", str(run_tmp))
    # waits for the standby to finish starting, then hands over
    assert beam_worker.hand_to_standby(str(directory)) == 3
    assert process.wait(30) == 3
    assert json.loads(out.read_text()) == {"env": "yes", "tmp": str(run_tmp)}
    assert [p.name for p in directory.iterdir()] == [f"claimed-{os.getpid()}-0"]
    # claimed already: a second worker finds none
    assert beam_worker.hand_to_standby(str(directory)) is None


def _in_a_fresh_process(code: str) -> dict:
    """Run `code` (which ends by printing one JSON line) in a new interpreter: whether standbys
    are forked depends on the threads of the process, and this one's earlier tests may have
    left some (Beam's shared thread pool)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("warm", ["None", "lambda: None"], ids=["spawned", "forked"])
def test_unclaimed_standbys_are_stopped_and_their_directory_removed(warm):
    result = _in_a_fresh_process(
        "import json, os\n"
        "from pipelines.runner import beam_worker\n"
        f"standbys = beam_worker.StandbyWorkers(2, verbose=False, warm={warm})\n"
        "standbys.close()\n"
        "print(json.dumps({'forked': standbys.forked,\n"
        "    'stopped': all(p.poll() is not None for p in standbys.processes),\n"
        "    'removed': not os.path.exists(standbys.directory)}))\n"
    )
    assert result == {"forked": warm != "None", "stopped": True, "removed": True}


def test_a_forked_standby_keeps_none_of_the_launchers_descriptors(tmp_path):
    # The launcher holds the output folder's flock when it forks; the lock must end when the
    # launcher lets it go, not when its last worker exits.
    result = _in_a_fresh_process(
        "import json, os, sys, time\n"
        "from common.output_dir import try_lock_directory\n"
        "from pipelines.runner import beam_worker\n"
        f"folder = {str(tmp_path)!r}\n"
        "fd = try_lock_directory(folder)\n"
        "standbys = beam_worker.StandbyWorkers(1, verbose=False, warm=lambda: None)\n"
        "deadline = time.monotonic() + 30\n"
        "while not any(n.startswith('waiting-') for n in os.listdir(standbys.directory)):\n"
        "    assert time.monotonic() < deadline, 'the forked standby never got ready'\n"
        "    time.sleep(0.01)\n"
        "os.close(fd)\n"
        "alive = standbys.processes[0].poll() is None\n"
        "again = try_lock_directory(folder)\n"
        "standbys.close()\n"
        "print(json.dumps({'forked': standbys.forked, 'alive': alive,\n"
        "    'relocked': again is not None}))\n"
    )
    assert result == {"forked": True, "alive": True, "relocked": True}


@pytest.mark.slow
def test_a_multi_processing_run_hands_its_workers_to_the_standbys(tmp_path, monkeypatch):
    from pipelines import preprocess

    claimed = []

    class Recording(beam_worker.StandbyWorkers):
        def close(self):
            claimed.append((self.claimed(), self.forked))
            super().close()

    monkeypatch.setattr(preprocess, "StandbyWorkers", Recording)
    corpus = tmp_path / "books.jsonl"
    # two real books (Project Gutenberg), one JSON line each
    corpus.write_text(
        "".join(
            json.dumps({"text": (BOOKS / name).read_text("utf-8-sig")[:20000]}) + "\n"
            for name in ("11-0.txt", "1952-0.txt")
        )
    )
    code = preprocess.main(
        [
            "--source=jsonl",
            f"--input={corpus}",
            f"--output={tmp_path / 'out'}",
            f"--tokenizer={GPT2}",
            "--append-eod",
            "--no-dedup",
            "--progress-interval=0",
            "--direct_running_mode=multi_processing",
            "--direct_num_workers=2",
        ]
    )
    assert code == 0
    # (forked or spawned: an earlier test of this process may have left a thread running,
    # and then the launcher does not fork; the fresh-process tests above check forking)
    assert claimed[0][0] == 2
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["written"] == 2


@pytest.mark.slow
def test_standbys_that_cannot_start_leave_the_runner_to_start_its_workers(
    tmp_path, monkeypatch, capsys
):
    from pipelines import preprocess

    def no_fork(*args, **kwargs):
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(preprocess, "StandbyWorkers", no_fork)
    corpus = tmp_path / "book.jsonl"
    text = (BOOKS / "11-0.txt").read_text("utf-8-sig")[:20000]  # Alice, Project Gutenberg
    corpus.write_text(json.dumps({"text": text}) + "\n")
    code = preprocess.main(
        [
            "--source=jsonl",
            f"--input={corpus}",
            f"--output={tmp_path / 'out'}",
            f"--tokenizer={GPT2}",
            "--no-dedup",
            "--progress-interval=0",
            "--direct_running_mode=multi_processing",
            "--direct_num_workers=2",
        ]
    )
    assert code == 0
    assert json.loads((tmp_path / "out" / "stats.json").read_text())["written"] == 1
    assert "no standby workers (" in capsys.readouterr().err


def test_worker_processes_get_the_folder_above_the_package_on_their_path():
    """Worker processes import `pipelines` from the folder runners.REPO_ROOT puts on their
    PYTHONPATH. That folder must hold the package, never be the package itself: there, its
    tokenize/ shadows the standard library's tokenize, and a spawned worker dies importing Beam
    (a second multi_processing run in one launcher hung so)."""
    from pipelines.runner.runners import REPO_ROOT

    assert os.path.isfile(os.path.join(REPO_ROOT, "pipelines", "__init__.py"))
    probe = subprocess.run(
        [sys.executable, "-c", "import tokenize; print(tokenize.open.__module__)"],
        env={**os.environ, "PYTHONPATH": REPO_ROOT}, capture_output=True, text=True, timeout=60,
    )
    assert probe.stdout.strip() == "tokenize", probe.stderr[-500:]
