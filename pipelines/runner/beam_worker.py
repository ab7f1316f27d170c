"""The worker process of a local multi_processing run: Beam's own SDK worker, minus its noise.

Beam starts each worker as `python -m apache_beam.runners.worker.sdk_worker_main`, which, on the
terminal the run shares, logs messages meant for Dataflow operators ("apitools not found" while
importing, "No semi_persistent_directory found" when starting). Here logging is set up before
Beam is imported: our own loggers (`pipelines.*`) print as in the launcher, Beam's are kept out
unless the launcher was given --verbose. Errors still reach the launcher, which reports them.

Standby workers. A worker spends ~1.5 s importing Beam and the command's modules (the ones its
DoFns need, which the command names: `preload`) before it does any work, and the runner starts
its workers only once the launcher has built and translated the graph. So the launcher starts
its workers' processes first (`StandbyWorkers`): each imports all that, then waits on a Unix
socket in a directory of the run. When the runner starts a worker
(`python -m pipelines.runner.beam_worker`, with the directory in SHARDSMITH_STANDBY_DIR), that
short-lived process claims one standby by renaming its socket (atomic: two workers never claim
the same one), hands it its environment (the runner's control and logging addresses), and
waits for it to finish, exiting with its code. Without a standby left, it runs the worker
itself.

Forked standbys. Each standby that imports Beam, loads the tokenizer and the language model
by itself spends ~0.9 CPU-s doing what the launcher has already done; on 2 cores, two of them
were a tenth of a 100 MB run's CPU time. So where it can, the launcher forks its standbys once
it holds all that (`StandbyWorkers(..., warm=...)`): they share its memory copy-on-write and
start with nothing to load. fork() is unsafe while another Python thread runs (it may hold a
lock the child would wait on forever), so a launcher with one starts them as processes of their
own, spawned (`_can_fork`). A forked standby closes every descriptor it
inherited beyond stdio first: the output folder's flock must end when the launcher releases
it, not when the last worker exits.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Sequence

from pipelines.log_setup import add_stderr_handler

# Set by the launcher for its workers: "1" when the run was given --verbose.
VERBOSE_ENV = "SHARDSMITH_VERBOSE"
# Set by the launcher for its workers: the directory of the standby workers' sockets.
STANDBY_DIR_ENV = "SHARDSMITH_STANDBY_DIR"
# The standby workers' socket folder of a run, in the temporary directory; locked (flock) by
# the launcher while it lives, so that a later run sweeps the folder of one that was killed
STANDBY_PREFIX = "shardsmith-standby-"
_WAITING = "waiting-"  # a standby's socket, before a worker claims it
_STARTING = "starting-"  # a standby still importing: holds its pid
_STARTING_WAIT_S = 60.0
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number, from glibc's malloc.h


def _quiet_logging() -> None:
    verbose = os.environ.get(VERBOSE_ENV) == "1"
    add_stderr_handler(verbose, logging.WARNING)  # holds on to the real stderr
    if not verbose:
        # Beam's worker also prints tracebacks straight to stderr (an instruction that failed;
        # every in-flight one when the launcher stops). The error goes back to the launcher,
        # which reports it in one line.
        sys.stderr = open(os.devnull, "w")  # for the life of the process


def run_worker() -> None:
    from apache_beam.runners.worker import sdk_worker_main

    sdk_worker_main.main(sys.argv)


def main() -> None:
    standby_dir = os.environ.get(STANDBY_DIR_ENV)
    if standby_dir:
        code = hand_to_standby(standby_dir)
        if code is not None:
            sys.exit(code)
    _quiet_logging()
    run_worker()


# -- standby workers ----------------------------------------------------------------------------
def _claim(standby_dir: str) -> str | None:
    """The socket path of a standby this process now owns; None when none is left. A standby
    still starting (its `starting-` file names a live process) is waited for: it is ahead of a
    worker that would start from nothing."""
    deadline = time.monotonic() + _STARTING_WAIT_S
    while True:
        try:
            names = sorted(os.listdir(standby_dir))
        except OSError:
            return None
        for name in names:
            if not name.startswith(_WAITING):
                continue
            claimed = os.path.join(standby_dir, f"claimed-{os.getpid()}-{name[len(_WAITING) :]}")
            try:
                os.rename(os.path.join(standby_dir, name), claimed)
            except OSError:
                continue  # another worker took it first
            return claimed
        starting = [n for n in names if n.startswith(_STARTING)]
        if not any(_alive(os.path.join(standby_dir, n)) for n in starting):
            return None
        if time.monotonic() > deadline:
            return None
        time.sleep(0.02)


def _alive(pid_file: str) -> bool:
    try:
        with open(pid_file) as f:
            os.kill(int(f.read()), 0)
        return True
    except (OSError, ValueError):
        return False


def hand_to_standby(standby_dir: str) -> int | None:
    """Run this worker in a standby process: its exit code, or None when no standby took it
    (the caller then runs the worker itself)."""
    path = _claim(standby_dir)
    if path is None:
        return None
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        try:
            connection.connect(path)
            connection.sendall(json.dumps({"env": dict(os.environ)}).encode("utf-8") + b"\n")
        except OSError:
            return None  # the standby died before taking the work: do it here
        reply = b""
        try:
            while chunk := connection.recv(64):
                reply += chunk
        except OSError:
            pass
    # No exit code back: the standby died while working.
    return int(reply) if reply.strip().isdigit() else 1


def _read_request(connection: socket.socket) -> dict:
    data = b""
    while not data.endswith(b"\n"):
        chunk = connection.recv(1 << 16)
        if not chunk:
            raise ConnectionError("the worker went away before handing over")
        data += chunk
    return json.loads(data)


def import_modules(names: Sequence[str]) -> None:
    """Import the modules `names`: what unpickling a command's DoFns imports. The command names
    them (the runner knows no stage)."""
    for name in names:
        importlib.import_module(name)


def _import_worker_modules(preload: Sequence[str]) -> None:
    """What a worker imports before its first bundle: Beam's worker (the slow part) and the
    command's modules `preload`."""
    from apache_beam.runners.worker import sdk_worker_main  # noqa: F401

    import_modules(preload)


