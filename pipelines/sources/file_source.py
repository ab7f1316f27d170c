"""The steps every file-based source shares: one read task per input file (`plan_file_tasks`),
the file's name for document ids (`task_name`), and a source's check_options, plan and read
prelude (`FileSource`)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import BinaryIO

from common.storage import is_url
from pipelines.document import Document, Failure, ReadTask
from pipelines.inputs import common_base, match_patterns
from pipelines.io import open_input
from pipelines.sources.input_errors import InputError, broken_off, failure, printable_name
from pipelines.sources.sizes import max_document_bytes
from pipelines.sources.traits import SourceTraits

# Set by plan_file_tasks: the file's name relative to the input patterns' common base, used in
# document ids so that ids do not depend on where the corpus is mounted.
RELATIVE_NAME_OPTION = "relative_name"
# Also set by plan_file_tasks: the file's size, so that splitting never opens a small file.
FILE_BYTES_OPTION = "file_bytes"

def relative_name(path: str, base: str) -> str:
    """`path` relative to the patterns' base directory (its basename if it is not under it), as
    printable_name makes it."""
    if base and path.startswith(base):
        return printable_name(path[len(base):])
    if base and not is_url(path) and not is_url(base):
        relative = os.path.relpath(os.path.abspath(path), os.path.abspath(base))
        if not relative.startswith(".."):
            return printable_name(relative.replace(os.sep, "/"))
    return printable_name(path.rstrip("/").rsplit("/", 1)[-1])


def plan_file_tasks(
    source: str, patterns: str | Sequence[str], options: Mapping[str, str]
) -> list[ReadTask]:
    """One ReadTask per file the patterns match (globs, files, directories = all files under
    them; each file once: pipelines/inputs.py), sorted by path. A source may split a big file's
    task further (sources/ranges.py) where its format allows."""
    max_document_bytes(options)  # a bad option fails on the launcher, not on every worker
    base = common_base(patterns)
    files = match_patterns(patterns)
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


def check_file_options(
    options: Mapping[str, str],
    traits: SourceTraits,
    checks: tuple[Callable[[Mapping[str, str]], object], ...] = (),
) -> None:
    """ValueError for a bad option of a source that reads files: its own `checks` first, then
    the ones every such source has, its task size option and max_document_bytes."""
    for check in (*checks, traits.task_size.bytes, max_document_bytes):
        check(options)


@dataclasses.dataclass(frozen=True)
class FileSource:
    """check_options, plan and read of a source that reads a file (or a range of one) a task.
    The source gives what is its own: its option checks, and `read_file(raw, task)`, what it
    reads from the task's opened file. Its module binds the steps to its names:

        _FILES = FileSource(NAME, TRAITS, _read_file, checks=(json_keys,))
        check_options, plan, read = _FILES.check_options, _FILES.plan, _FILES.read
    """

    name: str
    traits: SourceTraits
    read_file: Callable[[BinaryIO, ReadTask], Iterable[Document | Failure]]
    checks: tuple[Callable[[Mapping[str, str]], object], ...] = ()

    def check_options(self, options: Mapping[str, str]) -> None:
        check_file_options(options, self.traits, self.checks)

    def plan(self, patterns: str | Sequence[str], options: Mapping[str, str]) -> list[ReadTask]:
        """One task per file the patterns match (plan_file_tasks), once the options are
        checked: a bad option fails on the launcher, not on every worker."""
        self.check_options(options)
        return plan_file_tasks(self.name, patterns, options)

    def read(self, task: ReadTask) -> Iterator[Document | Failure]:
        """What `read_file` yields from the task's file. A file that breaks off (an InputError)
        keeps what was read before and becomes one Failure with the input it lost; a file that
        cannot be opened or read (an OSError) one Failure losing all of it."""
        try:
            with open_input(task.path) as raw:
                yield from self.read_file(raw, task)
        except InputError as error:
            yield broken_off(error, task.path)
        except OSError as error:
            yield failure(task.path, "unreadable_file", str(error), lost_from=0)
