"""Logging of skipped records that cannot flood the log: per reason, the first `FIRST` records
are logged one by one, then one line each time that reason's count doubles. The totals are
counted apart from the log (stats.json `failed` / `dropped`), so a line left out loses nothing:
a file of 67 million unreadable lines logs ~40 lines a process, not 67 million."""

from __future__ import annotations

import collections
import logging
import threading

FIRST = 20


class ReasonLog:
    """One process's log of skips under `logger`, limited per reason (thread-safe: Beam runs
    bundles in threads of one process)."""

    def __init__(self, logger: logging.Logger, first: int = FIRST) -> None:
        self.logger = logger
        self.first = first
        self.seen: collections.Counter = collections.Counter()
        self._lock = threading.Lock()

    def warning(self, reason: str, message: str, *args: object) -> None:
        """Log `message % args` if it is one of the first of `reason`, else count it, with one
        line at each doubling of the count."""
        with self._lock:
            self.seen[reason] += 1
            seen = self.seen[reason]
        if seen <= self.first:
            self.logger.warning(message, *args)
        elif seen & (seen - 1) == 0:  # a power of two
            self.logger.warning(
                "%d records skipped as %s in this process so far; the first %d were logged, the "
                "rest are counted (stats.json holds the run's total)", seen, reason, self.first)
