"""Which output folders a command may write: the one ownership rule of every folder-writing tool.

A folder is ours when it holds `.shardsmith-output.json` (the marker), written by the tool that
claimed it, and everything in the folder is named by that marker (or is a name the tool's
unfinished run may leave, for tools whose workers cannot update the marker file by file). A
command refuses, in one line and before writing anything:

- a path that exists and is not a directory, or a folder holding symbolic links;
- a folder without a marker that is not empty (a user's folder: nothing in it is ever replaced);
- a folder whose marker another tool wrote (`pretrain` does not write into a shard set);
- a folder holding anything its marker does not name;
- a folder another process is writing (an exclusive flock(2) on the folder, held until
  `release()`; the kernel drops it when the holder dies, even by SIGKILL);
- a folder holding an earlier output of the same tool, unless the caller passes `overwrite`
  (that output is deleted at the claim) or `resume` (it is kept, and stays ours).

This module has the storage-independent rule (`Marker`, `parse_marker`, `foreign_entries`) that
`pipelines.output` applies to local and object-store folders alike, and the local-folder
API every other command uses:

    with claim_output_folder(args.out, tool="pretrain", resume=args.resume) as out:
        path = out.record("metrics.jsonl")        # ours from now on, even if the write dies
        out.write_json("config.json", config)     # recorded, then written atomically
        out.record("step-000100/")                # a trailing "/" makes a whole folder ours
        out.finish()                              # optional: the output is complete

Names are paths relative to the folder (`a/b.json` for a file below a recorded `a/` or on its
own). The marker is rewritten atomically each time a name is recorded, before the file exists, so
a run killed at any point leaves a folder that a rerun of the same tool can claim again; a
temporary file a killed write left (`common.storage.tmp_name`) counts as the name it was for.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterable, Sequence

from common.safe_io import UnsafeInputError, parse_json, read_bytes_capped
from common.storage import base_name, write_atomic

MARKER_NAME = ".shardsmith-output.json"
# Object stores have no advisory locks; pipelines write an object of this name instead.
LOCK_NAME = ".shardsmith-lock"
# Markers written before the marker named its tool were all written by preprocess.
LEGACY_TOOL = "preprocess"
# A marker lists file names only: a million shards' names fit in far less.
MAX_MARKER_BYTES = 64 << 20
RUNNING, FINISHED = "running", "finished"


class OutputError(Exception):
    """The output cannot be used as asked; the message is one line for the user."""


@dataclasses.dataclass(frozen=True)
class Marker:
    """What the marker says: which tool's run wrote the folder, and which names are its own."""

    tool: str
    run_id: str
    state: str = RUNNING
    files: tuple[str, ...] = ()

    def to_json(self) -> dict:
        data = {"written_by": "shardsmith", "tool": self.tool, "run_id": self.run_id,
                "state": self.state}  # fmt: skip
        if self.files or self.state == FINISHED:
            data["files"] = sorted(self.files)
        return data

    def encode(self) -> bytes:
        return (json.dumps(self.to_json(), indent=2, ensure_ascii=False) + "\n").encode("utf-8")

    def covers(self, name: str) -> bool:
        """Whether `name` (relative, a folder with a trailing '/') is named by this marker,
        itself or through a recorded folder above it."""
        name = base_name(name)
        named = set(self.files)
        if name in named:
            return True
        parts = name.rstrip("/").split("/")
        return any("/".join(parts[:i]) + "/" in named for i in range(1, len(parts) + 1))


def parse_marker(data: bytes, where: str) -> Marker:
    """The marker in `data` (read from `where`); a file that is not one of ours is refused."""
    try:
        raw = parse_json(data, where)
    except UnsafeInputError:
        raw = None
    if not isinstance(raw, dict) or raw.get("written_by") != "shardsmith":
        raise OutputError(f"{where} is not a marker this tool wrote; not touching its folder")
    files = raw.get("files") or []
    fields = (raw.get("tool", LEGACY_TOOL), raw.get("run_id", ""), raw.get("state", RUNNING))
    if not all(isinstance(v, str) for v in fields) or not (
        isinstance(files, list) and all(isinstance(f, str) and _safe_name(f) for f in files)
    ):
        raise OutputError(
            f"{where}: a marker with fields of the wrong type or names outside its folder; "
            "not touching it"
        )
    return Marker(*fields, files=tuple(files))


def _safe_name(name: str) -> bool:
    """A name inside the folder: relative, no '..' (a marker must never make us delete
    anything outside it)."""
    parts = name.rstrip("/").split("/")
    return bool(name) and not name.startswith("/") and ".." not in parts and "" not in parts


