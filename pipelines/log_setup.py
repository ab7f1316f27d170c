"""The logging set-up of our commands and their workers: our own messages on stderr, in one
format, Beam's only on request (--verbose)."""

from __future__ import annotations

import logging

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
