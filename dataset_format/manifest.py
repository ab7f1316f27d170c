"""`manifest.json`: what makes a directory of pairs a self-describing shard set.

It lists the shards in global document order with their counts, byte sizes and sha256 sums
(and, where the pipeline wrote one, each shard's metadata sidecar: its rows, size and sha256),
the token dtype, the tokenizer's identity and special ids (the tokenizer file itself sits beside
it), and the source and pipeline settings that produced the set. It is written last and
atomically: a directory without it is not a finished set.

A manifest may come from anyone (a remote set is fetched by what its manifest names), so every
field is type-checked on reading and every file it names must be a plain file name inside the
set: no path separators, no `.`/`..`, no drive or URL colon, and no two names that one
filesystem could take for the same file. Anything else is a FormatError naming the manifest.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import unicodedata
from collections.abc import Sequence

from common.safe_io import UnsafeInputError, parse_json, read_bytes_capped
from common.storage import write_text_atomic
from dataset_format.indexed import TOKEN_DTYPE_CODES, FormatError, ShardInfo, file_sha256
from dataset_format.sidecar import SidecarInfo

MANIFEST_NAME = "manifest.json"
FORMAT_NAME = "mmidx-shard-set"
FORMAT_VERSION = 1
SEQUENCE_UNITS = ("document", "sentence")
# Far above any real manifest (~300 bytes a shard); a bound on what a hostile one can make us read.
MAX_MANIFEST_BYTES = 64 << 20
_SHA256 = re.compile(r"[0-9a-f]{64}")
_SHARD_INT_FIELDS = ("documents", "sequences", "tokens", "bin_bytes", "idx_bytes")
# Counts are file offsets and lengths (int64 in the .idx); token ids are int32 at most (Megatron
# stores them as int32 above a uint16 vocabulary). Anything larger is a broken or hostile file.
MAX_COUNT = (1 << 63) - 1
MAX_VOCAB_SIZE = 1 << 31


def check_file_name(name: object, what: str, where: str) -> str:
    """`name` if it is a plain file name (one path component, inside the set); else FormatError.

    A manifest's names are joined to the set's directory (or URL) and to the local cache;
    `..`, separators, absolute paths, drive letters (`C:`) and URL schemes would reach outside.
    """
    if not isinstance(name, str) or not name:
        raise FormatError(f"{where}: {what} must be a non-empty file name, got {name!r}")
    if (
        name in (".", "..")
        or any(c in name for c in "/\\:")
        or any(unicodedata.category(c) == "Cc" for c in name)
    ):
        raise FormatError(f"{where}: {what} {name!r} is not a plain file name inside the shard set")
    return name


def _same_file_key(name: str) -> str:
    # Case-insensitive (macOS, Windows) and normalising (macOS) filesystems map these together.
    return unicodedata.normalize("NFC", name).casefold()


def _check_distinct(names: list[tuple[str, str]], where: str) -> None:
    seen: dict[str, str] = {}
    for what, name in names:
        key = _same_file_key(name)
        if key in seen:
            raise FormatError(
                f"{where}: {what} {name!r} names the same file as {seen[key]} (listed twice)"
            )
        seen[key] = f"{what} {name!r}"


def _field(data: dict, key: str, types: type | tuple, where: str, *, required: bool = True):
    if key not in data:
        if required:
            raise FormatError(f"{where}: malformed manifest: missing {key!r}")
        return None
    value = data[key]
    # bool is an int to Python, never a count or an id here
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in _as_tuple(types)):
        names = " or ".join(t.__name__ for t in _as_tuple(types))
        raise FormatError(
            f"{where}: malformed manifest: {key!r} must be {names}, got {type(value).__name__}"
        )
    return value


def _as_tuple(types: type | tuple) -> tuple:
    return types if isinstance(types, tuple) else (types,)


def _count(data: dict, key: str, where: str, *, minimum: int = 0, maximum: int = MAX_COUNT) -> int:
    value = _field(data, key, int, where)
    if not minimum <= value <= maximum:
        raise FormatError(
            f"{where}: malformed manifest: {key!r} must be in [{minimum}, {maximum}], "
            f"got {_short(value)}"
        )
    return value


def _short(value: int) -> str:
    """An integer for a message: a hostile one may have thousands of digits."""
    text = str(value)
    return text if len(text) <= 24 else f"an integer of {len(text)} digits"


def _sha256(data: dict, key: str, where: str, *, required: bool = True) -> str:
    value = _field(data, key, str, where, required=required)
    if value is None or (value == "" and not required):
        return ""
    if not _SHA256.fullmatch(value):
        raise FormatError(f"{where}: malformed manifest: {key!r} is not a sha256 hex digest")
    return value


def shard_from_json(data: object, where: str) -> ShardInfo:
    """One `shards` entry, every field type-checked and its name a plain file name."""
    if not isinstance(data, dict):
        raise FormatError(f"{where}: malformed manifest: a shard entry is {type(data).__name__}")
    name = check_file_name(_field(data, "name", str, where), "shard name", where)
    counts = {key: _count(data, key, f"{where}: shard {name!r}") for key in _SHARD_INT_FIELDS}
    meta = _field(data, "meta", dict, f"{where}: shard {name!r}", required=False)
    return ShardInfo(
        name=name,
        **counts,
        bin_sha256=_sha256(data, "bin_sha256", f"{where}: shard {name!r}"),
        idx_sha256=_sha256(data, "idx_sha256", f"{where}: shard {name!r}"),
        meta=None if meta is None else sidecar_from_json(meta, f"{where}: shard {name!r}: meta"),
    )


def sidecar_from_json(data: dict, where: str) -> SidecarInfo:
    """A shard's optional `meta` entry (its metadata sidecar), every field type-checked."""
    return SidecarInfo(
        file=check_file_name(_field(data, "file", str, where), "sidecar file", where),
        rows=_count(data, "rows", where),
        bytes=_count(data, "bytes", where),
        sha256=_sha256(data, "sha256", where),
    )


