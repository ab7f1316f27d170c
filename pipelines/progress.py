"""Live progress of a local run: workers write heartbeat files, the launcher sums and prints them.

The Python FnApiRunner (what a local DirectRunner run uses) runs a pipeline to completion
inside `run()` and only reports Beam metrics once it is done, and with multi_processing the
work happens in other processes. So each worker process keeps running totals (of the counts its
stages make through stage.CountingDoFn.stat_update that HEARTBEAT names) and rewrites one
small JSON file (atomically, at most once a second) in a directory the launcher chose; the
launcher's display thread sums those files every few seconds. Totals can overcount a bundle
that was retried: they are for watching a run, `stats.json` is the account.

The same thread watches for a run that makes no progress: when no total has moved for
`stall_timeout` seconds (a worker stopped, hung in a read, or deadlocked), it calls `on_stall`
with one line naming the stage the last counter to move belongs to; the launcher then ends
the run (pipelines/preprocess.py).
"""

from __future__ import annotations

import collections
import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import TextIO

from common.storage import write_text_atomic

# What the display shows, in order: (counter, label, is a byte count).
FIELDS = (
    ("tasks", "tasks", False),
    ("docs_read", "docs read", False),
    ("bytes_read", "read", True),
    ("docs_tokenized", "tokenized", False),
    ("tokens", "tokens", False),
    ("shards", "shards", False),
)
_FLUSH_SECONDS = 1.0
# The heartbeat's counter each stats.json counter moves, where it shows one (a stage counts
# through CountingDoFn.stat_update, pipelines/stage.py, which feeds both).
HEARTBEAT = {
    "tasks_planned": "tasks_planned",
    "tasks_read": "tasks",
    "docs_read": "docs_read",
    "bytes_read": "bytes_read",
    "docs_tokenized": "docs_tokenized",
    "tokens_tokenized": "tokens",
    "shards_written": "shards",
}
# The stage each counter is moved by, for naming the stage a stalled run stopped in.
STAGES = {"tasks_planned": "plan", "tasks": "read", "docs_read": "read", "bytes_read": "read",
          "docs_tokenized": "tokenize", "tokens": "tokenize", "shards": "write"}
# How often the stall watch looks when no status line is printed
_STALL_POLL_SECONDS = 5.0


class ProgressReporter:
    """Running totals of one worker process, mirrored to `<directory>/<pid>-<random>.json`."""

    def __init__(self, directory: str):
        self.directory = directory
        self.pid = os.getpid()
        self.path = os.path.join(directory, f"{self.pid}-{uuid.uuid4().hex[:8]}.json")
        self.totals: collections.Counter = collections.Counter()
        self._last_flush = 0.0
        self._lock = threading.Lock()  # multi_threading workers share one reporter

    def add(self, **counts: int) -> None:
        with self._lock:
            self.totals.update(counts)
            now = time.monotonic()
            if now - self._last_flush >= _FLUSH_SECONDS:
                self._last_flush = now
                self._write()

    def flush(self) -> None:
        with self._lock:
            self._write()

    def _write(self) -> None:
        try:  # a heartbeat, not an account: no fsync
            write_text_atomic(self.path, json.dumps(dict(self.totals)), sync=False)
        except OSError:
            pass  # the launcher removed the directory: the run is over, nobody is watching


_REPORTERS: dict[str, ProgressReporter] = {}
_REPORTERS_LOCK = threading.Lock()


def reporter(directory: str | None) -> ProgressReporter | None:
    """This process's reporter for `directory` (one per process), or None when not watched."""
    if not directory or not os.path.isdir(directory):
        return None
    with _REPORTERS_LOCK:
        found = _REPORTERS.get(directory)
        if found is None or found.pid != os.getpid():
            # A forked worker inherits the parent's table; it needs its own file.
            found = _REPORTERS[directory] = ProgressReporter(directory)
        return found


def read_totals(directory: str) -> dict[str, int]:
    """The sum of every worker's heartbeat file in `directory`."""
    totals: collections.Counter = collections.Counter()
    try:
        names = os.listdir(directory)
    except OSError:
        return {}
    for name in names:
        if not name.endswith(".json"):
            continue
        try:
            with open(os.path.join(directory, name), encoding="utf-8") as f:
                totals.update(json.load(f))
        except (OSError, ValueError):
            continue  # being replaced right now; the next poll reads it
    return dict(totals)


