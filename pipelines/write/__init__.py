"""Writing a shard set from many workers: deterministic, bounded shards, idempotent under retries.

How documents reach shards (the names and the order are the contract), one module per step:

1. `spill`: every tokenized document goes to bucket `xxh64(id) % num_buckets`; each bundle
   appends its documents to one spill file per bucket under `OUTPUT/_work/spill/`, with a name
   unique to the bundle attempt, and emits only `(bucket, spill name)` when it commits.
2. Group the tiny spill names by bucket (GroupByKey, in `WriteShards` below): one element per
   bucket, so writing runs on as many workers as there are buckets, whatever the bundles were.
3. `merge`: each bucket's documents sorted by id, cut into consecutive shards of at most
   `shard_tokens` tokens, named `shard-<bucket:05d>-<part:05d>`.
4. `finish`: sort shards by name, write `stats.json`, copy the tokenizer, and write
   `manifest.json` last; then each bucket's spill files are deleted.

Before any of it the launcher claims OUTPUT (`output.claim_output`): a lock for the run, and the
ownership marker that says which files of the directory a run may replace. `rejects` writes the
--keep-rejects audit files. `output.OutputDir` is the storage layer all of them write through.

Global document order: shards by name (bucket, then part), documents by id within a bucket.
"""

from __future__ import annotations

import apache_beam as beam
import numpy as np

from pipelines.output import (
    DEDUP_OUTPUT,
    LOCK_NAME,
    MARKER_NAME,
    REJECTS_DIR,
    SHARD_SET,
    SPILL_DIR,
    STATS_NAME,
    TOKENIZER_NAME,
    WORK_DIR,
    OutputClaim,
    OutputDir,
    OutputError,
    OutputLayout,
    check_free_space,
    claim_output,
    describe_storage_error,
    normalize_output,
    try_lock_directory,
    write_marker,
)
from pipelines.write.finish import (
    DeleteSpillsDoFn,
    FinishShardSetDoFn,
    ShardSetSpec,
    finish_shard_set,
)
from pipelines.write.merge import (
    DEFAULT_SHARD_TOKENS,
    SHARD_PREFIX,
    MergeBucketDoFn,
    shard_name,
    split_into_parts,
    write_bucket,
)
from pipelines.write.rejects import WriteRejects, reject_record
from pipelines.write.spill import (
    SpillDoFn,
    SpillFile,
    SpillWriter,
    bucket_of,
    default_num_buckets,
    spill_name,
)

__all__ = [
    "DEDUP_OUTPUT",
    "DEFAULT_SHARD_TOKENS",
    "DeleteSpillsDoFn",
    "FinishShardSetDoFn",
    "LOCK_NAME",
    "MARKER_NAME",
    "OutputClaim",
    "OutputDir",
    "OutputError",
    "OutputLayout",
    "REJECTS_DIR",
    "SHARD_PREFIX",
    "SHARD_SET",
    "SPILL_DIR",
    "STATS_NAME",
    "ShardSetSpec",
    "SpillDoFn",
    "SpillFile",
    "SpillWriter",
    "TOKENIZER_NAME",
    "WORK_DIR",
    "WriteRejects",
    "WriteShards",
    "bucket_of",
    "check_free_space",
    "claim_output",
    "default_num_buckets",
    "describe_storage_error",
    "finish_shard_set",
    "normalize_output",
    "reject_record",
    "shard_name",
    "spill_name",
    "split_into_parts",
    "try_lock_directory",
    "write_bucket",
    "write_marker",
]


class WriteShards(beam.PTransform):
    """PCollection[TokenizedDocument] -> {"shards": ShardInfo per shard, "counts": dicts,
    "spills": (bucket, spill names) for DeleteSpillsDoFn once the set is finished}."""

    def __init__(
        self,
        output: str,
        *,
        num_buckets: int,
        shard_tokens: int,
        dtype: str,
        progress_dir: str | None = None,
    ):
        super().__init__()
        if num_buckets <= 0:
            raise ValueError(f"num_buckets must be positive, got {num_buckets}")
        self.output = normalize_output(output)
        self.num_buckets = num_buckets
        self.shard_tokens = shard_tokens
        self.dtype = str(np.dtype(dtype))
        self.progress_dir = progress_dir

    def expand(self, documents):
        merged = (
            documents
            | "Spill" >> beam.ParDo(SpillDoFn(self.output, self.num_buckets, self.dtype))
            | "GroupByBucket" >> beam.GroupByKey()
            | "Merge"
            >> beam.ParDo(
                MergeBucketDoFn(self.output, self.shard_tokens, self.dtype, self.progress_dir)
            ).with_outputs("counts", "spills", main="shards")
        )
        return {"shards": merged.shards, "counts": merged.counts, "spills": merged.spills}