# The subdirectory of a shard set where a reader (the trainer) may keep index arrays derived from
# the set (document/sample/shuffle indices). It is part of the set's layout: the writer replaces
# it with the set (--overwrite), and no tool mistakes it for a stranger's files.
INDEX_CACHE_DIR = "index-cache"


# Special tokens by the names a manifest records them under (`TokenizerInfo.special_ids`), with
# the token strings each name is found as in a vocabulary. The pipeline (describing the
# tokenizer it writes with) and the trainer (describing a --tokenizer for foreign shards) both
# read it here, so the two always describe one tokenizer alike.
SPECIAL_TOKEN_NAMES: dict[str, tuple[str, ...]] = {
    "eod": ("<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>"),
    "cls": ("[CLS]",),
    "sep": ("[SEP]",),
    "mask": ("[MASK]",),
    "pad": ("[PAD]", "<pad>"),
    "unk": ("[UNK]", "<unk>"),
}


@dataclasses.dataclass(frozen=True)
class TokenizerInfo:
    """Which tokenizer made the ids: the file in the set, its checksum and its special ids."""

    file: str | None
    kind: str
    vocab_size: int
    sha256: str = ""
    special_ids: dict[str, int] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: object, where: str = MANIFEST_NAME) -> TokenizerInfo:
        if not isinstance(data, dict):
            raise FormatError(f"{where}: malformed manifest: 'tokenizer' must be an object")
        where = f"{where}: tokenizer"
        file = _field(data, "file", (str, type(None)), where, required=False)
        if file is not None:
            check_file_name(file, "tokenizer file", where)
        special_ids = _field(data, "special_ids", dict, where, required=False) or {}
        for name, token_id in special_ids.items():
            if (
                not isinstance(token_id, int)
                or isinstance(token_id, bool)
                or not 0 <= token_id < MAX_VOCAB_SIZE
            ):
                shown = _short(token_id) if isinstance(token_id, int) else repr(token_id)
                raise FormatError(
                    f"{where}: malformed manifest: special id {name!r} must be an int in "
                    f"[0, {MAX_VOCAB_SIZE}), got {shown}"
                )
        return cls(
            file=file,
            kind=_field(data, "kind", str, where),
            vocab_size=_count(data, "vocab_size", where, minimum=1, maximum=MAX_VOCAB_SIZE),
            sha256=_sha256(data, "sha256", where, required=False),
            special_ids=dict(special_ids),
        )


