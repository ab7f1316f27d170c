"""Is the input of the source's format? The launcher looks at the first bytes of the first few
input files before anything is written: a book given to `--source wikipedia` is one line naming
the file, what the source reads and the sources that read it, instead of a run whose every
worker counts the file as one that "broke off". Each source declares its format
(`SourceTraits.input_format`); one that reads any text (web pages) only names itself for a file
given to another source, and a file given to it is never refused here.

Only the first SAMPLE_FILES files (by path) are looked at: a run over a million files opens no
more than that on the launcher. A later file of the wrong format is counted as a failed file by
the reader, as any unreadable file is; a file that cannot be opened or decompressed here is left
to the reader too, which reports it with its cause.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence

from pipelines.io import open_input
from pipelines.sources import SOURCES, source_traits
from pipelines.sources.compression import open_decompressed
from pipelines.sources.input_errors import InputError

SAMPLE_FILES = 8


def _head(path: str) -> bytes | None:
    """The first SNIFF_BYTES decompressed bytes of `path`; None where it cannot be read."""
    try:
        with open_input(path) as raw:
            return text_head(open_decompressed(raw).head)
    except (InputError, OSError, EOFError):
        return None


def text_head(head: bytes) -> bytes:
    """`head` as the readers see it: UTF-16 with a BOM (which `decode_text` reads) as the UTF-8
    of its text, since every format test looks at bytes (and finds a NUL in each ASCII
    character of UTF-16); other bytes unchanged."""
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return head.decode("utf-16", errors="replace").encode("utf-8")
    return head


def sources_reading(head: bytes) -> list[str]:
    """The sources whose declared format `head` matches, by name."""
    matching = []
    for name in sorted(SOURCES):
        input_format = source_traits(name).input_format
        if input_format is not None and input_format.matches(head):
            matching.append(name)
    return matching


def check_input_format(source: str, paths: Sequence[str]) -> None:
    """ValueError, one line, for the first of the first SAMPLE_FILES paths that holds bytes and
    is not of the source's format: the file, what the source reads, how the file starts, and
    the sources that read it."""
    input_format = source_traits(source).input_format
    if input_format is None or not input_format.refuse_others:
        return
    for path in paths[:SAMPLE_FILES]:
        head = _head(path)
        if not head or not head.strip() or input_format.matches(head):
            continue
        others = [name for name in sources_reading(head) if name != source]
        if others:
            advice = " or ".join(f"--source {name}" for name in others) + " reads it"
        else:
            advice = "no source reads it: leave it out of --input"
        raise ValueError(
            f"{path} is not {input_format.name}, which --source {source} reads (it starts "
            f"{head[:24]!r}); {advice}"
        )
