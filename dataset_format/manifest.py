"""`manifest.json`: what makes a directory of pairs a self-describing shard set.

It lists the shards in global document order with their counts, byte sizes and sha256 sums,
the token dtype, the tokenizer's identity and special ids (the tokenizer file itself sits beside
it), and the source and pipeline settings that produced the set. It is written last and
atomically: a directory without it is not a finished set.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections.abc import Sequence

from dataset_format.indexed import FormatError, ShardInfo, file_sha256

MANIFEST_NAME = "manifest.json"
FORMAT_NAME = "mmidx-shard-set"
FORMAT_VERSION = 1
SEQUENCE_UNITS = ("document", "sentence")


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
    def from_json(cls, data: dict) -> TokenizerInfo:
        return cls(
            file=data.get("file"),
            kind=data["kind"],
            vocab_size=int(data["vocab_size"]),
            sha256=data.get("sha256", ""),
            special_ids={k: int(v) for k, v in data.get("special_ids", {}).items()},
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

    @classmethod
    def from_json(cls, data: dict, where: str = MANIFEST_NAME) -> Manifest:
        if data.get("format") != FORMAT_NAME:
            raise FormatError(f"{where}: not a shard-set manifest (format={data.get('format')!r})")
        version = data.get("format_version")
        if version != FORMAT_VERSION:
            raise FormatError(f"{where}: unknown manifest format_version {version!r}")
        try:
            tokenizer = data.get("tokenizer")
            manifest = cls(
                dtype=data["dtype"],
                sequence_unit=data["sequence_unit"],
                shards=[ShardInfo.from_json(s) for s in data["shards"]],
                tokenizer=TokenizerInfo.from_json(tokenizer) if tokenizer else None,
                source=data.get("source", {}),
                pipeline=data.get("pipeline", {}),
                format_version=version,
            )
        except (KeyError, TypeError, ValueError) as e:
            raise FormatError(f"{where}: malformed manifest: {e!r}") from e
        names = [s.name for s in manifest.shards]
        if len(set(names)) != len(names):
            raise FormatError(f"{where}: a shard is listed twice")
        return manifest

    @classmethod
    def loads(cls, text: str, where: str = MANIFEST_NAME) -> Manifest:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise FormatError(f"{where}: not valid JSON: {e}") from e
        return cls.from_json(data, where)

    @classmethod
    def read(cls, directory: str) -> Manifest:
        path = os.path.join(directory, MANIFEST_NAME)
        if not os.path.exists(path):
            raise FormatError(f"{path}: no manifest: not a finished shard set")
        with open(path, encoding="utf-8") as f:
            return cls.loads(f.read(), path)

    def write(self, directory: str) -> str:
        """Write atomically (temp file + rename): readers see the old manifest or the new one."""
        path = os.path.join(directory, MANIFEST_NAME)
        tmp = path + f".tmp-{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self.to_json(), f, indent=2, sort_keys=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
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
        name = tokenizer.file or os.path.basename(tokenizer_file)
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