def standby(directory: str, index: str, preload: Sequence[str] = ()) -> None:
    """A standby worker: Beam and the command's modules `preload` imported, waiting for its
    worker's environment. Exits by itself when the launcher that started it is gone."""
    parent = os.getppid()
    socket_path = os.path.join(directory, f"{_WAITING}{index}")
    starting = os.path.join(directory, f"{_STARTING}{index}")
    # Workers that come while this one imports wait for it. Written whole, then renamed: a
    # worker that read the file half-written (empty) took this standby for dead.
    written = os.path.join(directory, f"writing-{index}")
    with open(written, "w") as f:
        f.write(str(os.getpid()))
    os.rename(written, starting)
    _quiet_logging()
    _import_worker_modules(preload)

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    bound = os.path.join(directory, f"bound-{index}")  # not claimable yet
    listener.bind(bound)
    listener.listen(1)
    os.rename(bound, socket_path)  # claimable once listening
    os.unlink(starting)
    listener.settimeout(1.0)
    while True:
        try:
            connection, _ = listener.accept()
            break
        except TimeoutError:
            if os.getppid() != parent:
                os._exit(0)  # the launcher is gone and nobody claimed this standby
    listener.close()
    connection.settimeout(None)
    try:
        request = _read_request(connection)
    except (OSError, ValueError):
        os._exit(1)
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None  # TMPDIR is the run's now
    # The worker that handed over waits on the connection until this one is done; if it is
    # killed (its runner gave up on it), this one must go too.
    threading.Thread(target=_exit_when_closed, args=(connection,), daemon=True).start()
    code = 0
    try:
        run_worker()
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:
        code = 1
    try:
        connection.sendall(str(code).encode())
    finally:
        os._exit(code)


def _exit_when_closed(connection: socket.socket) -> None:
    try:
        while connection.recv(1):
            pass
    except OSError:
        pass
    os._exit(1)


def _can_fork() -> bool:
    """Whether this process may fork its standbys: Linux (the children list /proc/self/fd) and
    no Python thread but this one. The native threads a launcher has by then are fork-aware:
    numpy's OpenBLAS pool and pyarrow's jemalloc background thread register pthread_atfork
    handlers, as glibc's malloc does; gRPC, which is not, has started nothing before the run."""
    return hasattr(os, "fork") and os.path.isdir("/proc/self/fd") and threading.active_count() == 1


def _close_inherited_descriptors() -> None:
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2:
            try:
                os.close(fd)
            except OSError:
                pass  # the listing's own descriptor, closed already


