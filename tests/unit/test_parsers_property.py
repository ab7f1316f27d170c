"""Property: the parsers of files we did not write (a shard set's manifest.json and .idx, a
checkpoint's meta.json and DCP .metadata, a Parquet input's footer and row groups, the language
model cache's digest, an HF directory's config.json) given random bytes or random mutations of
real files either return or raise our one-line error type, never another exception, and never
run code.

The real files come from a shard set of Moby-Dick paragraphs (../shared/corpora), a Parquet
file of the same paragraphs, a checkpoint of a tiny GPT and its HF export. Mutations: byte flips, cuts, inserted bytes, 8-byte fields set to
extreme integers, JSON values replaced, and a pickle that would run code spliced in.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import pickle
import shutil
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common.safe_io import UnsafeInputError
from dataset_format import FormatError, IndexedDataset, Manifest
from tests.helpers.checkpoints import save_step, trained_gpt, trainer_state
from tests.shard_fixtures import make_gpt_shards
from train import checkpoint as ckpt
from train import checkpoint_io

FEW = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
EXTREMES = [0, 1, -1, 2**31 - 1, 2**31, 2**63 - 1, -(2**63), 2**64 - 1, 10**9]


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """Real bytes of each format, and a scratch directory for the mutated copies."""
    root = tmp_path_factory.mktemp("real")
    directory = make_gpt_shards(root, 30, num_shards=1)
    model, optimizer = trained_gpt()
    checkpoint = save_step(root / "run", 1, model, optimizer)

    def read(path):
        with open(path, "rb") as f:
            return f.read()

    return _Real(
        {
            "root": root,
            "manifest": read(os.path.join(directory, "manifest.json")),
            "idx": read(os.path.join(directory, "shard-00000.idx")),
            "bin": os.path.join(directory, "shard-00000.bin"),
            "meta": read(os.path.join(checkpoint, "meta.json")),
            "metadata": read(os.path.join(checkpoint, ".metadata")),
            "sizes": {name: r["bytes"] for name, r in ckpt.read_meta(checkpoint)["files"].items()},
            "counter": itertools.count(),
        }
    )


class _Real(dict):
    """The real files' bytes; a short repr, so that a failing example's report stays readable."""

    def __repr__(self) -> str:
        return "<real manifest.json, .idx, meta.json and .metadata>"


@st.composite
def mutated(draw, data: bytes) -> bytes:
    """`data` with 1-4 random edits (or, one time in six, replaced by random bytes)."""
    if draw(st.integers(0, 5)) == 0:
        return draw(st.binary(max_size=512))
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        pos = draw(st.integers(0, max(len(out) - 1, 0)))
        edit = draw(st.sampled_from(["flip", "cut", "insert", "int64", "int32"]))
        if edit == "flip" and out:
            out[pos] ^= draw(st.integers(1, 255))
        elif edit == "cut":
            del out[pos:]
        elif edit == "insert":
            out[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        else:
            fmt = "<q" if edit == "int64" else "<i"
            bits = 64 if edit == "int64" else 32
            value = draw(
                st.sampled_from(EXTREMES) | st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
            )
            value = (value + 2 ** (bits - 1)) % 2**bits - 2 ** (bits - 1)
            out[pos : pos + struct.calcsize(fmt)] = struct.pack(fmt, value)
    return bytes(out)


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**60), max_value=10**60)
    | st.floats(allow_nan=True)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def json_mutated(draw, data: bytes) -> bytes:
    """A JSON document with one value (anywhere in it) replaced, or its bytes mutated."""
    if draw(st.booleans()):
        return draw(mutated(data))
    doc = json.loads(data)
    node, key = doc, None
    for _ in range(draw(st.integers(1, 4))):
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        if not keys:
            break
        key = draw(st.sampled_from(keys))
        if not isinstance(node[key], (dict, list)):
            break
        node, key = (node[key], None) if draw(st.booleans()) else (node, key)
        if key is not None:
            break
    if key is not None:
        node[key] = draw(JSON_VALUES)
    return json.dumps(doc).encode()


@contextlib.contextmanager
def _returns_or_fails_on_one_line(error_type: type[Exception]):
    """The parser under it returns, or raises `error_type` with a one-line message."""
    try:
        yield
    except error_type as e:
        assert "\n" not in str(e), str(e)


@FEW
@given(st.data())
def test_manifest_parser(real, data):
    raw = data.draw(json_mutated(real["manifest"]))
    with _returns_or_fails_on_one_line(FormatError):
        Manifest.loads(raw, "manifest.json")


@FEW
@given(st.data())
def test_idx_parser(real, data):
    raw = data.draw(mutated(real["idx"]))
    # a fresh name per example: a memory map of an earlier file must never see it shrink
    prefix = str(real["root"] / f"pair-{next(real['counter'])}")
    shutil.copyfile(real["bin"], prefix + ".bin")
    with open(prefix + ".idx", "wb") as f:
        f.write(raw)
    with _returns_or_fails_on_one_line(FormatError):
        ds = IndexedDataset(prefix)
        ds.verify(vocab_size=50257)
        if ds.num_documents:
            ds.document(ds.num_documents - 1)
            ds.sequence(ds.num_sequences - 1)


@FEW
@given(st.data())
def test_checkpoint_meta_json_parser(real, data):
    raw = data.draw(json_mutated(real["meta"]))
    directory = real["root"] / f"ckpt-{next(real['counter'])}"
    directory.mkdir()
    (directory / "meta.json").write_bytes(raw)
    with _returns_or_fails_on_one_line(ckpt.CheckpointError):
        ckpt.read_meta(str(directory))


class _RunsCode:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@FEW
@given(st.data())
def test_dcp_metadata_parser(real, data):
    marker = real["root"] / "code-ran"
    raw = data.draw(mutated(real["metadata"]))
    if data.draw(st.integers(0, 3)) == 0:  # splice in a pickle that would run code
        pos = data.draw(st.integers(0, len(raw)))
        raw = raw[:pos] + pickle.dumps(_RunsCode(str(marker)))[2:-1] + raw[pos:]
    with _returns_or_fails_on_one_line(UnsafeInputError):
        md = checkpoint_io.parse_metadata(raw, ".metadata")
        checkpoint_io.check_metadata(md, ".metadata", real["sizes"])
    assert not marker.exists()


@pytest.fixture(scope="module")
def moby_parquet(tmp_path_factory):
    """A real Parquet file of 200 Moby-Dick paragraphs in row groups of 20, and its bytes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.shard_fixtures import book_paragraphs

    path = tmp_path_factory.mktemp("parquet") / "moby.parquet"
    pq.write_table(pa.table({"text": list(book_paragraphs("2701-0.txt")[:200])}), path,
                   row_group_size=20)
    return path, path.read_bytes()


