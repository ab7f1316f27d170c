"""Byte-size source options: `parse_size` ("512MiB" -> bytes), `size_option`, the
`max_document_bytes` cap every source reads with (a bigger document, tar member, JSON line or
record is Failure(reason="too_large"), so a decompression bomb cannot exhaust a worker), and
`task_bytes`, the most a read task of a file reads."""

from __future__ import annotations

import re
from collections.abc import Mapping

MAX_DOCUMENT_BYTES_OPTION = "max_document_bytes"
# A worker holds several working copies of a document while it reads, cleans, signs (dedup),
# tokenizes and spills it: its peak memory grows by up to this many bytes per document byte
# (measured 20x at 32 MB, bench/results/worker_memory.md; rounded up). With the default cap a
# worker stays under ~6.5 GB, so two fit in 24 GB with room; a bigger cap costs this much more.
WORKER_BYTES_PER_DOCUMENT_BYTE = 24
DEFAULT_MAX_DOCUMENT_BYTES = 256 << 20  # 256 MiB: still far above any real book or page
TASK_BYTES_OPTION = "task_bytes"
DEFAULT_TASK_BYTES = 64 << 20

_SIZE_PATTERN = re.compile(r"^\s*(\d+)\s*([kmgt]?i?b?)\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9,
               "gb": 10**9, "t": 10**12, "tb": 10**12, "ki": 2**10, "kib": 2**10, "mi": 2**20,
               "mib": 2**20, "gi": 2**30, "gib": 2**30, "ti": 2**40, "tib": 2**40}


def parse_size(text: str) -> int:
    """'1073741824', '512MiB', '50MB', '1g' -> bytes. Raises ValueError naming the text."""
    match = _SIZE_PATTERN.match(text)
    unit = match.group(2).lower() if match else ""
    if not match or unit not in _SIZE_UNITS:
        raise ValueError(f"not a size: {text!r} (use e.g. 1048576, 512MiB or 1GB)")
    return int(match.group(1)) * _SIZE_UNITS[unit]


def size_option(options: Mapping[str, str], key: str, default: int) -> int:
    """A positive byte-size source option ("64MiB", "1000"), or ``default`` when not given."""
    value = options.get(key)
    if value is None:
        return default
    size = parse_size(str(value))
    if size <= 0:
        raise ValueError(f"{key} must be positive, got {value!r}")
    return size


def max_document_bytes(options: Mapping[str, str]) -> int:
    """The `max_document_bytes` option: the largest (decompressed) document, tar member, JSON
    line or record a source reads into memory; bigger ones are Failure(reason="too_large")."""
    return size_option(options, MAX_DOCUMENT_BYTES_OPTION, DEFAULT_MAX_DOCUMENT_BYTES)


def task_bytes(options: Mapping[str, str]) -> int:
    """The `task_bytes` option (default 64MiB): about how much of a file one task reads, for a
    source whose task size is in bytes (traits.TaskSize); the launcher lowers it for the run."""
    return size_option(options, TASK_BYTES_OPTION, DEFAULT_TASK_BYTES)
