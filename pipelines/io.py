"""Opening inputs and listing globs on any filesystem Beam or fsspec knows.

Which filesystem serves a path is `common.storage`'s rule: local paths and Beam's own schemes
(gs://, s3://, hdfs://) go through Beam's FileSystems so a Dataflow worker needs nothing extra;
any other fsspec URL (memory://, http://, ...) goes through fsspec. Decompression is done by
the sources themselves, so that sizes can be bounded.
A local input must be a regular file: a FIFO, device or socket is refused (UnsafeInputError)
when listed and again before it is opened, since opening or reading one can block forever.
"""

from __future__ import annotations

import dataclasses
import os
from typing import BinaryIO

import fsspec
from apache_beam.io.filesystems import FileSystems

from common.safe_io import require_regular_file
from common.storage import FSSPEC, backend, is_url, local_path
from pipelines.local_files import has_wildcard, local_matches


@dataclasses.dataclass(frozen=True)
class InputFile:
    path: str
    size_bytes: int


def match_inputs(pattern: str) -> list[InputFile]:
    """Every file matching a glob (or a single path), sorted by path so plans are deterministic.

    Raises FileNotFoundError naming the pattern when nothing matches: an empty input is almost
    always a typo, and a run that silently writes an empty shard set hides it.
    """
    if backend(pattern) == FSSPEC:
        fs, _, paths = fsspec.get_fs_token_paths(pattern)
        protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        files = [
            InputFile(f"{protocol}://{p.split('://')[-1]}", int(fs.size(p) or 0))
            for p in paths
            if not fs.isdir(p)
        ]
    elif not is_url(pattern) and has_wildcard(pattern):  # Beam's listing skips linked folders
        files = [
            InputFile(p, require_regular_file(p, "input").st_size) for p in local_matches(pattern)
        ]
    else:
        results = FileSystems.match([pattern])[0].metadata_list
        files = [InputFile(m.path, m.size_in_bytes) for m in results]
        for f in files:
            local = local_path(f.path)
            if local is not None and not os.path.isdir(local):  # directories: callers skip them
                require_regular_file(local, "input")
    files.sort(key=lambda f: f.path)
    if not files:
        raise FileNotFoundError(f"no input files match {pattern!r}")
    return files


def open_input(path: str) -> BinaryIO:
    """A binary, forward-readable file object for `path` (raw bytes, no decompression)."""
    local = local_path(path)
    if local is not None and os.path.exists(local):  # a missing file: the open says so
        require_regular_file(local, "input")
    if backend(path) == FSSPEC:
        return fsspec.open(path, "rb").open()
    from apache_beam.io.filesystem import CompressionTypes

    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
