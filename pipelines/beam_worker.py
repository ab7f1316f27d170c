"""The worker process of a local multi_processing run: Beam's own SDK worker, minus its noise.

Beam starts each worker as `python -m apache_beam.runners.worker.sdk_worker_main`, which, on the
terminal the run shares, logs messages meant for Dataflow operators ("apitools not found" while
importing, "No semi_persistent_directory found" when starting). Here logging is set up before
Beam is imported: our own loggers (`pipelines.*`) print as in the launcher, Beam's are kept out
unless the launcher was given --verbose. Errors still reach the launcher, which reports them.
"""

from __future__ import annotations

import logging
import os
import sys

# Set by the launcher for its workers: "1" when the run was given --verbose.
VERBOSE_ENV = "SHARDSMITH_VERBOSE"
LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"


class OwnMessagesOnly(logging.Filter):
    """Passes records of the `pipelines` loggers (ours) only."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.name == "pipelines" or record.name.startswith("pipelines.")


def add_stderr_handler(verbose: bool, level: int) -> logging.Handler:
    """A stderr handler on the root logger (returned, for the caller to remove); without
    `verbose` it prints only our own messages."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    if not verbose:
        handler.addFilter(OwnMessagesOnly())
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level)
    logging.getLogger("apache_beam").setLevel(logging.WARNING)  # its INFO is per gRPC channel
    return handler


def main() -> None:
    verbose = os.environ.get(VERBOSE_ENV) == "1"
    add_stderr_handler(verbose, logging.WARNING)  # holds on to the real stderr
    if not verbose:
        # Beam's worker also prints tracebacks straight to stderr (an instruction that failed;
        # every in-flight one when the launcher stops). The error goes back to the launcher,
        # which reports it in one line.
        sys.stderr = open(os.devnull, "w")  # for the life of the process
    from apache_beam.runners.worker import sdk_worker_main

    sdk_worker_main.main(sys.argv)


if __name__ == "__main__":
    main()