@dataclasses.dataclass
class Manifest:
    dtype: str
    sequence_unit: str
    shards: list[ShardInfo]
    tokenizer: TokenizerInfo | None = None
    source: dict = dataclasses.field(default_factory=dict)
    pipeline: dict = dataclasses.field(default_factory=dict)
    format_version: int = FORMAT_VERSION

    @property
    def documents(self) -> int:
        return sum(s.documents for s in self.shards)

    @property
    def sequences(self) -> int:
        return sum(s.sequences for s in self.shards)

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.shards)

    def to_json(self) -> dict:
        return {
            "format": FORMAT_NAME,
            "format_version": self.format_version,
            "dtype": self.dtype,
            "sequence_unit": self.sequence_unit,
            "totals": {
                "shards": len(self.shards),
                "documents": self.documents,
                "sequences": self.sequences,
                "tokens": self.tokens,
            },
            "tokenizer": self.tokenizer.to_json() if self.tokenizer else None,
            "shards": [s.to_json() for s in self.shards],
            "source": self.source,
            "pipeline": self.pipeline,
        }

    def check_names(self, where: str = MANIFEST_NAME) -> None:
        """Every file the manifest names is a plain name in the set, and no two are one file."""
        names = [("the manifest", MANIFEST_NAME)]
        for shard in self.shards:
            check_file_name(shard.name, "shard name", where)
            names += [("shard file", shard.name + ".bin"), ("shard file", shard.name + ".idx")]
            if shard.meta is not None:
                check_file_name(shard.meta.file, "sidecar file", where)
                names.append(("sidecar file", shard.meta.file))
        if self.tokenizer is not None and self.tokenizer.file is not None:
            check_file_name(self.tokenizer.file, "tokenizer file", where)
            names.append(("tokenizer file", self.tokenizer.file))
        _check_distinct(names, where)

    @classmethod
    def from_json(cls, data: object, where: str = MANIFEST_NAME) -> Manifest:
        if not isinstance(data, dict):
            raise FormatError(
                f"{where}: not a shard-set manifest (a JSON {type(data).__name__}, not an object)"
            )
        if data.get("format") != FORMAT_NAME:
            raise FormatError(f"{where}: not a shard-set manifest (format={data.get('format')!r})")
        version = data.get("format_version")
        if version != FORMAT_VERSION or isinstance(version, bool):
            raise FormatError(f"{where}: unknown manifest format_version {version!r}")
        dtype = _field(data, "dtype", str, where)
        if dtype not in {str(d) for d in TOKEN_DTYPE_CODES.values()}:
            raise FormatError(
                f"{where}: malformed manifest: dtype {dtype!r} has no MMIDIDX code for token ids"
            )
        sequence_unit = _field(data, "sequence_unit", str, where)
        if sequence_unit not in SEQUENCE_UNITS:
            raise FormatError(
                f"{where}: malformed manifest: sequence_unit must be one of {SEQUENCE_UNITS}, "
                f"got {sequence_unit!r}"
            )
        tokenizer = _field(data, "tokenizer", (dict, type(None)), where, required=False)
        manifest = cls(
            dtype=dtype,
            sequence_unit=sequence_unit,
            shards=[shard_from_json(s, where) for s in _field(data, "shards", list, where)],
            tokenizer=TokenizerInfo.from_json(tokenizer, where) if tokenizer else None,
            source=_field(data, "source", dict, where, required=False) or {},
            pipeline=_field(data, "pipeline", dict, where, required=False) or {},
            format_version=version,
        )
        manifest.check_names(where)
        return manifest

    @classmethod
    def loads(cls, text: str | bytes, where: str = MANIFEST_NAME) -> Manifest:
        if len(text) > MAX_MANIFEST_BYTES:
            raise FormatError(f"{where}: over {MAX_MANIFEST_BYTES} bytes: not a manifest")
        try:
            data = parse_json(text, where)
        except UnsafeInputError as e:
            raise FormatError(str(e)) from None
        return cls.from_json(data, where)

    @classmethod
    def read(cls, directory: str) -> Manifest:
        path = os.path.join(directory, MANIFEST_NAME)
        if not os.path.lexists(path):
            raise FormatError(f"{path}: no manifest: not a finished shard set")
        try:
            data = read_bytes_capped(path, "manifest", MAX_MANIFEST_BYTES)
        except UnsafeInputError as e:
            raise FormatError(str(e)) from None
        return cls.loads(data, path)

    def write(self, directory: str) -> str:
        """Write atomically (temp file + rename): readers see the old manifest or the new one."""
        self.check_names(os.path.join(directory, MANIFEST_NAME))
        path = os.path.join(directory, MANIFEST_NAME)
        write_text_atomic(path, json.dumps(self.to_json(), indent=2, sort_keys=False) + "\n")
        return path


def write_shard_set_manifest(
    directory: str,
    shards: Sequence[ShardInfo],
    *,
    dtype: str,
    sequence_unit: str,
    tokenizer: TokenizerInfo | None = None,
    tokenizer_file: str | None = None,
    source: dict | None = None,
    pipeline: dict | None = None,
) -> Manifest:
    """Finish a shard set: copy the tokenizer file in (checksummed) and write the manifest last.

    `shards` must already be in global document order and lie in `directory`.
    """
    if sequence_unit not in SEQUENCE_UNITS:
        raise ValueError(f"sequence_unit must be one of {SEQUENCE_UNITS}, got {sequence_unit!r}")
    for shard in shards:
        for ext, size in ((".bin", shard.bin_bytes), (".idx", shard.idx_bytes)):
            path = os.path.join(directory, shard.name + ext)
            if not os.path.exists(path) or os.path.getsize(path) != size:
                raise FormatError(f"{path}: missing or not the {size} bytes its record says")
    if tokenizer_file is not None:
        if tokenizer is None:
            raise ValueError("tokenizer_file given without its TokenizerInfo")
        name = check_file_name(
            tokenizer.file or os.path.basename(tokenizer_file), "tokenizer file", directory
        )
        target = os.path.join(directory, name)
        if os.path.abspath(tokenizer_file) != os.path.abspath(target):
            shutil.copyfile(tokenizer_file, target)
        tokenizer = dataclasses.replace(tokenizer, file=name, sha256=file_sha256(target))
    manifest = Manifest(
        dtype=str(dtype),
        sequence_unit=sequence_unit,
        shards=list(shards),
        tokenizer=tokenizer,
        source=dict(source or {}),
        pipeline=dict(pipeline or {}),
    )
    manifest.write(directory)
    return manifest
