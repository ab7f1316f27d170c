"""Step 4 of writing a shard set: finish it, then delete the spill files.

Finishing runs once, with the shard records (tiny) as a side input: sort shards by name, write
`stats.json`, copy the tokenizer, and write `manifest.json` last. A run killed at any point
before that leaves no manifest, so nothing reads its output as a finished set. Then each
bucket's spill files are deleted, one bucket per element (spread over workers).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import Iterable, Iterator

import apache_beam as beam

from common.storage import base_name
from dataset_format import MANIFEST_NAME, Manifest, ShardInfo, TokenizerInfo
from pipelines.output import (
    REJECTS_DIR,
    SPILL_DIR,
    STATS_NAME,
    TOKENIZER_NAME,
    WORK_DIR,
    OutputDir,
    write_marker,
)
from pipelines.stats import (
    DEFAULT_MAX_DROP_SHARE,
    AccountError,
    build_stats,
    check_stats,
    drop_notes,
)

LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ShardSetSpec:
    """What the finishing step needs besides the shards: the manifest's description of the set
    (deterministic: no times or worker counts, so reruns give the same manifest) and the
    run's own facts, which go to stats.json only."""

    output: str
    dtype: str
    sequence_unit: str
    max_failure_rate: float
    source: dict
    pipeline: dict
    run: dict = dataclasses.field(default_factory=dict)
    max_drop_share: float = DEFAULT_MAX_DROP_SHARE
    # drop reason -> what changes it, as each stage of the graph declares (stats.check_stats)
    drop_flags: dict = dataclasses.field(default_factory=dict)


def _tokenizer_info(out: OutputDir, tokenizer_ref) -> TokenizerInfo:
    """Ship the run's tokenizer as OUTPUT/tokenizer.json (the launcher wrote it there or in
    the work area) and describe it."""
    data = tokenizer_ref.read_json()
    if out.path(TOKENIZER_NAME) != tokenizer_ref.url:
        out.write_bytes(TOKENIZER_NAME, data)
    return TokenizerInfo(
        file=TOKENIZER_NAME,
        kind=tokenizer_ref.kind,
        vocab_size=tokenizer_ref.vocab_size,
        sha256=hashlib.sha256(data).hexdigest(),
        special_ids={k: int(v) for k, v in tokenizer_ref.special_ids.items()},
    )


def _write_json(out: OutputDir, name: str, data: dict) -> None:
    out.write_bytes(name, (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))


def finish_shard_set(
    spec: ShardSetSpec,
    tokenizer_ref,
    shards: Iterable[ShardInfo],
    counts: dict[str, int],
    rejects_written: int = 0,
) -> dict:
    """Write stats.json, check the account, ship the tokenizer, write manifest.json last.

    Raises AccountError (after writing stats.json with the reason) when the account does not
    balance, no document was written or too many records failed; then no manifest is written.
    """
    out = OutputDir(spec.output)
    shards = sorted(shards, key=lambda s: s.name)
    run = dict(spec.run)
    started = run.pop("started_at", None)
    extra = {
        "status": "ok",
        "source": spec.source,
        "output": out.url,
        "rejects_written": int(rejects_written),
        "run": run,
    }
    if started is not None:
        extra["elapsed_s"] = round(time.time() - float(started), 3)
    stats = build_stats(counts, max_failure_rate=spec.max_failure_rate,
                        max_drop_share=spec.max_drop_share, extra=extra)
    try:
        check_stats(stats, spec.drop_flags)
        if sum(s.documents for s in shards) != stats["written"]:
            raise AccountError(
                f"the shards hold {sum(s.documents for s in shards)} documents but "
                f"{stats['written']} were counted as written"
            )
    except AccountError as e:
        _write_failed_stats(out, stats, e)
        raise
    stats["notes"] = drop_notes(stats, spec.drop_flags)
    # stats.json says "ok" only once the manifest is written: until then it says "finishing",
    # and any error on the way turns it into "failed" (as far as the disk still allows).
    try:
        tokenizer_info = _tokenizer_info(out, tokenizer_ref)
        for shard in shards:
            for name, expected in _shard_files(shard):
                if out.size(name) != expected:
                    raise RuntimeError(f"{out.path(name)}: missing or not {expected} bytes")
        out.delete(n for n in out.list_files() if base_name(n) != n)
        _write_json(out, STATS_NAME, {**stats, "status": "finishing"})
        manifest = Manifest(
            dtype=spec.dtype,
            sequence_unit=spec.sequence_unit,
            shards=shards,
            tokenizer=tokenizer_info,
            source=spec.source,
            pipeline=spec.pipeline,
        )
        set_files = [MANIFEST_NAME, STATS_NAME, TOKENIZER_NAME]
        set_files += [name for s in shards for name, _ in _shard_files(s)]
        set_files += [f"{REJECTS_DIR}/{n}" for n in out.child(REJECTS_DIR).list_files()]
        write_marker(out, str(spec.run.get("run_id", "")), set_files)
        _write_json(out, MANIFEST_NAME, manifest.to_json())  # marks the set finished
        try:
            _write_json(out, STATS_NAME, stats)
        except Exception:
            out.delete([MANIFEST_NAME])  # a finished set with a stats.json that says otherwise
            raise
    except Exception as e:
        _write_failed_stats(out, stats, e)
        raise
    return stats


def _shard_files(shard: ShardInfo) -> list[tuple[str, int]]:
    """(name, bytes) of each file of a shard: its pair and its metadata sidecar."""
    files = [(shard.name + ".bin", shard.bin_bytes), (shard.name + ".idx", shard.idx_bytes)]
    if shard.meta is not None:
        files.append((shard.meta.file, shard.meta.bytes))
    return files


def _write_failed_stats(out: OutputDir, stats: dict, error: Exception) -> None:
    stats["status"] = "failed"
    stats["error"] = str(error)
    try:
        _write_json(out, STATS_NAME, stats)
    except OSError as e:
        LOG.error("%s: could not record the failure in stats.json: %s", out.url, e)


class FinishShardSetDoFn(beam.DoFn):
    """The single last step, run once (its input is one Impulse); the (tiny) list of every
    ShardInfo and the run's counts come as side inputs."""

    def __init__(self, spec: ShardSetSpec, tokenizer_ref):
        self.spec = spec
        self.tokenizer_ref = tokenizer_ref

    def process(
        self, _once: bytes, shards: list[ShardInfo], counts: dict, rejects_written: int
    ) -> Iterator:
        yield finish_shard_set(self.spec, self.tokenizer_ref, shards, counts, rejects_written)


class DeleteSpillsDoFn(beam.DoFn):
    """(bucket, spill names) -> those files deleted, once the set is finished. One element per
    bucket, so the deleting is spread over workers like the merging was (not left to the one
    finishing worker)."""

    def __init__(self, output: str):
        self.output = output

    def process(self, element: tuple[int, list[str]], finished) -> Iterator[int]:
        _, names = element
        OutputDir(self.output).child(WORK_DIR).child(SPILL_DIR).delete(names)
        yield len(names)
