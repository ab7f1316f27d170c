"""The shard format: Megatron-compatible MMIDIDX `.bin`/`.idx` pairs plus a `manifest.json`.

Imports neither `pipelines` nor `train`; both sides build on it.
"""

from dataset_format.indexed import (
    DTYPE_CODES,
    FormatError,
    IndexedDataset,
    IndexedDatasetWriter,
    ShardInfo,
    dtype_for_vocab,
    file_sha256,
    merge_indexed,
    shard_info,
)
from dataset_format.manifest import (
    INDEX_CACHE_DIR,
    MANIFEST_NAME,
    SPECIAL_TOKEN_NAMES,
    Manifest,
    TokenizerInfo,
    write_shard_set_manifest,
)
from dataset_format.shardset import ShardSet, fetch_shard_set

__all__ = [
    "DTYPE_CODES",
    "FormatError",
    "IndexedDataset",
    "INDEX_CACHE_DIR",
    "IndexedDatasetWriter",
    "MANIFEST_NAME",
    "Manifest",
    "SPECIAL_TOKEN_NAMES",
    "ShardInfo",
    "ShardSet",
    "TokenizerInfo",
    "dtype_for_vocab",
    "fetch_shard_set",
    "file_sha256",
    "merge_indexed",
    "shard_info",
    "write_shard_set_manifest",
]
