"""Walking a tar stream (`r|`) member by member, safely (`iter_tar_members`).

Absolute paths, `..` components, links and device files are never opened (and nothing is ever
extracted to disk); each one is a counted, logged `Failure(reason="unsafe_tar_member")`. A
truncated or corrupt archive raises `ArchiveError` naming the archive, after every member
before the fault.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import re
import tarfile
from collections.abc import Callable, Iterator
from typing import BinaryIO

from pipelines.document import Failure
from pipelines.sources.input_errors import (
    ArchiveError,
    CorruptInputError,
    InputError,
    TruncatedInputError,
    failure,
    printable_name,
)

_STREAM_BUFFER = 1 << 20


def is_tar(head: bytes) -> bool:
    """True when `head` starts with a valid tar header block (checksum verified)."""
    if len(head) < tarfile.BLOCKSIZE:
        return False
    try:
        tarfile.TarInfo.frombuf(head[: tarfile.BLOCKSIZE], "utf-8", "surrogateescape")
    except tarfile.HeaderError:
        return False
    return True


def unsafe_member_reason(info: tarfile.TarInfo) -> str | None:
    """Why a tar member must not be read (None when it is a plain file at a relative path)."""
    if info.issym():
        return f"symlink to {info.linkname!r}"
    if info.islnk():
        return f"hardlink to {info.linkname!r}"
    if info.ischr() or info.isblk():
        return "device file"
    if info.isfifo():
        return "fifo"
    if not info.isreg():
        return f"unsupported member type {info.type!r}"
    name = info.name
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        return "absolute path"
    if ".." in re.split(r"[\\/]", name):
        return "path with a '..' component"
    return None


def _clean_member_name(name: str) -> str:
    return printable_name("/".join(part for part in name.split("/") if part not in ("", ".")))


@dataclasses.dataclass(frozen=True)
class ArchiveMember:
    name: str  # relative path inside the archive, './' removed
    size: int
    stream: BinaryIO  # readable only until the next member is requested


class _EndRecordingTarInfo(tarfile.TarInfo):
    """Records why tarfile stopped: in stream mode it ends silently on a truncated or garbled
    header, which would turn a cut archive into a quiet loss of every later member."""

    @classmethod
    def fromtarfile(cls, archive: tarfile.TarFile) -> tarfile.TarInfo:
        try:
            return super().fromtarfile(archive)
        except tarfile.HeaderError as error:
            archive.stream_end_error = error  # type: ignore[attr-defined]
            raise


class _MemberStream(io.RawIOBase):
    """A member's bytes; a failure of the archive underneath becomes ArchiveError."""

    def __init__(self, member_file: BinaryIO, archive_location: str, member_name: str) -> None:
        super().__init__()
        self._file = member_file
        self._archive_location = archive_location
        self._member_name = member_name

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:
        try:
            return self._file.readinto(buffer)
        except ArchiveError:
            raise  # an archive further out broke: it is that archive's error
        except InputError as error:
            raise ArchiveError(error, self._archive_location) from None
        except (tarfile.ReadError, EOFError) as error:
            truncated = TruncatedInputError(f"tar data ends inside member {self._member_name}: {error}")
            raise ArchiveError(truncated, self._archive_location) from None


def _skip_to_next_header(archive: tarfile.TarFile, last: tarfile.TarInfo) -> None:
    """Read on to where the next member's header starts, checking the last member's claimed
    size against the real stream. tarfile's stream mode would skip there itself, a block at a
    time without noticing the end of the data: a header claiming 2**60 bytes never finished."""
    remaining = archive.offset - archive.fileobj.tell()
    while remaining > 0:
        skipped = archive.fileobj.read(min(remaining, _STREAM_BUFFER))
        if not skipped:
            raise TruncatedInputError(
                f"tar data ends inside member {last.name}, whose header claims {last.size} "
                f"bytes ({remaining} bytes short)")
        remaining -= len(skipped)


@contextlib.contextmanager
def _as_archive_error(location: str,
                      tar_error: Callable[[Exception], InputError]) -> Iterator[None]:
    """Faults while walking the archive at `location` raised as its ArchiveError: an InputError
    of the data underneath as it is, one of tarfile's own as `tar_error` makes it. An enclosing
    archive's ArchiveError passes through: it is that archive's to report."""
    try:
        yield
    except ArchiveError:
        raise
    except InputError as error:
        raise ArchiveError(error, location) from None
    except (tarfile.TarError, EOFError) as error:
        raise ArchiveError(tar_error(error), location) from None


def iter_tar_members(stream: BinaryIO, location: str) -> Iterator[ArchiveMember | Failure]:
    """The regular-file members of a tar stream, in archive order; unsafe members as Failures.

    Raises ArchiveError(location=location) when the archive is truncated or corrupt, after
    yielding every member before the fault (errors of an enclosing archive pass through as they
    are). Directories are structure, not content, and are passed over silently.
    """
    unreadable = "not a readable tar archive"
    with _as_archive_error(location, lambda e: CorruptInputError(f"{unreadable}: {e}")):
        archive = tarfile.open(fileobj=stream, mode="r|", tarinfo=_EndRecordingTarInfo)
    last_name = "(start)"
    info = None
    with archive:
        while True:
            ends = f"tar data ends after member {last_name}"
            with _as_archive_error(location,
                                   lambda e, ends=ends: TruncatedInputError(f"{ends}: {e}")):
                if info is not None:  # (the first header was read when the archive opened)
                    _skip_to_next_header(archive, info)
                info = archive.next()
            if info is None:
                break
            # stream mode keeps every TarInfo for getmembers(); we never call it, and an
            # OpenWebText-sized archive would otherwise grow the list by millions of entries
            archive.members.clear()
            last_name = info.name
            if info.isdir():
                continue
            reason = unsafe_member_reason(info)
            if reason is not None:
                yield failure(f"{location}:{info.name}", "unsafe_tar_member", reason)
                continue
            member_file = archive.extractfile(info)
            assert member_file is not None  # regular files always have data
            yield ArchiveMember(
                name=_clean_member_name(info.name),
                size=info.size,
                stream=_MemberStream(member_file, location, info.name),
            )
        end_error = getattr(archive, "stream_end_error", None)
    if isinstance(end_error, tarfile.EOFHeaderError):
        # tarfile stops at the end-of-archive blocks; reading on to the end of the stream lets
        # the decompressor check its own end marker (a cut .tar.gz loses only zero padding)
        with _as_archive_error(location, lambda e: TruncatedInputError(f"tar data: {e}")):
            while stream.read(_STREAM_BUFFER):
                pass
    if isinstance(end_error, (tarfile.EmptyHeaderError, tarfile.TruncatedHeaderError)):
        truncated = TruncatedInputError(
            f"tar data ends without the end-of-archive blocks, after member {last_name}")
        raise ArchiveError(truncated, location)
    if isinstance(end_error, tarfile.InvalidHeaderError):
        corrupt = CorruptInputError(f"invalid tar header after member {last_name}: {end_error}")
        raise ArchiveError(corrupt, location)
