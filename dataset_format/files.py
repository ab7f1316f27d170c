"""The files of a shard set as untrusted input: the one error a fault in them raises
(`FormatError`), the type check every open of one goes through, and their checksum.

A set's `.bin`, `.idx`, sidecar or tokenizer may be anything its maker put under that name: a
FIFO or a device would block a read or never end it (`/dev/zero`), so each is stat'ed (through
links) and refused before it is opened unless it is a regular file.
"""

from __future__ import annotations

import hashlib
import os

from common.safe_io import UnsafeInputError, require_regular_file

_HASH_CHUNK = 16 << 20


class FormatError(ValueError):
    """A shard file that breaks the format; the message names the file and what is wrong."""


def require_set_file(path: str, what: str) -> os.stat_result:
    """The stat of `path`, a regular file; FormatError naming it otherwise (before any open)."""
    try:
        return require_regular_file(path, what)
    except UnsafeInputError as e:
        raise FormatError(str(e)) from None


def file_sha256(path: str) -> str:
    """The sha256 of a regular file (FormatError for anything else, before it is opened)."""
    require_set_file(path, "shard-set file")
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
