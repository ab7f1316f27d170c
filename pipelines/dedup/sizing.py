"""dedup's connected-components rounds sized to a bound on the documents of its input (the
bound: pipelines/sources/document_bound.py; the rounds: `DedupConfig.with_rounds_for`)."""

from __future__ import annotations

import logging

from pipelines.dedup.config import DedupConfig

LOG = logging.getLogger(__name__)


def sized_config(config: DedupConfig, max_documents: int | None, input_name: str) -> DedupConfig:
    """`config` with its components rounds decided for at most `max_documents` documents. The
    bound is logged at DEBUG: this runs before the output is claimed, where a refused run prints
    one line; Deduplicate logs the rounds when the graph is built."""
    resolved = config.with_rounds_for(max_documents)
    if config.cc_rounds is None:
        bound = "an unknown number of" if max_documents is None else f"at most {max_documents:,}"
        LOG.debug(
            "dedup: %d connected-components rounds (%s documents from %s)",
            resolved.cc_rounds,
            bound,
            input_name,
        )
    return resolved
