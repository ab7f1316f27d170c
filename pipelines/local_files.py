"""Listing a local glob or folder: every file under it, links to folders followed.

A folder linked from inside an input folder holds input like any other (a corpus assembled from
links to its parts); Beam's local listing (`os.walk` without `followlinks`) leaves such a folder
out without a word. Here a link to a folder is followed once: a link back into a folder it
lies in (a loop) is refused naming the link, a folder reached a second time (two links to one
folder) is not listed again (its files are the same files), and a folder that cannot be
listed is refused by name rather than skipped.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator

from apache_beam.io.filesystem import FileSystem

_WILDCARD = re.compile(r"[*?\[]")


class InputFolderError(ValueError):
    """A folder under an input that cannot be listed whole; one line naming it."""


def has_wildcard(pattern: str) -> bool:
    return _WILDCARD.search(pattern) is not None


def glob_root(pattern: str) -> str:
    """The folder to list for `pattern`: the folder part before its first wildcard ('.' for
    none), as Beam's own matching takes it."""
    prefix = pattern[: _WILDCARD.search(pattern).start()]
    return prefix[: prefix.rfind("/") + 1].rstrip("/") or ("/" if prefix.startswith("/") else ".")


def _folder_key(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def walk_files(root: str) -> Iterator[str]:
    """Every non-folder entry under folder `root`, named through `root` (links kept as named),
    folder links followed (module docstring); InputFolderError for a loop or an unlistable
    folder."""
    st = os.stat(root)
    seen = {_folder_key(st)}
    yield from _walk(root, (_folder_key(st),), seen)


def _walk(folder: str, above: tuple, seen: set) -> Iterator[str]:
    try:
        with os.scandir(folder) as listing:
            entries = sorted(listing, key=lambda e: e.name)
    except OSError as error:
        raise InputFolderError(
            f"input folder {folder} cannot be listed: {error.strerror or error}"
        ) from None
    for entry in entries:
        path = os.path.join(folder, entry.name) if folder != "." else entry.name
        try:
            st = os.stat(path)  # through a link: what it names
        except OSError:
            yield path  # a broken link: listed, so that the caller's type check names it
            continue
        if not stat.S_ISDIR(st.st_mode):
            yield path
            continue
        key = _folder_key(st)
        if key in above:
            raise InputFolderError(
                f"input folder link {path} -> {os.readlink(path) if entry.is_symlink() else path}"
                " leads back into a folder it lies in (a loop); remove the link or name the "
                "folders to read"
            )
        if key in seen:
            continue  # a second link to a folder already listed: the same files
        seen.add(key)
        yield from _walk(path, (*above, key), seen)


def local_matches(pattern: str) -> list[str]:
    """The files a local glob matches (Beam's pattern syntax: `*` within a name, `**` across
    folders), listed by `walk_files` from the pattern's root folder."""
    root = glob_root(pattern)
    if not os.path.isdir(root):
        return []
    matches = re.compile(FileSystem.translate_pattern(pattern)).match
    return [path for path in walk_files(root) if matches(path)]
