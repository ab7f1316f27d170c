"""Input sources, grouped by family: wikipedia/, books/, web/ (webtext), files/ (jsonl, parquet).
The registry maps each --source value to its module:

    from pipelines.sources import SOURCES, get_source, split_task
    tasks = get_source("wikipedia").plan("dumps/*.xml.bz2", {})

A source module has
- `NAME`, its --source value, and `TRAITS`, a `traits.SourceTraits`: its clean preset, default
  minimum tokens, task size option, the other --source-option keys it reads (any other key is
  refused by `check_options`) and how dedup bounds its documents (read by `source_traits`;
  nothing outside this package compares a source's name);
- `plan(pattern, options) -> list[ReadTask]` (cheap: a listing, an index) and `read(task)`,
  which yields Documents and a Failure for each thing it could not read;
- optionally `check_input(path, options)`, which the launcher calls on the first input file
  so that options that cannot read it (a text field it lacks) fail before the run, and
  `split(task) -> list[ReadTask]`, which cuts one big file's task into several (it
  may open the file: it runs on workers, one file at a time), `check_options(options)`, which
  the launcher calls so that a bad option fails before the run, and, where its tasks are not
  byte ranges of a file (Parquet's are row groups), `input_bytes(task)`, the bytes of input a
  task reads (see `input_bytes`).
A source that reads a file (or a range of one) a task gets check_options, plan and read (the
opening, and one Failure for a file that breaks off or cannot be read) from
`file_source.FileSource`, and its splitting from `ranges`; the readers' shared pieces are `input_errors`, `compression`,
`tar_members`, `reading`, `json_lines` and `sizes`. A family imports these, never another
family, and none of them imports a family. README's "Adding a source" says how to add one.

How big a task is: each source reads an upper bound from its options (its `TRAITS.task_size`:
`task_bytes`, 64 MiB by default; Wikipedia's `wiki_task_mb`), and the launcher lowers it for the
run at hand (`sized_read_options`) so that every worker gets several tasks where the input allows.

`SOURCES` imports a module the first time it is looked up, so listing the names (for --help)
or using one source does not import every reader's dependencies (pyarrow, warcio, ...).
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterator, Mapping, Sequence
from types import ModuleType

from pipelines.document import ReadTask
from pipelines.sources.traits import SourceTraits

# A run is planned for this many tasks per worker where its input allows: with one task per
# worker, the worker that draws the biggest file or the slowest text finishes alone.
TASKS_PER_WORKER = 4
# ...but no task under this: each costs a bundle, an open and a format sniff, and a range
# reader re-reads the line or member that straddles its start.
MIN_TASK_BYTES = 4 << 20
# --source value -> module under pipelines.sources that implements it (the one place that
# names every source).
_MODULES = {
    "wikipedia": "wikipedia.wikipedia",
    "books": "books.books",
    "webtext": "web.webtext",
    "jsonl": "files.jsonl",
    "parquet": "files.parquet",
}


class _Registry(Mapping):
    def __getitem__(self, name: str) -> ModuleType:
        if name not in _MODULES:
            raise KeyError(name)
        module = importlib.import_module(f"{__name__}.{_MODULES[name]}")
        if getattr(module, "NAME", None) != name:
            raise ImportError(
                f"{module.__name__}.NAME is {getattr(module, 'NAME', None)!r}, not {name!r}"
            )
        if not isinstance(getattr(module, "TRAITS", None), SourceTraits):
            raise ImportError(f"{module.__name__}.TRAITS is not a SourceTraits")
        return module

    def __iter__(self) -> Iterator[str]:
        return iter(_MODULES)

    def __len__(self) -> int:
        return len(_MODULES)


SOURCES: Mapping[str, ModuleType] = _Registry()


def get_source(name: str) -> ModuleType:
    """The module for a --source value; ValueError naming the known ones otherwise."""
    if name not in _MODULES:
        raise ValueError(f"unknown source {name!r}; known: {', '.join(sorted(_MODULES))}")
    return SOURCES[name]


def source_traits(name: str) -> SourceTraits:
    """The traits the source of a --source value declares (ValueError for an unknown name)."""
    return get_source(name).TRAITS


def unknown_option_error(source: str, key: str, known: tuple[str, ...]) -> str:
    """The one line refusing --source-option `key`, which --source `source` does not read: the
    closest key it reads, and all of them."""
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    guess = f"did you mean {close[0]!r}? " if close else ""
    return (
        f"--source-option {key!r}: --source {source} reads no such option; {guess}"
        f"it reads: {', '.join(known)}"
    )


def check_options(source: ModuleType, options: Mapping[str, str]) -> None:
    """ValueError for a bad source option: a key the source does not declare it reads
    (`SourceTraits.option_keys`: a misspelled key would otherwise leave its default in force),
    then the source's own `check_options` if it has one."""
    known = source.TRAITS.option_keys()
    for key in options:
        if key not in known:
            raise ValueError(unknown_option_error(source.NAME, key, known))
    check = getattr(source, "check_options", None)
    if check is not None:
        check(options)


def check_input(source: ModuleType, paths: Sequence[str], options: Mapping[str, str]) -> None:
    """ValueError, one line, where the source's `check_input` finds that its options cannot
    read the first input file (JSON lines whose first record has no field `json_keys` names),
    before the run: the records would each fail the same way. A source without one, or no
    input, passes."""
    check = getattr(source, "check_input", None)
    if check is not None and paths:
        check(paths[0], options)


def split_task(source: ModuleType, task: ReadTask) -> list[ReadTask]:
    """The task cut by the source's `split`, or the task itself for a source without one."""
    split = getattr(source, "split", None)
    return [task] if split is None else list(split(task))


def input_bytes(source: ModuleType, task: ReadTask) -> int:
    """Bytes of input `task` reads (what --max-expansion scales): the source's `input_bytes` if
    it has one, else the task's byte range of its file (a whole file for an unsplit task)."""
    count = getattr(source, "input_bytes", None)
    if count is None:
        from pipelines.sources.ranges import range_input_bytes  # imported when used, as SOURCES

        count = range_input_bytes
    return int(count(task))


def task_size(input_bytes: int, workers: int, upper: int) -> int:
    """Bytes a task of this run reads at most: the input over TASKS_PER_WORKER tasks a worker,
    never under MIN_TASK_BYTES, never over `upper` (the source's own bound)."""
    share = -(-input_bytes // max(1, workers * TASKS_PER_WORKER))  # rounded up
    return min(upper, max(MIN_TASK_BYTES, share))


def sized_read_options(
    source: str, options: Mapping[str, str], input_bytes: int, workers: int | None
) -> dict[str, str]:
    """`options` with the source's task size set for a run of `input_bytes` on `workers`
    (`task_size`); unchanged when the worker count is not known. The same documents come out
    whatever the size: tasks only decide who reads which bytes."""
    if not workers:
        return dict(options)
    bound = source_traits(source).task_size
    size = task_size(input_bytes, workers, bound.bytes(options))
    return {**options, bound.option: bound.option_value(size)}
