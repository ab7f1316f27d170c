"""SIGINT, SIGTERM and SIGHUP end every command at any moment, its start-up included, with one
line on stderr and exit status 128 + the signal (common/signals.py); the trainer saves first.

A start-up signal is sent as soon as the process has the handlers in place (its caught-signals
mask in /proc shows SIGTERM and SIGHUP), while it is still importing torch or Beam."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from common.signals import STOP_SIGNALS
from tests.conftest import REPO

WANTED = (1 << (signal.SIGHUP - 1)) | (1 << (signal.SIGTERM - 1))


def caught_signals(pid: int) -> int:
    """The process's mask of signals it has handlers for (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return int(line.split()[1], 16)
    except FileNotFoundError:
        pass
    return 0


def start(args: list[str], **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs
    )


def stop(process: subprocess.Popen, signum: int) -> str:
    """Send ``signum``, wait for the end; stderr."""
    process.send_signal(signum)
    try:
        _, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return err



@pytest.mark.parametrize(
    "prog, args, signum",
    [
        ("train/pretrain.py", ["--data", "nothing"], signal.SIGINT),
        ("train/evaluate.py", ["--checkpoint", "x", "--task", "lambada"], signal.SIGTERM),
        ("python -m pipelines.preprocess", ["--source", "books"], signal.SIGHUP),
        ("python -m pipelines.dedup", ["--input", "x", "--output", "{tmp}/y"], signal.SIGINT),
        ("tools/generate", ["x"], signal.SIGHUP),
        ("tools/convert", ["checkpoint-to-hf", "x", "{tmp}/y"], signal.SIGTERM),
    ],
)
def test_a_signal_during_start_up_is_one_line_and_its_exit_status(prog, args, signum, tmp_path):
    command = prog.split()[1:] if prog.startswith("python ") else [prog]
    process = start([sys.executable, *command, *(a.format(tmp=tmp_path) for a in args)])
    deadline = time.monotonic() + 10  # the handlers are the first thing a command puts in place
    while caught_signals(process.pid) & WANTED != WANTED and time.monotonic() < deadline:
        time.sleep(0.002)
    err = stop(process, signum)
    assert process.returncode == 128 + signum, err
    assert err.splitlines() == [f"{prog}: {STOP_SIGNALS[signum]}; stopped"]


def test_sighup_while_training_saves_at_the_step_boundary_and_exits_129(gpt_shards, tmp_path):
    """A closed terminal: the run finishes its step, saves and says how to resume, as SIGTERM."""
    out = tmp_path / "run"
    process = start(
        [sys.executable, "train/pretrain.py", "--data", gpt_shards, "--out", str(out),
         "--max-steps", "100000", "--seq-len", "16", "--log-interval", "1", "--no-progress"]
    )  # fmt: skip
    for line in process.stdout:  # the first step's log line: the run is training
        if line.startswith("step "):
            break
    err = stop(process, signal.SIGHUP)
    assert process.returncode == 129, err
    with open(out / "metrics.jsonl") as f:
        last = max(r["step"] for r in map(json.loads, f) if r["kind"] == "train")
    assert len(err.splitlines()) == 1 and err.startswith(
        f"stopped by SIGHUP after step {last}: saved {out}/checkpoints/step-{last:08d}; resume"
    ), err
    assert "Traceback" not in err
    assert (out / "checkpoints" / f"step-{last:08d}" / "meta.json").is_file()


def test_ctrl_c_to_a_dask_run_stops_the_cluster_it_started(tmp_path):
    """A Ctrl-C at the terminal reaches the launcher and the cluster's workers it spawned (one
    process group): the launcher alone stops, in one line, and shuts its cluster down; no
    worker process and no scratch folder of the cluster is left."""
    import psutil

    temp = tmp_path / "temp"
    temp.mkdir()
    shared = REPO.parent / "shared" / "corpora" / "books"
    # eight copies of each shared book (links: another path is another input), so that the run
    # is still going when the signal comes (the books once take ~2 s on the cluster)
    books = tmp_path / "books"
    books.mkdir()
    for book in shared.glob("*.txt"):
        for copy in range(8):
            try:
                os.link(book, books / f"{book.stem}-{copy}.txt")
            except OSError:  # another filesystem
                shutil.copyfile(book, books / f"{book.stem}-{copy}.txt")
    process = start(
        [sys.executable, "-m", "pipelines.preprocess", "--source=books", f"--input={books}/*.txt",
         f"--output={tmp_path / 'out'}", f"--tokenizer={shared.parent / 'vocab' / 'gpt2'}",
         "--no-dedup", "--language=any", "--runner=DaskRunner"],
        env={**os.environ, "TMPDIR": str(temp)}, start_new_session=True,
    )  # fmt: skip
    try:
        # the cluster is up (the launcher ignores SIGINT while it spawns the cluster's
        # processes, which keep that disposition) and the graph is built: the run starts on it
        waiting = {"INFO pipelines.graph", "INFO pipelines.runner.dask_runner: dask: scheduler"}
        for line in process.stderr:
            waiting = {start for start in waiting if not line.startswith(start)}
            if not waiting:
                break
        workers = psutil.Process(process.pid).children(recursive=True)
        assert len(workers) >= 2
        os.killpg(process.pid, signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 130, err
    lines = [line for line in err.splitlines() if not line.startswith("INFO ")]
    assert lines == ["preprocess: interrupted; no shard set was finished"], err
    # the cluster's processes were told to close before the launcher exited; on a loaded machine
    # the last may take a moment to go
    _, alive = psutil.wait_procs(workers, timeout=20)
    assert not [w.pid for w in alive if w.status() != psutil.STATUS_ZOMBIE]
    assert not [p.name for p in temp.iterdir() if "dask" in p.name]


def test_a_signal_the_process_was_started_ignoring_stays_ignored():
    """`nohup` starts a command with SIGHUP ignored: neither the start-up handlers nor the
    trainer's stop request take it over (a closed terminal must not stop that run)."""
    probe = (
        "import signal, sys\n"
        "from common.signals import exit_on_stop_signals\n"
        "from train.runtime import StopRequest\n"
        "exit_on_stop_signals('probe')\n"
        "with StopRequest():\n"
        "    print(signal.getsignal(signal.SIGHUP) is signal.SIG_IGN,\n"
        "          signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "True True\n"), done.stderr
