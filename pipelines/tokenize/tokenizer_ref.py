"""The tokenizer as the pipeline's DoFns hold it: a reference to a JSON file every worker can
read (`TokenizerRef`), loaded once per process."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import threading
from collections.abc import Mapping

from common.safe_io import format_bytes
from common.storage import OutputDir, is_url, parent_and_name
from dataset_format.tokenizer import MAX_TOKENIZER_FILE_BYTES, TextTokenizer


@dataclasses.dataclass(frozen=True)
class TokenizerRef:
    """A tokenizer JSON file every worker can read, plus the facts the graph needs up front.

    DoFns hold this instead of the tokenizer: Beam pickles and bz2-compresses each DoFn several
    times while building and running a graph, and a GPT-2 tokenizer's JSON (2 MB) made that
    cost seconds per stage. Workers load the file once per process.
    """

    url: str
    sha256: str
    kind: str
    vocab_size: int
    special_ids: Mapping[str, int]
    # The padding / truncation settings switched off when the tokenizer was loaded (the
    # file at `url` no longer has them): recorded in the manifest.
    disabled: Mapping[str, Mapping] = dataclasses.field(default_factory=dict)

    @classmethod
    def describe(cls, tokenizer, url: str) -> TokenizerRef:
        identity = tokenizer.identity()
        return cls(
            url=url,
            sha256=identity["sha256"],
            kind=identity["kind"],
            vocab_size=int(identity["vocab_size"]),
            special_ids=dict(identity["special_ids"]),
            disabled=dict(tokenizer.disabled),
        )

    @classmethod
    def save(cls, tokenizer, url: str) -> TokenizerRef:
        """Write the tokenizer's JSON to `url` (atomically) and refer to it."""
        directory, name = parent_and_name(url)
        OutputDir(directory).write_bytes(name, tokenizer.to_json().encode("utf-8"))
        ref = cls.describe(tokenizer, url if is_url(url) else os.path.abspath(url))
        # The file holds this tokenizer's JSON: a run in this process uses it as loaded.
        with _TOKENIZERS_LOCK:
            _TOKENIZERS.setdefault((ref.url, ref.sha256), tokenizer)
        return ref

    def read_json(self) -> bytes:
        """The file's bytes, checked against the sha256 recorded when the run started."""
        directory, name = parent_and_name(self.url)
        data = OutputDir(directory).read_bytes(name, limit=MAX_TOKENIZER_FILE_BYTES)
        if len(data) > MAX_TOKENIZER_FILE_BYTES:
            raise RuntimeError(
                f"{self.url}: larger than a tokenizer file's cap of "
                f"{format_bytes(MAX_TOKENIZER_FILE_BYTES)} (changed since the run started)"
            )
        if hashlib.sha256(data).hexdigest() != self.sha256:
            raise RuntimeError(f"{self.url}: changed since the run started (sha256 differs)")
        return data

    def load(self):
        """The TextTokenizer (one per process and file)."""
        with _TOKENIZERS_LOCK:
            found = _TOKENIZERS.get((self.url, self.sha256))
            if found is None:
                found = TextTokenizer(self.read_json().decode("utf-8"))
                _TOKENIZERS[(self.url, self.sha256)] = found
            return found


_TOKENIZERS: dict[tuple[str, str], object] = {}
_TOKENIZERS_LOCK = threading.Lock()
