"""Splitting one big input file into read tasks that several workers read at once.

- Line formats (JSONL): byte ranges. A range [start, end) owns the lines that START inside it,
  as Beam's ReadFromText does: its reader skips the partial line at `start` (the previous range
  owns it) and reads its last line past `end` to that line's newline. Every line is read exactly
  once whatever the range size, a line longer than a range included, and since a newline byte
  never occurs inside a multi-byte UTF-8 character, no character is cut.
- Uncompressed tar archives: ranges of whole members, cut at member header offsets found by
  walking the headers (seeking over the data, so planning reads 512 bytes a member).
- A compressed stream (gzip, bz2, xz, zstd) can only be read from its start: one task, and the
  planner logs so, since that file then bounds the run's wall time.

Documents keep the ids they get from a whole-file read: line records are named by the byte
offset of their line (not by a line number, which a range reader cannot know without reading
everything before it), tar members by their path.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import os
import tarfile
from collections.abc import Iterator
from typing import BinaryIO

from common.storage import FSSPEC, LOCAL, backend, local_path
from pipelines.document import ReadTask
from pipelines.io import open_input
from pipelines.sources.compression import SNIFF_BYTES, detect_compression
from pipelines.sources.file_source import FILE_BYTES_OPTION
from pipelines.sources.sizes import task_bytes
from pipelines.sources.tar_members import is_tar

logger = logging.getLogger(__name__)

# How a split task's range is to be read: RANGE_LINES or RANGE_TAR.
RANGE_OPTION = "range"
RANGE_LINES = "lines"
RANGE_TAR = "tar"

_READ_CHUNK = 1 << 20


def byte_ranges(size: int, range_bytes: int) -> list[tuple[int, int]]:
    """Consecutive (start, end) ranges of `range_bytes` covering [0, size); the last one ends at
    -1 (the end of the file, whatever it is when read)."""
    starts = list(range(0, max(size, 1), range_bytes))
    return [(start, end) for start, end in zip(starts, [*starts[1:], -1])]


def file_size(task: ReadTask) -> int | None:
    value = task.options.get(FILE_BYTES_OPTION)
    return int(value) if value is not None else None


def range_input_bytes(task: ReadTask) -> int:
    """Bytes of the file in the task's byte range [start, end); end -1 runs to the file's end
    (a whole file, or the last range of a split one). The size is the one listed when the task
    was planned, else the file's size now (Wikipedia's range tasks do not carry it)."""
    end = task.end
    if end < 0:
        size = file_size(task)
        end = size if size is not None else _stored_size(task.path)
    return max(end - task.start, 0)


def _stored_size(path: str) -> int:
    kind = backend(path)
    if kind == LOCAL:
        return os.path.getsize(local_path(path))
    if kind == FSSPEC:
        import fsspec

        fs, fs_path = fsspec.core.url_to_fs(path)
        return int(fs.size(fs_path) or 0)
    from apache_beam.io.filesystems import FileSystems

    return int(FileSystems.get_filesystem(path).size(path))


def is_range(task: ReadTask) -> bool:
    return RANGE_OPTION in task.options


def _tasks(task: ReadTask, kind: str, ranges: list[tuple[int, int]]) -> list[ReadTask]:
    return [
        dataclasses.replace(task, start=start, end=end,
                            options={**task.options, RANGE_OPTION: kind})
        for start, end in ranges
    ]


def line_tasks(task: ReadTask, range_bytes: int) -> list[ReadTask]:
    """A line-format file's task as byte-range tasks (one task when it fits in one range)."""
    size = file_size(task)
    if size is None or size <= range_bytes:
        return [task]
    return _tasks(task, RANGE_LINES, byte_ranges(size, range_bytes))


def tar_member_ranges(raw: BinaryIO, range_bytes: int) -> list[tuple[int, int]] | None:
    """(start, end) byte ranges of consecutive whole members of an uncompressed, seekable tar,
    each about `range_bytes`; None when it cannot be split safely (a pax global header applies to
    every later member, so a range starting after it would read them wrongly)."""
    boundaries = [0]
    with tarfile.open(fileobj=raw, mode="r:") as archive:
        while True:
            try:
                info = archive.next()
            except tarfile.ReadError:
                break  # a cut or garbled archive: the last range's reader reports where
            if info is None:
                break
            archive.members.clear()  # headers only; a big archive has millions of them
            if info.offset - boundaries[-1] >= range_bytes:
                boundaries.append(info.offset)
        if archive.pax_headers:
            return None
    return list(zip(boundaries, [*boundaries[1:], -1]))


def tar_tasks(task: ReadTask, raw: BinaryIO, range_bytes: int) -> list[ReadTask]:
    """An uncompressed tar's task as member-range tasks; the task itself when the archive cannot
    be walked (its reader then reports why) or is one range."""
    try:
        ranges = tar_member_ranges(raw, range_bytes)
    except (tarfile.TarError, OSError, EOFError) as error:
        logger.info("%s: tar headers unreadable (%s): one task", task.path, error)
        return [task]
    if ranges is None:
        logger.info("%s: tar with pax global headers: one task", task.path)
        return [task]
    return [task] if len(ranges) == 1 else _tasks(task, RANGE_TAR, ranges)