@FEW
@given(st.data())
def test_parquet_footer_and_row_groups(moby_parquet, data):
    """A mutated file is read into Documents and Failures only; the rows a footer promised
    are each delivered or counted lost (issue 27.1)."""
    from pipelines.document import Document, Failure
    from pipelines.sources.files import parquet

    path, real_bytes = moby_parquet
    mutated_path = path.with_name(f"m-{data.draw(st.integers(0, 10**9))}.parquet")
    mutated_path.write_bytes(data.draw(mutated(real_bytes)))
    for task in parquet.plan(str(mutated_path), {}):
        items = list(parquet.read(task))
        assert all(isinstance(item, (Document, Failure)) for item in items)
        assert all("\n" not in item.detail for item in items if isinstance(item, Failure))


@pytest.fixture(scope="module")
def language_cache(tmp_path_factory):
    """The language model's real cache, built in a scratch cache directory."""
    from pipelines.clean import language

    saved = os.environ.get(language.CACHE_ENV)
    os.environ[language.CACHE_ENV] = str(tmp_path_factory.mktemp("cache"))
    language.decompressed_model.cache_clear()
    try:
        directory = language.decompressed_model()
    finally:
        language.decompressed_model.cache_clear()
        if saved is None:
            os.environ.pop(language.CACHE_ENV)
        else:
            os.environ[language.CACHE_ENV] = saved
    return directory, (directory / "content.sha256").read_bytes()


@FEW
@given(st.data())
def test_language_cache_digest(language_cache, data):
    """A mutated content digest is a mismatch (one line), never an error; only the digest the
    cache was built with matches (issue 27.2)."""
    from pipelines.clean import language

    directory, digest = language_cache
    raw = data.draw(mutated(digest))
    try:
        (directory / "content.sha256").write_bytes(raw)
        mismatch = language.cache_mismatch(directory)
    finally:
        (directory / "content.sha256").write_bytes(digest)
    assert (mismatch is None) == (raw == digest)
    assert mismatch is None or "\n" not in mismatch


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    """The HF export of a real tiny GPT checkpoint (with the model config export needs)."""
    import dataclasses

    pytest.importorskip("transformers")
    from train.export import export_hf

    root = tmp_path_factory.mktemp("hf")
    model, optimizer = trained_gpt()
    state = {**trainer_state(1), "config": {"seed": 1, "model": "gpt"},
             "model_config": dataclasses.asdict(model.config)}
    export_hf(save_step(root / "run", 1, model, optimizer, state), str(root / "hf"))
    return root / "hf", json.loads((root / "hf" / "config.json").read_text())


@FEW
@given(st.data())
def test_hf_config_bounds(hf_dir, data):
    """Any value of a size key is a positive integer the weights can hold, or one line; the
    check runs before anything is built (issue 27.5)."""
    from train.eval.load import LoadError, check_hf_config_size

    out, config = hf_dir
    edited = dict(config)
    for key in data.draw(st.lists(st.sampled_from(
            ["n_layer", "n_embd", "n_head", "vocab_size", "n_positions", "n_inner"]),
            min_size=1, max_size=3)):
        edited[key] = data.draw(JSON_VALUES | st.integers(-(10**30), 10**30))
    with _returns_or_fails_on_one_line(LoadError):
        check_hf_config_size(str(out), edited)
