"""How every command stops on a signal: SIGINT (Ctrl-C), SIGTERM (kill, a scheduler) and SIGHUP
(the terminal or ssh session the command runs in closing) end it at any moment, its start-up
included, with one line on stderr and exit status 128 + the signal's number (130, 143, 129),
never a traceback.

`exit_on_stop_signals(prog)` is each entry point's first statement, before its heavy imports
(torch, Beam). The handler raises `Stopped`, a SystemExit: it unwinds through `finally` blocks
(locks released, temporary files removed), no `except Exception` catches it, and the
interpreter exits with its status without a traceback. The line is printed at exit, unless
code that knows more (the trainer: the checkpoint to resume from) printed its own and called
`reported()`. A command's run phase may put handlers of its own in place (the trainer saves at
the next step, preprocess stops its workers) and puts these back after it.

Imports only the standard library: it runs before anything else is loaded.
"""

from __future__ import annotations

import atexit
import signal
import sys
import threading

# What each stop signal is called in the one line.
STOP_SIGNALS = {
    signal.SIGINT: "interrupted (SIGINT)",
    signal.SIGTERM: "terminated (SIGTERM)",
    signal.SIGHUP: "hung up (SIGHUP)",
}


class Stopped(SystemExit):
    """A stop signal arrived: exit status 128 + its number."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum


class _State:
    prog = ""
    pending: int | None = None  # the signal that stops the process, until its line is printed


def stop_line(prog: str, signum: int) -> str:
    return f"{prog}: {STOP_SIGNALS[signum]}; stopped"


def _stop(signum: int, frame) -> None:
    if _State.pending is not None:
        return  # already stopping: the cleanup on the way out finishes first
    _State.pending = signum
    raise Stopped(signum)


def _report() -> None:
    if _State.pending is not None:
        print(stop_line(_State.prog, _State.pending), file=sys.stderr, flush=True)
        _State.pending = None


def reported() -> None:
    """The caller printed the stop's line itself (one that says more); none is added at exit."""
    _State.pending = None


def exit_on_stop_signals(prog: str) -> None:
    """Make SIGINT, SIGTERM and SIGHUP stop this process (``prog``: the command as the user
    typed it, for the line). From the main thread only, where Python runs signal handlers. A
    signal the process was started ignoring stays ignored (``nohup`` ignores SIGHUP, a shell's
    ``&`` SIGINT: the user asked the command to outlive them)."""
    if threading.current_thread() is not threading.main_thread():
        return
    if not _State.prog:
        atexit.register(_report)
    _State.prog = prog
    for signum in STOP_SIGNALS:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _stop)