def log_unsplittable(task: ReadTask, why: str) -> None:
    logger.info(
        "%s: %s: read start to end by one task (%.0f MB); split such inputs into many files "
        "to read them in parallel", task.path, why, (file_size(task) or 0) / 1e6,
    )


def splittable_head(task: ReadTask) -> tuple[int, bytes] | None:
    """(task_bytes, first bytes) of an uncompressed file bigger than task_bytes; None for a
    smaller one, a compressed one (logged: one stream is one task) or one that cannot be
    opened (its reader reports that)."""
    range_bytes = task_bytes(task.options)
    size = file_size(task)
    if size is None or size <= range_bytes or is_range(task):
        return None
    try:
        with open_input(task.path) as raw:
            head = raw.read(SNIFF_BYTES)
    except OSError:
        return None
    compression = detect_compression(head)
    if compression is not None:
        log_unsplittable(task, f"one {compression} stream")
        return None
    return range_bytes, head


def split_line_file(task: ReadTask) -> list[ReadTask]:
    """A JSON-lines file's task as byte-range tasks when it is big and uncompressed."""
    found = splittable_head(task)
    if found is None:
        return [task]
    range_bytes, head = found
    if head.lstrip().startswith(b"["):
        return [task]  # a JSON array, not lines: its reader reports it
    return line_tasks(task, range_bytes)


def split_tar_file(task: ReadTask) -> list[ReadTask]:
    """A big uncompressed tar's task as member-range tasks; any other file stays one task."""
    found = splittable_head(task)
    if found is None:
        return [task]
    range_bytes, head = found
    if not is_tar(head):
        log_unsplittable(task, "one document")
        return [task]
    return split_tar(task, range_bytes)


def split_tar(task: ReadTask, range_bytes: int) -> list[ReadTask]:
    """An uncompressed tar's task as member-range tasks of about `range_bytes`."""
    try:
        with open_input(task.path) as raw:
            return tar_tasks(task, raw, range_bytes)
    except OSError:
        return [task]


# ---------------------------------------------------------------------------------- reading


class _TarRangeStream(io.RawIOBase):
    """Bytes [start, end) of `raw`, then the two zero blocks that end a tar archive, so that a
    tar reader sees the members of the range as a whole archive. end -1: to the end of `raw`,
    whose own end-of-archive blocks (or their absence) the reader then checks."""

    def __init__(self, raw: BinaryIO, start: int, end: int) -> None:
        super().__init__()
        raw.seek(start)
        self._raw = raw
        self._left = end - start if end >= 0 else -1
        self._tail = b"" if end < 0 else b"\0" * (2 * tarfile.BLOCKSIZE)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:
        if self._left != 0:
            size = len(buffer) if self._left < 0 else min(len(buffer), self._left)
            data = self._raw.read(size)
            if data:
                buffer[: len(data)] = data
                self._left -= 0 if self._left < 0 else len(data)
                return len(data)
            self._left = 0  # the file ended early: the tar reader reports the cut member
        count = min(len(buffer), len(self._tail))
        buffer[:count] = self._tail[:count]
        self._tail = self._tail[count:]
        return count


def tar_range_stream(raw: BinaryIO, task: ReadTask) -> BinaryIO:
    """What to read for `task`: `raw` itself, or for a tar member range just those members."""
    if task.options.get(RANGE_OPTION) != RANGE_TAR:
        return raw
    return io.BufferedReader(_TarRangeStream(raw, task.start, task.end), _READ_CHUNK)


def iter_range_lines(raw: BinaryIO, start: int, end: int,
                     limit: int) -> Iterator[tuple[int, bytes | None]]:
    """(byte offset, line without its newline) for each line that starts in [start, end) of
    `raw` (end -1: to the end); None instead of the bytes for a line longer than `limit` (the
    rest of it is skipped, not held in memory). `raw` is read from its current position, which
    must be `start` for start 0 (a decompressed stream), else seekable."""
    if start > 0:
        raw.seek(start - 1)
    stream = raw if isinstance(raw, io.BufferedIOBase) else io.BufferedReader(raw, _READ_CHUNK)
    offset = start
    if start > 0:
        # the byte before the range tells whether a line starts at `start`; if not, the line
        # running through `start` belongs to the previous range
        offset = start - 1 + _skip_line(stream)
    while end < 0 or offset < end:
        line = stream.readline(limit + 1)
        if not line:
            return
        line_start = offset
        offset += len(line)
        if len(line) > limit and not line.endswith(b"\n"):
            offset += _skip_line(stream)
            yield line_start, None
            continue
        yield line_start, line.rstrip(b"\r\n")


def _skip_line(stream: BinaryIO) -> int:
    """Read to just past the next newline (or the end); the number of bytes read."""
    skipped = 0
    while True:
        piece = stream.readline(_READ_CHUNK)
        skipped += len(piece)
        if not piece or piece.endswith(b"\n"):
            return skipped