def foreign_entries(
    marker: Marker | None,
    entries: Iterable[str],
    *,
    tool: str,
    where: str,
    may_hold: Callable[[str], bool] = lambda name: False,
) -> list[str]:
    """The entries of a folder (relative names, folders with a trailing '/') that are not ours.

    Raises OutputError when the marker belongs to another tool. Without a marker nothing is
    ours. `may_hold` names what an unfinished run of `tool` may have left without recording it
    (the marker's own and lock names are always ours).
    """
    if marker is not None and marker.tool != tool:
        raise OutputError(
            f"{where} holds the output of {marker.tool}, not of {tool}: choose another folder"
        )
    own = (MARKER_NAME, LOCK_NAME)
    return [
        e for e in entries
        if e not in own and (marker is None or not (marker.covers(e) or may_hold(base_name(e))))
    ]  # fmt: skip


def refusal(where: str, marker: Marker | None, foreign: Sequence[str], flag: str) -> OutputError:
    """The one line for a folder holding entries that are not ours."""
    shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
    if marker is None:
        return OutputError(
            f"{where} is not empty and was not written by this tool (no {MARKER_NAME}; it holds "
            f"{shown}): choose an empty or new {flag}"
        )
    return OutputError(
        f"{where} holds files its previous run did not write ({shown}): move them away or "
        f"choose another {flag}"
    )


def try_lock_directory(path: str) -> int | None:
    """An exclusive flock(2) on a directory: the open descriptor (closing it unlocks), or None
    when another process holds it. The kernel drops it when its holder dies, even by SIGKILL."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def lock_local_folder(root: str, flag: str, holder: Callable[[], str] = lambda: "") -> int:
    """Create `root` if missing and take its exclusive lock; returns the descriptor (closing it
    unlocks). OutputError when `root` is not a directory or another run holds the lock
    (`holder()` may name that run); an OSError of the filesystem goes to the caller, which says
    it in its own words."""
    if os.path.lexists(root) and not os.path.isdir(root):
        raise OutputError(f"{flag} {root} exists and is not a directory")
    os.makedirs(root, exist_ok=True)
    if not os.access(root, os.W_OK | os.X_OK):
        raise OSError(errno.EACCES, "permission denied", root)
    fd = try_lock_directory(root)
    if fd is None:
        raise OutputError(
            f"{root} is being written by another run{holder()} (it holds the lock); wait for it "
            f"to end or choose another {flag}"
        )
    return fd


def check_claim(
    where: str,
    marker: Marker | None,
    entries: Iterable[str],
    *,
    tool: str,
    flag: str,
    may_hold: Callable[[str], bool] = lambda name: False,
    earlier: str | None = None,
    may_reuse: bool = False,
) -> None:
    """The rule's decision on one folder, whatever its storage: OutputError for a folder
    holding entries that are not ours (see `foreign_entries`), or holding an earlier output of
    `tool` (`earlier` names it; None when there is none) unless `may_reuse`."""
    foreign = foreign_entries(marker, entries, tool=tool, where=where, may_hold=may_hold)
    if foreign:
        raise refusal(where, marker, sorted(foreign), flag)
    if earlier and not may_reuse:
        raise OutputError(
            f"{where} holds {earlier}; pass --overwrite to replace it (it is deleted when the "
            f"new run starts) or choose another {flag}"
        )


class OutputFolder:
    """A local folder claimed by one run of one tool (see `claim_output_folder`)."""

    def __init__(self, path: str, marker: Marker, fd: int):
        self.root = path
        self.marker = marker
        self._fd: int | None = fd

    @property
    def files(self) -> tuple[str, ...]:
        """The names recorded as ours (kept from a resumed run, and recorded by this one)."""
        return self.marker.files

    def path(self, name: str) -> str:
        return os.path.join(self.root, name)

    def record(self, *names: str) -> str:
        """Record `names` as ours (before writing them); returns the path of the first."""
        for name in names:
            if not _safe_name(name):
                raise ValueError(f"{name!r} is not a name inside the output folder")
        new = [n for n in names if not self.marker.covers(n)]
        if new:
            self._write_marker(
                dataclasses.replace(self.marker, files=self.marker.files + tuple(new))
            )
        return self.path(names[0]) if names else self.root

    def write_bytes(self, name: str, data: bytes) -> str:
        """Record `name` and write it atomically; returns its path."""
        path = self.record(name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_atomic(path, data)
        return path

    def write_text(self, name: str, text: str) -> str:
        return self.write_bytes(name, text.encode("utf-8"))

    def write_json(self, name: str, data) -> str:
        return self.write_text(name, json.dumps(data, indent=2, ensure_ascii=False) + "\n")

    def finish(self) -> None:
        """Say the output is complete (a later claim without overwrite or resume refuses it)."""
        self._write_marker(dataclasses.replace(self.marker, state=FINISHED))

    def release(self) -> None:
        """Drop the lock (the folder stays ours)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> OutputFolder:
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def _write_marker(self, marker: Marker) -> None:
        write_atomic(self.path(MARKER_NAME), marker.encode())
        self.marker = marker


