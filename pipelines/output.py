"""OUTPUT itself: the claim a run makes on it, and the bundle files its workers put there.

Every write goes through `common.storage.OutputDir` (one directory on a local disk, a Beam
filesystem or fsspec, written atomically), re-exported here. `claim_output` applies the ownership rule of `common.output_dir`
(refuse a directory holding what our marker does not name; one run at a time) to such a
directory, for a tool's `OutputLayout`: preprocess's shard sets (`SHARD_SET`) and dedup's
Parquet folders (`DEDUP_OUTPUT`).
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import re
import shutil
import socket
import time
import uuid
from collections.abc import Callable, Sequence

from common.output_dir import (
    FINISHED,
    LOCK_NAME,
    MARKER_NAME,
    MAX_MARKER_BYTES,
    RUNNING,
    Marker,
    OutputError,
    check_claim,
    lock_local_folder,
    parse_marker,
    try_lock_directory,
)
from common.storage import OutputDir
from common.storage import normalize as normalize_output
from dataset_format import INDEX_CACHE_DIR, MANIFEST_NAME

# re-exported: the pipelines name OUTPUT's storage layer through this module
__all__ = ["LOCK_NAME", "MARKER_NAME", "OutputDir", "OutputError", "normalize_output",
           "try_lock_directory"]  # fmt: skip

WORK_DIR = "_work"
SPILL_DIR = "spill"
REJECTS_DIR = "rejects"
STATS_NAME = "stats.json"
TOKENIZER_NAME = "tokenizer.json"


# -- the storage layer (common.storage) and the bundle files built in it --------------------
class BundleFiles:
    """One bundle's files in `folder`, one per key, as the spill writer, the stash and the
    audit write them: built in `folder.staging()` under a name unique to the bundle attempt
    (`name_of(key, attempt)`; a retry never collides) and put in place when the bundle commits,
    before any name is handed on, so nothing reads a half-written file and a failed attempt's
    files are never named. `open_writer(path)` makes a key's writer: anything with `path`,
    `close()` (complete the file) and `discard()`."""

    def __init__(self, folder: OutputDir, prefix: str, name_of, open_writer) -> None:
        self.folder = folder
        self._local = folder.staging(prefix)
        self._name_of = name_of
        self._open_writer = open_writer
        self._attempt = ""
        self._writers: dict = {}

    def start(self) -> None:
        """A new bundle attempt."""
        self._attempt = uuid.uuid4().hex[:16]
        self._writers = {}

    def writer(self, key):
        writer = self._writers.get(key)
        if writer is None:
            path = os.path.join(self._local, self._name_of(key, self._attempt))
            writer = self._writers[key] = self._open_writer(path)
        return writer

    def commit(self):
        """(key, file name) of each file, in key order, each complete and in place."""
        writers, self._writers = self._writers, {}
        for key in sorted(writers):
            writers[key].close()
            yield key, self.folder.publish(writers[key].path)

    def discard(self) -> None:
        """The open files removed, and the staging folder (a DoFn's teardown)."""
        for writer in self._writers.values():
            writer.discard()
        self._writers = {}
        self.folder.unstage(self._local)


# -- what OUTPUT holds that is ours, and who is writing it -------------------------------------
# OUTPUT/.shardsmith-output.json (common.output_dir's marker) says the directory is ours.
# A run writes it when it claims a new or empty directory; the finishing step rewrites it with
# the list of the output's files. Only what it names is ever deleted or replaced, and a
# directory without it is used only if empty. Workers cannot update it file by file, so while
# a run is unfinished its layout's `run_files` say what it may have left.
@dataclasses.dataclass(frozen=True)
class OutputLayout:
    """What one tool writes into OUTPUT, for the claim."""

    tool: str
    # Names (relative to OUTPUT) an unfinished run may have written, matched exactly.
    run_files: re.Pattern
    # Written last: its presence means a finished output, replaced only with --overwrite.
    finished_file: str
    # How the refusal names a finished output.
    finished_words: str
    # Folders that are always ours (work areas, caches derived from the output), and folders
    # whose files are checked one by one.
    own_dirs: tuple[str, ...] = ()
    listed_dirs: tuple[str, ...] = ()
    run_dirs: re.Pattern | None = None  # folders an unfinished run may have left (by name)
    make_dirs: tuple[str, ...] = ()  # made empty by the claim


SHARD_SET = OutputLayout(
    tool="preprocess",
    run_files=re.compile(
        r"^(manifest\.json|stats\.json|tokenizer\.json|shard-\d{5}-\d{5}\.(bin|idx|meta\.parquet)"
        r"|rejects/(rejects|parts_removed)-\d{5}\.jsonl)$"
    ),
    finished_file=MANIFEST_NAME,
    finished_words="a finished shard set",
    # INDEX_CACHE_DIR: what the trainer derived from the set; it goes with the set
    own_dirs=(WORK_DIR, INDEX_CACHE_DIR),
    listed_dirs=(REJECTS_DIR,),
    make_dirs=(f"{WORK_DIR}/{SPILL_DIR}",),
)
DEDUP_OUTPUT = OutputLayout(
    tool="dedup",
    run_files=re.compile(r"^((documents|rejects|clusters)-\d{5}-of-\d{5}\.parquet|stats\.json)$"),
    finished_file=STATS_NAME,
    finished_words="a finished dedup output",
    own_dirs=(WORK_DIR,),  # the text waiting while dedup decides (pipelines/dedup/stash.py)
    # Beam's file sinks write under beam-temp-<prefix>-<uuid>/ and remove it when they finish
    run_dirs=re.compile(r"^beam-temp-(documents|rejects|clusters)-[0-9a-f]{32}$"),
)

_STORAGE_ERRORS = {
    errno.ENOSPC: "no space left on {where}",
    errno.EDQUOT: "no space left on {where} (disk quota exceeded)",
    errno.EROFS: "{where} is not writable (read-only file system)",
    errno.EACCES: "{where} is not writable (permission denied)",
    errno.EPERM: "{where} is not writable (operation not permitted)",
}
_ERRNO_IN_TEXT = re.compile(r"\[Errno (\d+)\] [^:\n]*(?:: '([^'\n]*)')?")


def describe_storage_error(error: BaseException, output: str) -> str | None:
    """One line for a failure caused by storage (disk full, read-only, no permission), else None.

    Beam re-raises a worker's exception as a RuntimeError carrying only its text, so besides
    the exception chain the text is searched for an `[Errno N]`.
    """
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in _STORAGE_ERRORS:
            return _storage_line(error.errno, error.filename, output)
        match = _ERRNO_IN_TEXT.search(str(error))
        if match and int(match.group(1)) in _STORAGE_ERRORS:
            return _storage_line(int(match.group(1)), match.group(2), output)
        error = error.__cause__ or error.__context__
    return None


def _storage_line(code: int, filename, output: str) -> str:
    output = normalize_output(output)
    path = str(filename) if filename else None
    inside = path is None or path == output or path.startswith(output.rstrip("/") + "/")
    where = output if inside else f"{path} (outside OUTPUT: the temporary directory?)"
    return _STORAGE_ERRORS[code].format(where=where)


def read_marker(out: OutputDir) -> Marker | None:
    """OUTPUT's marker, None when there is none; one that is not ours raises OutputError."""
    size = out.size(MARKER_NAME)
    if size is None:
        return None
    if size > MAX_MARKER_BYTES:
        raise OutputError(f"{out.path(MARKER_NAME)} is not a marker this tool wrote (too large)")
    return parse_marker(out.read_bytes(MARKER_NAME), out.path(MARKER_NAME))


def write_marker(
    out: OutputDir, run_id: str, files: Sequence[str] | None = None, tool: str = SHARD_SET.tool
) -> None:
    """Mark OUTPUT as ours: being written by `run_id`, or (with `files`) holding a finished output."""
    if files is None:
        marker = Marker(tool, run_id, RUNNING)
    else:
        marker = Marker(tool, run_id, FINISHED, tuple(sorted(files)))
    out.write_bytes(MARKER_NAME, marker.encode())


class OutputLock:
    """Held by the launcher while a run writes OUTPUT, so a second run refuses instead of wiping
    the first one's work. Local: flock(2) on the directory itself, released by the kernel when
    the process ends however it ends. Remote: a lock object holding the run id, created only
    when absent and read back; object stores give no atomic create-if-absent here, so two runs
    started within the same second can both pass, and a killed launcher leaves the object
    behind (the error names it, to delete by hand)."""

    def __init__(self, out: OutputDir, run_id: str):
        self.out = out
        self.run_id = run_id
        self._fd: int | None = None

    def acquire(self) -> None:
        if self.out.is_local:
            self._fd = lock_local_folder(self.out.url, "--output", lambda: _marker_run(self.out))
            return
        if self.out.size(LOCK_NAME) is not None:
            raise OutputError(self._held_by_other())
        record = {"run_id": self.run_id, "host": socket.gethostname(), "pid": os.getpid(),
                  "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}  # fmt: skip
        self.out.write_bytes(LOCK_NAME, json.dumps(record).encode("utf-8"))
        time.sleep(LOCK_SETTLE_S)  # let a racing writer's object land before reading back
        if self._holder().get("run_id") != self.run_id:
            raise OutputError(self._held_by_other())
        self._fd = -1

    def _holder(self) -> dict:
        try:
            return json.loads(self.out.read_bytes(LOCK_NAME))
        except (OSError, ValueError):
            return {}

    def _held_by_other(self) -> str:
        holder = self._holder()
        return (
            f"{self.out.url} is being written by another run ({holder.get('run_id', '?')} on "
            f"{holder.get('host', '?')}, pid {holder.get('pid', '?')}, since "
            f"{holder.get('since', '?')}); wait for it to end, or if it is gone delete "
            f"{self.out.path(LOCK_NAME)}"
        )

    def release(self) -> None:
        if self._fd is None:
            return
        if self._fd >= 0:
            os.close(self._fd)  # closing the descriptor drops the flock
        elif self._holder().get("run_id") == self.run_id:
            self.out.delete([LOCK_NAME])
        self._fd = None


LOCK_SETTLE_S = 1.0


def _marker_run(out: OutputDir) -> str:
    try:
        marker = read_marker(out)
    except (OutputError, OSError):
        return ""
    return f" (run {marker.run_id})" if marker and marker.run_id else ""


def check_free_space(out: OutputDir, needed_bytes: int) -> None:
    """Refuse a local OUTPUT that cannot hold `needed_bytes` (remote stores are not asked)."""
    if not out.is_local or needed_bytes <= 0:
        return
    free = shutil.disk_usage(out.url).free
    if free < needed_bytes:
        raise OutputError(
            f"no space left on {out.url}: {free / 1e9:,.2f} GB free, the run needs at least "
            f"{needed_bytes / 1e9:,.2f} GB (spill and shards together take about the input's size)"
        )


@dataclasses.dataclass
class OutputClaim:
    """OUTPUT made ready for one run, and the lock the run holds on it until `release()`."""

    out: OutputDir
    run_id: str
    lock: OutputLock

    def release(self) -> None:
        self.lock.release()


def claim_output(
    url: str,
    *,
    run_id: str | None = None,
    overwrite: bool = False,
    needed_bytes: int = 0,
    layout: OutputLayout = SHARD_SET,
) -> OutputClaim:
    """Lock `url` for a run of `layout.tool` and clear what a previous run of ours left there.

    Refused (OutputError, nothing touched): a directory that is locked by another run, holds
    links or anything our marker does not name, or holds a finished output (unless `overwrite`:
    then it is deleted here, when the new run starts).
    """
    out = OutputDir(url)
    run_id = run_id or uuid.uuid4().hex[:12]
    try:
        if not out.is_local:  # a local folder is made by its lock (lock_local_folder)
            out.makedirs()
        lock = OutputLock(out, run_id)
        lock.acquire()
    except OSError as e:
        raise OutputError(describe_storage_error(e, out.url) or f"{out.url}: {e}") from None
    try:
        check_free_space(out, needed_bytes)
        _clear_previous_run(out, run_id, overwrite, layout)
    except OSError as e:
        lock.release()
        raise OutputError(describe_storage_error(e, out.url) or f"{out.url}: {e}") from None
    except BaseException:
        lock.release()
        raise
    return OutputClaim(out, run_id, lock)


def _entries(out: OutputDir, layout: OutputLayout) -> tuple[list[str], list[str]]:
    """(files, folders) directly in OUTPUT and in its listed folders, as relative names;
    folders with a trailing '/'. Links are refused: a run never writes through one."""
    listed = {d: out.child(d) for d in layout.listed_dirs}
    links = out.list_links() + [f"{d}/{n}" for d, sub in listed.items() for n in sub.list_links()]
    if links:
        raise OutputError(
            f"{out.url} holds symbolic links ({', '.join(links[:5])}); a run never writes "
            "through a link: remove them or choose another --output"
        )
    files = [n for n in out.list_files() if n not in (MARKER_NAME, LOCK_NAME)]
    files += [f"{d}/{n}" for d, sub in listed.items() for n in sub.list_files()]
    dirs = [f"{d}/" for d in out.list_dirs() if d not in listed]
    dirs += [f"{d}/{n}/" for d, sub in listed.items() for n in sub.list_dirs()]
    return files, dirs


def _clear_previous_run(out: OutputDir, run_id: str, overwrite: bool, layout: OutputLayout) -> None:
    files, dirs = _entries(out, layout)
    marker = read_marker(out)
    may_hold: Callable[[str], bool] = lambda name: name.rstrip("/") in layout.own_dirs  # noqa: E731
    if marker is not None and marker.state == RUNNING:
        may_hold = lambda name: (  # noqa: E731
            name.rstrip("/") in layout.own_dirs
            or bool(layout.run_files.match(name))
            or bool(layout.run_dirs and layout.run_dirs.match(name.rstrip("/")))
        )
    finished = layout.finished_file in files
    check_claim(
        out.url,
        marker,
        files + dirs,
        tool=layout.tool,
        flag="directory" if marker is None else "--output",
        may_hold=may_hold,
        earlier=layout.finished_words if finished else None,
        may_reuse=overwrite,
    )
    write_marker(out, run_id, tool=layout.tool)  # first: a cleanup cut short leaves it ours
    if finished:  # the earlier output must never look finished while it goes
        out.delete([layout.finished_file])
    top = [n for n in files if "/" not in n and n != layout.finished_file]
    out.delete(top)
    for name in [d for d in dirs if "/" not in d.rstrip("/")] + [
        f"{d}/" for d in layout.listed_dirs
    ]:
        out.child(name.rstrip("/")).delete_tree()
    for name in layout.make_dirs:
        out.child(name).makedirs()