def _human(n: float, is_bytes: bool) -> str:
    if is_bytes:
        return f"{n / 1e6:,.1f} MB"
    if n >= 1e6:
        return f"{n / 1e6:,.2f}M"
    return f"{int(n):,}"


def format_progress(totals: Mapping[str, int], elapsed: float,
                    idle: float | None = None, stall_timeout: float = 0.0) -> str:
    """One status line, e.g. `[  12s] | tasks 3/10 | docs read 1,234 | read 5.6 MB (0.47 MB/s)
    ... | idle 0s of 900s`: tasks read of those planned so far (files are split into tasks
    while others are read, so the second number may still grow; before any is planned, the
    tasks read alone); the last part, with a stall timeout, is how long no total has moved."""
    parts = [f"[{elapsed:5.0f}s]"]
    for key, label, is_bytes in FIELDS:
        value = totals.get(key, 0)
        if key == "tasks":
            planned = totals.get("tasks_planned", 0)
            parts.append(f"tasks {value}/{planned}" if planned else f"tasks {value}")
            continue
        text = f"{label} {_human(value, is_bytes)}"
        if key == "bytes_read" and elapsed > 0:
            text += f" ({value / 1e6 / elapsed:,.2f} MB/s)"
        parts.append(text)
    if stall_timeout > 0 and idle is not None:
        parts.append(f"idle {idle:.0f}s of {stall_timeout:.0f}s")
    return " | ".join(parts)


class ProgressDisplay(threading.Thread):
    """Prints a status line every `interval` seconds (none when 0) and watches for a stall
    (`stall_timeout` seconds without progress; 0: no watch) until `stop()` (daemon thread)."""

    def __init__(
        self,
        directory: str,
        interval: float = 5.0,
        stream: TextIO | None = None,
        stall_timeout: float = 0.0,
        on_stall: Callable[[str], None] | None = None,
    ):
        super().__init__(daemon=True, name="progress")
        self.directory = directory
        self.interval = interval
        self.stream = stream or sys.stderr
        self.stall_timeout = stall_timeout
        self.on_stall = on_stall
        self.started_at = self.moved_at = time.monotonic()
        self.totals: dict[str, int] = {}
        self.last_stage = "plan"
        self.lines_printed = 0
        self._stop_event = threading.Event()

    def poll(self) -> float:
        """Read the totals; the seconds since one last moved."""
        totals = read_totals(self.directory)
        now = time.monotonic()
        moved = [key for key, value in totals.items() if value != self.totals.get(key, 0)]
        if moved:
            self.moved_at = now
            self.last_stage = max((STAGES.get(key, "read") for key in moved),
                                  key=list(dict.fromkeys(STAGES.values())).index)
        self.totals = totals
        return now - self.moved_at

    def line(self) -> str:
        idle = self.poll()
        return format_progress(self.totals, time.monotonic() - self.started_at, idle,
                               self.stall_timeout)

    def stall_line(self, idle: float) -> str:
        return (f"no progress for {idle:.0f}s in the {self.last_stage} stage (--stall-timeout "
                f"{self.stall_timeout:g}s): a worker is stopped or hung")

    def run(self) -> None:
        every = self.interval if self.interval > 0 else _STALL_POLL_SECONDS
        if self.stall_timeout > 0:
            every = min(every, max(self.stall_timeout / 4, 0.1))
        next_line = time.monotonic() + self.interval
        while not self._stop_event.wait(every):
            idle = self.poll()
            if self.interval > 0 and time.monotonic() >= next_line:
                print(format_progress(self.totals, time.monotonic() - self.started_at, idle,
                                      self.stall_timeout),
                      file=self.stream, flush=True)
                self.lines_printed += 1
                next_line += self.interval
            if self.stall_timeout > 0 and idle >= self.stall_timeout and self.on_stall:
                self.on_stall(self.stall_line(idle))
                return

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive() and self is not threading.current_thread():
            self.join(timeout=max(self.interval, _STALL_POLL_SECONDS) + 1)
