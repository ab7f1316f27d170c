"""Standby workers (pipelines/beam_worker.py): the launcher starts its workers' processes early,
and the runner's workers hand over to them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipelines import beam_worker

REPO = Path(__file__).resolve().parents[1]
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
        "from pipelines import beam_worker\n"
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
    while not any(directory.iterdir()):  # the standby says it is starting, first thing
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


def test_unclaimed_standbys_are_stopped_and_their_directory_removed():
    standbys = beam_worker.StandbyWorkers(2, verbose=False)
    directory = standbys.directory
    standbys.close()
    assert all(p.poll() is not None for p in standbys.processes)
    assert not os.path.exists(directory)


@pytest.mark.slow
def test_a_multi_processing_run_hands_its_workers_to_the_standbys(tmp_path, monkeypatch):
    from pipelines import preprocess

    claimed = []

    class Recording(beam_worker.StandbyWorkers):
        def close(self):
            claimed.append(self.claimed())
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
    assert claimed == [2]
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["written"] == 2
