"""The inputs a command reads, as its user names them, resolved by one rule for every command that
reads files (preprocess, dedup):

- `--input` takes one or more paths, globs, directories (every file under one) or URLs
  (gs://bucket/dumps/*.xml.bz2, any fsspec URL): what a shell expands from an unquoted glob and
  a quoted glob read the same files. It may be given several times.
- `--input-list FILE` names a UTF-8 file holding one path, glob or URL a line (blank lines and
  lines starting with '#' are skipped), for inputs too many for a command line. A relative entry
  is relative to the list file's own folder, so that a list works from any working directory.
  The two may be combined: --input's patterns come first.
- Every pattern must match at least one file (a pattern matching nothing is almost always a
  typo, and a run of what the other patterns match would hide it); a file matched twice (named
  twice, spelled two ways, reached through a link, or by two patterns) is read once, under the
  first name that matched it: a local input is identified by its resolved path.
- A folder is every file under it, links to folders followed (`pipelines/local_files.py`): a
  link that loops, or a folder that cannot be listed, is refused by name.
"""

from __future__ import annotations

import argparse
import logging
import os
import posixpath
import re
from collections.abc import Sequence

from common.storage import is_url, local_path
from pipelines.io import InputFile, match_inputs, open_input

INPUT_HELP = (
    "one or more paths, globs (quoted or expanded by the shell), directories or "
    "URLs (gs://, s3://, any fsspec URL); repeatable; a file matched twice is read once"
)
INPUT_LIST_HELP = (
    "a file listing inputs, one path, glob or URL a line ('#' comments and blank lines "
    "skipped; a relative path is relative to the list file's folder); combines with --input"
)
# argparse keywords of --input: every word up to the next flag is a pattern, and a repeated
# flag adds its words (a stray word after --input PATH is a pattern, so it must match a file).
INPUT_ARGUMENT = {"nargs": "+", "action": "extend", "metavar": "PATH"}

LOG = logging.getLogger(__name__)
_WILDCARD = re.compile(r"[*?\[]")
# A list of ten million paths is ~1 GB; past this, the file given is no list (a dump named by
# mistake), and reading it whole would fill the launcher's memory.
MAX_LIST_BYTES = 1 << 30


def add_input_arguments(parser: argparse.ArgumentParser, what: str = "input files") -> None:
    """--input and --input-list on a command's own argparse parser (preprocess declares the
    same flags as config fields, for Beam's parser); `what`: the files, for the help."""
    parser.add_argument("--input", help=f"{what}: {INPUT_HELP}", **INPUT_ARGUMENT)
    parser.add_argument("--input-list", metavar="FILE", help=INPUT_LIST_HELP)


def parsed_inputs(args: argparse.Namespace) -> tuple[str, ...]:
    """The patterns `add_input_arguments`' flags name (`input_patterns`); ValueError when
    neither is given."""
    if not (args.input or args.input_list):
        raise ValueError("missing required option(s): --input (or --input-list)")
    return input_patterns(args.input, args.input_list)


def as_patterns(inputs: str | Sequence[str]) -> tuple[str, ...]:
    """A pattern or several as a tuple (a bare string is one pattern, never its characters)."""
    return (inputs,) if isinstance(inputs, str) else tuple(inputs)


def read_input_list(list_path: str) -> list[str]:
    """The patterns a --input-list file holds (module docstring). ValueError, one line, for a
    list that is not UTF-8 text or names no input."""
    with open_input(list_path) as raw:  # a local one is checked to be a regular file
        data = raw.read(MAX_LIST_BYTES + 1)
    if len(data) > MAX_LIST_BYTES:
        raise ValueError(
            f"--input-list {list_path}: over {MAX_LIST_BYTES:,} bytes: not a list of inputs"
        )
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ValueError(f"--input-list {list_path}: not UTF-8 text (byte {error.start})") from None
    folder = _folder(list_path)
    entries = []
    for line in text.splitlines():
        entry = line.strip()
        if not entry or entry.startswith("#"):
            continue
        entries.append(entry if _is_absolute(entry) else _join(folder, entry))
    if not entries:
        raise ValueError(f"--input-list {list_path}: names no input (blank or comments only)")
    return entries


def _is_absolute(entry: str) -> bool:
    return is_url(entry) or os.path.isabs(entry)


def _folder(path: str) -> str:
    return posixpath.dirname(path) if is_url(path) else os.path.dirname(os.path.abspath(path))


def _join(folder: str, entry: str) -> str:
    if is_url(folder):
        return posixpath.join(folder, entry)
    return os.path.normpath(os.path.join(folder, entry))


def input_patterns(inputs: Sequence[str] | None, input_list: str | None) -> tuple[str, ...]:
    """--input's patterns, then --input-list's, each once, in the order given."""
    patterns = list(inputs or ())
    if input_list:
        patterns += read_input_list(input_list)
    return tuple(dict.fromkeys(patterns))


def _as_glob(pattern: str) -> str:
    """A local directory or a pattern ending in '/' stands for every file under it."""
    if pattern.endswith("/") or (not is_url(pattern) and os.path.isdir(pattern)):
        return pattern.rstrip("/") + "/**"
    return pattern


def _is_local_dir(path: str) -> bool:
    return not is_url(path) and os.path.isdir(path)


def match_patterns(inputs: str | Sequence[str]) -> list[InputFile]:
    """Every file the patterns match, each once, sorted by path (plans are deterministic).
    FileNotFoundError naming the first pattern that matches no file."""
    found: dict[str, InputFile] = {}
    for pattern in as_patterns(inputs):
        files = [f for f in match_inputs(_as_glob(pattern)) if not _is_local_dir(f.path)]
        if not files:
            raise FileNotFoundError(f"no input files match {pattern!r} (only directories)")
        for f in files:
            first = found.setdefault(file_identity(f.path), f)
            if first is not f and first.path != f.path:
                LOG.info("input %s is %s (one file): read once", f.path, first.path)
    if not found:
        raise FileNotFoundError("no input given")
    return sorted(found.values(), key=lambda f: f.path)


def file_identity(path: str) -> str:
    """What makes two names one input: a local file's resolved path (`a`, `./a`, `x/../a`, a
    link to it and its absolute path name one file), a URL as written."""
    local = local_path(path)
    return path if local is None else os.path.realpath(local)


def _pattern_base(pattern: str) -> str:
    """The folder part of a pattern before its first wildcard, ending in '/'."""
    pattern = _as_glob(pattern)
    wildcard = _WILDCARD.search(pattern)
    prefix = pattern[: wildcard.start()] if wildcard else pattern
    return prefix[: prefix.rfind("/") + 1]


def common_base(inputs: str | Sequence[str]) -> str:
    """The deepest folder holding every pattern's base, ending in '/' ('' when they share none):
    files are named relative to it in document ids, so that a glob the shell expanded into
    paths names its files as the quoted glob does."""
    bases = [_pattern_base(p) for p in as_patterns(inputs)]
    if len(bases) == 1:
        return bases[0]
    if not any(map(is_url, bases)):
        bases = [os.path.abspath(b) + "/" if b else os.getcwd() + "/" for b in bases]
    shared = os.path.commonprefix(bases)
    return shared[: shared.rfind("/") + 1]