def claim_output_folder(
    path: str | os.PathLike,
    tool: str,
    *,
    overwrite: bool = False,
    resume: bool = False,
    run_id: str | None = None,
    flag: str = "--output",
) -> OutputFolder:
    """Claim a local folder for one run of `tool` (created when missing), by the rule above.

    Raises OutputError (one line naming the folder and, in `flag`, the option to change) and
    touches nothing when the folder is refused. `overwrite` deletes an earlier output of the
    same tool here; `resume` keeps it recorded as ours.
    """
    root = os.path.abspath(os.fspath(path))
    run_id = run_id or uuid.uuid4().hex[:12]
    try:
        fd = lock_local_folder(root, flag)
    except OSError as e:
        raise OutputError(f"{flag} {root}: {e.strerror or e}") from None
    try:
        previous = _check_local(root, tool, flag, overwrite or resume)
        kept = previous.files if previous is not None and resume else ()
        if previous is not None and not resume:
            _delete_named(root, previous)
        folder = OutputFolder(root, Marker(tool, run_id, RUNNING, kept), fd)
        folder._write_marker(folder.marker)
    except OSError as e:
        os.close(fd)
        raise OutputError(f"{flag} {root}: {e.strerror or e}") from None
    except BaseException:
        os.close(fd)
        raise
    return folder


def _entries(root: str, marker: Marker | None, prefix: str = "") -> list[tuple[str, bool]]:
    """(relative name, is a folder) of what `root` holds, as coarse as the marker allows: a
    folder is one entry unless the marker names things inside it and not the folder itself,
    and then its contents are listed instead (so a user's file beside them is still seen)."""
    result = []
    with os.scandir(os.path.join(root, prefix) if prefix else root) as found:
        for entry in found:
            name = prefix + entry.name
            if entry.is_symlink():
                raise OutputError(
                    f"{root} holds a symbolic link ({name}); a run never writes through a link"
                )
            is_dir = entry.is_dir(follow_symlinks=False)
            if (
                is_dir
                and marker is not None
                and not marker.covers(name + "/")
                and any(f.startswith(name + "/") for f in marker.files)
            ):
                result += _entries(root, marker, name + "/")
            else:
                result.append((name + "/" if is_dir else name, is_dir))
    return result


def _check_local(root: str, tool: str, flag: str, may_reuse: bool) -> Marker | None:
    """The folder's marker after checking the rule (None for an empty folder)."""
    marker = None
    marker_path = os.path.join(root, MARKER_NAME)
    if os.path.lexists(marker_path):
        try:
            data = read_bytes_capped(marker_path, "marker", MAX_MARKER_BYTES)
        except UnsafeInputError as e:
            raise OutputError(str(e)) from None
        marker = parse_marker(data, marker_path)
    try:
        entries = _entries(root, marker)
    except OutputError as e:
        raise OutputError(f"{e}: remove it or choose another {flag}") from None
    earlier = None
    if marker is not None and marker.files:
        earlier = f"an earlier {tool} output ({len(marker.files)} files or folders)"
    check_claim(root, marker, [n for n, _ in entries], tool=tool, flag=flag, earlier=earlier,
                may_reuse=may_reuse)  # fmt: skip
    return marker


def _delete_named(root: str, marker: Marker) -> None:
    """Delete what an earlier run of ours recorded (and their temporary files): after
    `_check_local`, that is everything but the marker."""
    for name, is_dir in _entries(root, marker):
        if name in (MARKER_NAME, LOCK_NAME):
            continue
        path = os.path.join(root, name)
        if is_dir:
            shutil.rmtree(path)
        else:
            os.remove(path)
    # folders listed through (they held only recorded names), deepest first, once emptied
    parents = {
        "/".join(parts[:i])
        for parts in (n.rstrip("/").split("/") for n in marker.files)
        for i in range(1, len(parts))
    }
    for parent in sorted(parents, key=lambda p: -p.count("/")):
        try:
            os.rmdir(os.path.join(root, parent))
        except OSError:
            pass  # not empty (a deeper recorded folder left in it) or already gone
