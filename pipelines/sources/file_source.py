"""The steps every file-based source shares: one read task per input file (`plan_file_tasks`),
the file's name for document ids (`task_name`)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from pipelines.document import ReadTask
from pipelines.io import match_inputs
from pipelines.sources.input_errors import printable_name
from pipelines.sources.sizes import max_document_bytes

# Set by plan_file_tasks: the file's name relative to the input pattern, used in document ids so
# that ids do not depend on where the corpus is mounted.
RELATIVE_NAME_OPTION = "relative_name"
# Also set by plan_file_tasks: the file's size, so that splitting never opens a small file.
FILE_BYTES_OPTION = "file_bytes"

_WILDCARD = re.compile(r"[*?\[]")


def _pattern_base(pattern: str) -> str:
    """The directory part of a pattern before its first wildcard, ending in '/'."""
    wildcard = _WILDCARD.search(pattern)
    prefix = pattern[: wildcard.start()] if wildcard else pattern
    return prefix[: prefix.rfind("/") + 1]


def relative_name(path: str, base: str) -> str:
    """`path` relative to the pattern's base directory (its basename if it is not under it), as
    printable_name makes it."""
    if base and path.startswith(base):
        return printable_name(path[len(base):])
    if "://" not in path and base and "://" not in base:
        relative = os.path.relpath(os.path.abspath(path), os.path.abspath(base))
        if not relative.startswith(".."):
            return printable_name(relative.replace(os.sep, "/"))
    return printable_name(path.rstrip("/").rsplit("/", 1)[-1])


def plan_file_tasks(source: str, pattern: str, options: Mapping[str, str]) -> list[ReadTask]:
    """One ReadTask per file matching `pattern` (a glob, a file, or a directory = all files
    under it), sorted by path. A source may split a big file's task further (sources/ranges.py)
    where its format allows."""
    max_document_bytes(options)  # a bad option fails on the launcher, not on every worker
    local_dir = "://" not in pattern and os.path.isdir(pattern)
    if local_dir or pattern.endswith("/"):
        pattern = pattern.rstrip("/") + "/**"
    base = _pattern_base(pattern)
    files = [f for f in match_inputs(pattern) if not ("://" not in f.path and os.path.isdir(f.path))]
    if not files:
        raise FileNotFoundError(f"no input files match {pattern!r} (only directories)")
    return [
        ReadTask(source=source, path=f.path,
                 options={**options, RELATIVE_NAME_OPTION: relative_name(f.path, base),
                          FILE_BYTES_OPTION: str(f.size_bytes)})
        for f in files
    ]


def task_name(task: ReadTask) -> str:
    """The name of the task's file to use in document ids (set by plan_file_tasks)."""
    name = task.options.get(RELATIVE_NAME_OPTION) or task.path.rstrip("/").rsplit("/", 1)[-1]
    return printable_name(name)