def apply_mmap_threshold() -> None:
    """glibc reads MALLOC_MMAP_THRESHOLD_ when a process starts; a forked standby starts with
    the launcher's setting, and the launcher with none, so each applies the run's
    (pipelines/runner/runners.py says why) itself."""
    threshold = os.environ.get("MALLOC_MMAP_THRESHOLD_")
    if not threshold:
        return
    try:
        ctypes.CDLL(None).mallopt(_M_MMAP_THRESHOLD, int(threshold))  # this process's libc
    except (OSError, AttributeError, ValueError):
        pass  # not glibc: its allocator has no such setting


def _forked_standby(directory: str, index: str, verbose: bool, preload: Sequence[str]) -> None:
    """The child of a fork: a standby with the launcher's modules and loaded state. Never
    returns (the launcher's stack must not unwind twice)."""
    code = 1
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # see __main__ below
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _close_inherited_descriptors()
        logging.getLogger().handlers.clear()  # the launcher's, on its stderr
        os.environ[VERBOSE_ENV] = "1" if verbose else "0"
        apply_mmap_threshold()
        sys.argv = [__file__, "--standby", directory, index, ",".join(preload)]
        standby(directory, index, preload)
        code = 0
    finally:
        os._exit(code)


class _ForkedProcess:
    """A forked standby, with the part of Popen's interface StandbyWorkers uses."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"standby {self.pid}", timeout)
            time.sleep(0.02)
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class StandbyWorkers:
    """`count` standby worker processes, started now, for a local multi_processing run; the
    runner's workers take them over (see the module docstring). `env()` is what the launcher
    adds to its environment for the run; `close()` stops the ones never claimed.

    `preload`: the modules unpickling the command's DoFns imports, imported by each standby
    before it is claimed. `warm`: loads, in this process, what the workers would each load
    again (the tokenizer's encoder, the language model); given, the standbys are forked after
    it runs, when this process has a single thread. `forked` says whether they were."""

    def __init__(self, count: int, verbose: bool, warm=None, preload: Sequence[str] = ()):
        from common.output_dir import try_lock_directory

        self.directory = tempfile.mkdtemp(prefix=STANDBY_PREFIX)
        self._lock = try_lock_directory(self.directory)  # just made: nobody else holds it
        self.processes: list = []
        self.forked = False
        if warm is not None:
            _import_worker_modules(preload)  # for the children
            warm()
            self.forked = _can_fork()
        env = dict(os.environ, **{VERBOSE_ENV: "1" if verbose else "0"})
        for i in range(count):
            if self.forked:
                sys.stdout.flush()
                sys.stderr.flush()
                with warnings.catch_warnings():
                    # Python 3.12+ warns of any other OS thread; _can_fork says why those are
                    # safe here.
                    warnings.simplefilter("ignore", DeprecationWarning)
                    pid = os.fork()
                if pid == 0:
                    _forked_standby(self.directory, str(i), verbose, preload)
                self.processes.append(_ForkedProcess(pid))
                continue
            command = [sys.executable, "-m", "pipelines.runner.beam_worker", "--standby"]
            self.processes.append(
                subprocess.Popen(
                    [*command, self.directory, str(i), ",".join(preload)], env=env,
                    stdin=subprocess.DEVNULL,
                )
            )

    def env(self) -> dict[str, str]:
        return {STANDBY_DIR_ENV: self.directory}

    def claimed(self) -> int:
        """How many standbys workers have taken over so far."""
        return sum(name.startswith("claimed-") for name in os.listdir(self.directory))

    def close(self) -> None:
        """Stop the standbys no worker claimed; give the others (workers of a run that ended)
        a few seconds to exit on their own."""
        names = os.listdir(self.directory)
        claimed = {name.rsplit("-", 1)[1] for name in names if name.startswith("claimed-")}
        deadline = time.monotonic() + 5
        for i, process in enumerate(self.processes):
            if str(i) not in claimed:
                process.kill()
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None


if __name__ == "__main__":
    # A Ctrl-C reaches every process of the terminal's group: the launcher stops the run and
    # its workers with it, in one line, where each worker would print a traceback of its own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if len(sys.argv) == 5 and sys.argv[1] == "--standby":
        standby(sys.argv[2], sys.argv[3], tuple(filter(None, sys.argv[4].split(","))))
    else:
        main()
