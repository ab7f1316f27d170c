"""The in-process tests of what tests/integration/test_source_options.py covers (that file holds the
tests that start a process or run a Beam pipeline, and says what they cover)."""

from __future__ import annotations

import pytest


def test_each_source_reads_the_options_it_declares():
    """A key a source declares passes; the same key given to a source that does not read it
    is refused (json_keys means nothing to webtext)."""
    from pipelines.sources import check_options, get_source

    check_options(get_source("jsonl"), {"json_keys": "u", "max_document_bytes": "1KiB"})
    check_options(get_source("wikipedia"), {"wiki_task_mb": "8", "wiki_index": "x.txt"})
    with pytest.raises(ValueError, match="--source webtext reads no such option; it reads:"):
        check_options(get_source("webtext"), {"json_keys": "text"})
    with pytest.raises(ValueError, match="'task_bytes'.*did you mean 'wiki_task_mb'|"
                                         "'task_bytes'.*it reads: max_document_bytes, "
                                         "wiki_index, wiki_task_mb"):
        check_options(get_source("wikipedia"), {"task_bytes": "1MiB"})
