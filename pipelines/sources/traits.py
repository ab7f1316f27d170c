"""What the rest of the pipeline must know about a source, declared by the source itself.

Each source module sets `TRAITS = SourceTraits(...)`; what depends on them reads them through
`sources.source_traits`: the clean preset and the default language (`PreprocessConfig.clean_config`
hands them to `CleanConfig.for_run`), the default `--min-tokens` (`PreprocessConfig`), the task
size (`sources.sized_read_options`), the bound on the documents dedup sizes its rounds to
(`sources/document_bound.py`) and the launcher's check of the input's format
(`sources/formats.py`), so that no code outside `pipelines/sources/` compares a source's name.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping

from pipelines.sources.sizes import (
    DEFAULT_TASK_BYTES,
    MAX_DOCUMENT_BYTES_OPTION,
    TASK_BYTES_OPTION,
    size_option,
)


class DocumentBound(enum.Enum):
    """What bounds the documents a source's input files can hold, before they are read.

    Every bound is also capped by the text a file can yield over the cleaning's shortest
    document (sources/document_bound.py); the members below add what the format itself allows."""

    # Only that: a file's text is bounded by its bytes and --max-expansion.
    TEXT = "text"
    # A plain file (neither compressed nor a tar) holds the document's own characters, one
    # document a file (a book).
    ONE_PER_PLAIN_FILE = "one per plain file"
    # A plain file holds the documents' own characters, at most one document a line (JSON lines).
    ONE_PER_PLAIN_LINE = "one per plain line"
    # One document a row of the files' Parquet footers.
    ONE_PER_ROW = "one per row"

    @property
    def plain_text(self) -> bool:
        """Whether a plain file's text is its own characters (at least a byte each)."""
        return self in (DocumentBound.ONE_PER_PLAIN_FILE, DocumentBound.ONE_PER_PLAIN_LINE)


@dataclasses.dataclass(frozen=True)
class TaskSize:
    """The source option that bounds the input a read task reads, in `unit` bytes per unit of
    its value; `default` is in those units. Unit 1 takes sizes ("64MiB"); others a number."""

    option: str = TASK_BYTES_OPTION
    default: float = DEFAULT_TASK_BYTES
    unit: int = 1
    unit_name: str = "bytes"

    def bytes(self, options: Mapping[str, str]) -> int:
        """The bound in bytes, from `options` or the default. ValueError for a bad value."""
        if self.unit == 1:
            return size_option(options, self.option, int(self.default))
        value = options.get(self.option, self.default)
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ValueError(
                f"{self.option} must be a number of {self.unit_name}, got {value!r}"
            ) from None
        if not number > 0:
            raise ValueError(f"{self.option} must be positive, got {value!r}")
        return max(1, int(number * self.unit))

    def option_value(self, size: int) -> str:
        """The option's value that means `size` bytes."""
        return str(size) if self.unit == 1 else f"{size / self.unit:.6f}"


@dataclasses.dataclass(frozen=True)
class InputFormat:
    """What a source's files look like, told from their first decompressed bytes (SNIFF_BYTES):
    the launcher names a file given to the wrong source, and the sources that read it
    (sources/formats.py), instead of a run that fails on every worker."""

    name: str  # what the source reads, in the error: "a MediaWiki XML dump"
    matches: Callable[[bytes], bool]  # the head of a non-empty file -> is it of this format
    # False: the format only names this source for a file given to another; a file not of it
    # is its reader's to count (a web crawl holds images and junk among its pages)
    refuse_others: bool = True


def leading_text(head: bytes) -> bytes:
    """`head` from its first character that is not a UTF-8 BOM or white space: what a format's
    first token is looked for in."""
    return head.removeprefix(b"\xef\xbb\xbf").lstrip()


@dataclasses.dataclass(frozen=True)
class SourceTraits:
    # Crawled web pages: cleaned with the web preset (Gopher and C4 rules) instead of the
    # light one for curated text.
    web_text: bool = False
    # Documents with fewer tokens are dropped unless --min-tokens says otherwise (0: only
    # documents with no token at all).
    min_tokens: int = 0
    task_size: TaskSize = TaskSize()
    documents: DocumentBound = DocumentBound.TEXT
    # For a source whose input files say what language they are in (a Wikipedia dump's
    # <siteinfo>): path -> that language's code ("" where the file names none; None where the
    # file is not one the source reads as input). Each document read then carries the code in
    # meta[SOURCE_LANGUAGE_META], which the language filter keeps where --language is not given
    # (the file is read on a worker, so the language travels with its documents); the launcher
    # calls this on a few input files to say so in the run's first lines.
    input_language: Callable[[str], str | None] | None = None
    # None: the source reads any text, so no file is refused by its look (nor is the source
    # suggested for one)
    input_format: InputFormat | None = None
    # The --source-option keys the source reads beyond those every source reads (its task size
    # option and max_document_bytes): any other key is refused before the run (`option_keys`).
    options: tuple[str, ...] = ()

    def option_keys(self) -> tuple[str, ...]:
        """Every --source-option key the source reads, sorted."""
        return tuple(sorted({self.task_size.option, MAX_DOCUMENT_BYTES_OPTION, *self.options}))
