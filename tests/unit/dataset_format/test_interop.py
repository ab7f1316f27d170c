"""tools/convert: nanoGPT and llm.c token files to and from shard sets, on real GPT-2 ids."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from dataset_format import FormatError, IndexedDatasetWriter, ShardSet, write_shard_set_manifest
from dataset_format.interop import (
    export_llmc,
    export_nanogpt,
    import_llmc,
    import_nanogpt,
    megatron_args,
    read_llmc,
    split_documents_at_eod,
)
from tests.conftest import GPT2_VOCAB, REPO
from tests.shard_fixtures import GPT2_EOD, gpt_documents

CONVERT = [sys.executable, str(REPO / "tools" / "convert")]


@pytest.fixture(scope="module")
def documents():
    """Real GPT-2 ids of 200 Moby-Dick paragraphs, each ending with EOT like nanoGPT's prepare."""
    return [doc.astype(np.uint16) for doc in gpt_documents(200)]


def write_llmc_file(path, tokens, magic=20240520, version=1, dtype="<u2", count=None):
    """llm.c's write_datafile layout: 256 int32 header (magic, version, count), then tokens."""
    header = np.zeros(256, dtype="<i4")
    header[:3] = (magic, version, len(tokens) if count is None else count)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype=dtype).tobytes())


def test_nanogpt_round_trip_keeps_documents_and_bytes(documents, tmp_path):
    train_bin = tmp_path / "train.bin"
    np.concatenate(documents).tofile(train_bin)
    manifest = import_nanogpt(
        str(train_bin),
        str(tmp_path / "set"),
        tokenizer_kind="byte-level-bpe",
        vocab_size=50257,
        shard_tokens=10_000,
    )
    shard_set = ShardSet(str(tmp_path / "set"))
    shard_set.verify()
    assert shard_set.num_documents == len(documents) and len(manifest.shards) > 1
    for i in (0, 1, 77, len(documents) - 1):
        assert np.array_equal(shard_set.document(i), documents[i])
    # shards close at the first document boundary past 10,000 tokens
    assert all(s.tokens >= 10_000 for s in manifest.shards[:-1])
    assert all(s.tokens - 10_000 < max(map(len, documents)) for s in manifest.shards[:-1])
    assert manifest.tokenizer.special_ids == {"eod": GPT2_EOD}
    assert manifest.source["format"] == "nanogpt"
    export_nanogpt(str(tmp_path / "set"), str(tmp_path / "again.bin"))
    assert (tmp_path / "again.bin").read_bytes() == train_bin.read_bytes()


def test_llmc_shards_cut_mid_document_come_back_whole(documents, tmp_path):
    # llm.c's fineweb.py layout: EOT *before* each document, files cut at a token count.
    stream = np.concatenate([np.concatenate([[GPT2_EOD], d[:-1]]) for d in documents])
    originals = tmp_path / "llmc"
    originals.mkdir()
    for i, start in enumerate(range(0, stream.size, 7_000)):
        write_llmc_file(originals / f"fineweb_train_{i:06d}.bin", stream[start : start + 7_000])
    import_llmc(str(originals / "fineweb_train_*.bin"), str(tmp_path / "set"))
    shard_set = ShardSet(str(tmp_path / "set"))
    assert shard_set.num_documents == len(documents)
    for i in (0, 3, 40, len(documents) - 1):
        document = shard_set.document(i)
        assert document[0] == GPT2_EOD and np.array_equal(document[1:], documents[i][:-1])
    written = export_llmc(str(tmp_path / "set"), str(tmp_path / "out"), shard_tokens=7_000)
    assert len(written) == len(list(originals.iterdir()))
    for ours, theirs in zip(written, sorted(originals.iterdir())):
        assert open(ours, "rb").read() == theirs.read_bytes()


def test_a_set_of_ours_comes_back_from_llmc_with_its_own_documents(tmp_path):
    """Our sets end each document with EOD (--append-eod), llm.c's start each with one: the
    round trip of 11 real Moby-Dick documents gives 11 documents, not 12 shifted by an EOD."""
    from tests.shard_fixtures import make_gpt_shards

    ours = ShardSet(make_gpt_shards(tmp_path, 11, num_shards=1))
    export_llmc(ours.directory, str(tmp_path / "llmc"), shard_tokens=1_000)
    manifest = import_llmc(str(tmp_path / "llmc"), str(tmp_path / "back"))
    back = ShardSet(str(tmp_path / "back"))
    assert back.num_documents == ours.num_documents == 11
    for i in range(11):
        assert np.array_equal(back.document(i), ours.document(i))
    assert manifest.source["eod_position"] == "end"
    export_nanogpt(ours.directory, str(tmp_path / "nanogpt.bin"))
    import_nanogpt(str(tmp_path / "nanogpt.bin"), str(tmp_path / "nano-back"))
    assert ShardSet(str(tmp_path / "nano-back")).num_documents == 11


def test_llama3_format_for_int32_sets(documents, tmp_path):
    directory = tmp_path / "wide"
    directory.mkdir()
    wide = [d.astype(np.int32) + 70_000 for d in documents[:20]]  # ids past uint16
    writer = IndexedDatasetWriter(str(directory / "shard-00000"), np.int32)
    for doc in wide:
        writer.add_document([doc])
    write_shard_set_manifest(str(directory), [writer.finalize()], dtype="int32",
                             sequence_unit="document")  # fmt: skip
    (path,) = export_llmc(str(directory), str(tmp_path / "out"))
    header = np.fromfile(path, dtype="<i4", count=256)
    assert header[:3].tolist() == [20240801, 7, sum(map(len, wide))]
    assert np.array_equal(read_llmc(path), np.concatenate(wide).astype(np.uint32))
    import_llmc(path, str(tmp_path / "back"), eod=GPT2_EOD + 70_000, eod_position="end")
    back = ShardSet(str(tmp_path / "back"))
    assert back.dtype == np.int32 and back.num_documents == len(wide)
    assert np.array_equal(back.document(5), wide[5])
    with pytest.raises(FormatError, match="do not fit uint16"):
        export_nanogpt(str(directory), str(tmp_path / "narrow.bin"))


@pytest.mark.parametrize("position", ["end", "start"])
def test_splitting_does_not_depend_on_chunk_boundaries(documents, position):
    stream = np.concatenate(documents[:30])
    if position == "start":
        stream = np.concatenate([[GPT2_EOD], stream[:-1]])
    expected = [lengths for _, lengths in split_documents_at_eod([stream], GPT2_EOD, position)]
    expected = np.concatenate(expected)
    assert expected.sum() == stream.size and (expected > 0).all()
    if position == "end":
        assert np.array_equal(expected, [len(d) for d in documents[:30]])
    for chunk in (1, 2, 7, 64, 1000):
        pieces = [stream[i : i + chunk] for i in range(0, stream.size, chunk)]
        batches = list(split_documents_at_eod(pieces, GPT2_EOD, position))
        assert np.array_equal(np.concatenate([b[1] for b in batches]), expected)
        assert np.array_equal(np.concatenate([b[0] for b in batches]), stream)


def test_stream_without_final_eod_keeps_its_last_document(documents):
    stream = np.concatenate(documents[:3])[:-5]  # cut inside the third document
    lengths = np.concatenate([b[1] for b in split_documents_at_eod([stream], GPT2_EOD, "end")])
    assert lengths.tolist() == [len(documents[0]), len(documents[1]), len(documents[2]) - 5]


@pytest.mark.parametrize(
    "header, tokens, message",
    [
        ({"magic": 20240521}, 10, "bad magic 20240521"),
        ({"version": 2}, 10, "version 2, expected 1"),
        ({"count": 11}, 10, "need 1046"),
        ({"count": 0}, 0, "claims 0 tokens"),
        ({"magic": 20240801, "version": 1}, 10, "version 1, expected 7"),
    ],
)
def test_bad_llmc_headers_are_named(documents, tmp_path, header, tokens, message):
    path = tmp_path / "bad.bin"
    write_llmc_file(path, documents[0][:tokens], **header)
    with pytest.raises(FormatError, match=message) as raised:
        read_llmc(str(path))
    assert str(path) in str(raised.value)


def test_short_and_odd_files_are_refused(tmp_path):
    short = tmp_path / "short.bin"
    short.write_bytes(b"\x00" * 100)
    with pytest.raises(FormatError, match="shorter than the 1024-byte"):
        read_llmc(str(short))
    odd = tmp_path / "odd.bin"
    odd.write_bytes(b"\x01\x02\x03")
    with pytest.raises(FormatError, match="whole number of uint16"):
        import_nanogpt(str(odd), str(tmp_path / "set"))


def test_vocabulary_is_checked_and_sets_are_not_overwritten(documents, tmp_path):
    train_bin = tmp_path / "train.bin"
    np.concatenate(documents[:5]).tofile(train_bin)
    with pytest.raises(FormatError, match="outside the vocabulary of 1000"):
        import_nanogpt(
            str(train_bin), str(tmp_path / "s"), eod=999, tokenizer_kind="x", vocab_size=1000
        )
    with pytest.raises(ValueError, match="EOD id 50256 is outside the vocabulary of 1000"):
        import_nanogpt(str(train_bin), str(tmp_path / "s"), tokenizer_kind="x", vocab_size=1000)
    import_nanogpt(str(train_bin), str(tmp_path / "ok"))
    with pytest.raises(FormatError, match="already holds a shard set"):
        import_nanogpt(str(train_bin), str(tmp_path / "ok"))


def test_cli_round_trip_and_clear_errors(documents, tmp_path):
    train_bin = tmp_path / "train.bin"
    np.concatenate(documents[:50]).tofile(train_bin)
    run = subprocess.run(
        CONVERT + ["import-nanogpt", str(train_bin), str(tmp_path / "set"), "--eod", "50256"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert "50 documents" in run.stdout
    run = subprocess.run(
        CONVERT + ["export-llmc", str(tmp_path / "set"), str(tmp_path / "llmc")],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    exported = read_llmc(str(tmp_path / "llmc" / "data_000000.bin"))
    assert np.array_equal(exported, np.fromfile(train_bin, dtype="<u2"))
    bad = tmp_path / "bad.bin"
    write_llmc_file(bad, documents[0], magic=1234)
    run = subprocess.run(
        CONVERT + ["import-llmc", str(bad), str(tmp_path / "x")], capture_output=True, text=True
    )
    assert run.returncode == 1
    assert str(bad) in run.stderr and "bad magic 1234" in run.stderr
    assert "Traceback" not in run.stderr


# -- training on bare Megatron pairs (what Megatron's preprocess_data.py writes: no manifest) ----

TRAIN_FLAGS = [
    "--seq-len", "16", "--global-batch", "2", "--micro-batch", "1", "--split", "90,5,5",
    "--eval-iters", "0", "--no-progress", "--max-steps", "2", "--warmup-steps", "1",
    "--device", "cpu",
]  # fmt: skip
PRETRAIN = [sys.executable, str(REPO / "train" / "pretrain.py")]


def write_megatron_pair(prefix, documents) -> str:
    """A bare MMIDIDX pair, one sequence per document, as preprocess_data.py --append-eod
    writes it (GPT-2 ids of Moby-Dick paragraphs, EOD at each end); no manifest beside it."""
    with IndexedDatasetWriter(str(prefix), np.uint16) as writer:
        for document in documents:
            writer.add_document([document])
    return str(prefix)


@pytest.fixture(scope="module")
def megatron_pair(documents, tmp_path_factory):
    return write_megatron_pair(tmp_path_factory.mktemp("megatron") / "text_document", documents)


@pytest.mark.slow
def test_bare_megatron_pair_trains_with_a_tokenizer_flag(megatron_pair, tmp_path):
    from train.config import parse_args
    from train.loop import main

    def train(*flags):
        return main(parse_args(["--data", megatron_pair, *TRAIN_FLAGS, *flags]))

    with pytest.raises(SystemExit, match="pass --tokenizer FILE or --vocab-size N"):
        train("--out", str(tmp_path / "none"))
    vocab = GPT2_VOCAB / "vocab.json"
    result = train("--tokenizer", str(vocab), "--out", str(tmp_path / "tokenizer"))
    assert result["step"] == 2 and np.isfinite(result["loss"])
    # Near log(50257) = 10.8 for an untrained model: the ids index a 50,257-row vocabulary.
    assert 9.0 < result["loss"] < 12.0
    result = train("--vocab-size", "50257", "--out", str(tmp_path / "size"))
    assert result["step"] == 2 and np.isfinite(result["loss"])


def pretrain(*args):
    return subprocess.run(PRETRAIN + [str(a) for a in args], capture_output=True, text=True)


def assert_one_line_error(run, *fragments):
    assert run.returncode == 1, run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, run.stderr
    for fragment in fragments:
        assert fragment in errors[0], errors[0]


@pytest.mark.slow
def test_trainer_refuses_bad_foreign_data_in_one_line(documents, tmp_path):
    # Ids past the vocabulary: GPT-2 ids read against a declared 1,000-id vocabulary.
    pair = write_megatron_pair(tmp_path / "ids" / "text_document", documents)
    run = pretrain("--data", pair, "--vocab-size", "1000", "--out", tmp_path / "o1", *TRAIN_FLAGS)
    assert_one_line_error(run, f"{pair}.bin: token id", "outside the vocabulary of 1000")
    # A document index that goes backwards (documents 4 and 5 overlap).
    pair = write_megatron_pair(tmp_path / "index" / "text_document", documents)
    raw = bytearray(open(pair + ".idx", "rb").read())
    at = 34 + 12 * len(documents) + 8 * 5
    raw[at : at + 8] = np.array([2], dtype="<i8").tobytes()
    open(pair + ".idx", "wb").write(bytes(raw))
    run = pretrain("--data", pair, "--vocab-size", "50257", "--out", tmp_path / "o2", *TRAIN_FLAGS)
    assert_one_line_error(run, f"{pair}.idx: document index decreases at document 4")
    # Documents without EOD (preprocess_data.py without --append-eod) run together: refused.
    pair = write_megatron_pair(tmp_path / "noeod" / "text_document", [d[:-1] for d in documents])
    run = pretrain("--data", pair, "--tokenizer", GPT2_VOCAB / "vocab.json", "--out",
                   tmp_path / "o3", *TRAIN_FLAGS)  # fmt: skip
    assert_one_line_error(run, pair, "not the end-of-document id 50256")


def test_tokenizer_and_vocab_size_are_one_or_the_other():
    from train.config import parse_args

    with pytest.raises(SystemExit, match="--tokenizer or --vocab-size, not both"):
        parse_args(["--data", "x", "--tokenizer", "t.json", "--vocab-size", "5"])
    with pytest.raises(SystemExit, match="--vocab-size must be positive"):
        parse_args(["--data", "x", "--vocab-size", "0"])


def test_outputs_follow_the_output_folder_rule(documents, tmp_path):
    """import-* and export-llmc write only a new or empty folder, or one of their own: a folder
    of a user's files is refused in one line and left as it was; a failed import is retried."""
    train_bin = tmp_path / "train.bin"
    np.concatenate(documents[:20]).tofile(train_bin)
    users = tmp_path / "users"
    users.mkdir()
    (users / "shard-00000.bin").write_bytes(b"the user's own")
    for command in (["import-nanogpt", str(train_bin)], ["export-llmc", str(tmp_path / "set")]):
        if command[0] == "export-llmc":
            import_nanogpt(str(train_bin), str(tmp_path / "set"))
        run = subprocess.run(CONVERT + [*command, str(users)], capture_output=True, text=True)
        assert run.returncode == 1 and run.stderr.count("\n") == 1, run.stderr
        assert "not empty and was not written by this tool" in run.stderr
        assert os.listdir(users) == ["shard-00000.bin"]
        assert (users / "shard-00000.bin").read_bytes() == b"the user's own"
    with pytest.raises(FormatError, match="outside the vocabulary of 1000"):
        import_nanogpt(
            str(train_bin), str(tmp_path / "retry"), tokenizer_kind="x", vocab_size=1000, eod=999
        )
    assert import_nanogpt(str(train_bin), str(tmp_path / "retry")).documents == 20


def test_megatron_args_name_every_shard_and_the_tokenizer_files(tmp_path):
    """The Megatron-LM flags of a real two-shard GPT-2 set: each prefix weighted by its tokens
    (a blend Megatron reads as one set; our trainer's --data parser takes the same line), the
    split, and GPT-2's BPE files; a BERT uncased set names its own vocab.txt."""
    import shlex

    from tests.shard_fixtures import make_bert_shards, make_gpt_shards
    from train.data import parse_data_spec

    gpt = ShardSet(make_gpt_shards(tmp_path, 30, num_shards=2))
    done = subprocess.run(
        [*CONVERT[:1], str(REPO / "tools" / "dump"), gpt.directory, "--megatron-args",
         str(GPT2_VOCAB)], capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    args = shlex.split(done.stdout)
    data = args[1 : args.index("--split")]
    assert data == [x for s in gpt.shards for x in (str(s.num_tokens), s.prefix)]
    assert all(os.path.exists(prefix + ".bin") and os.path.exists(prefix + ".idx")
               for prefix in data[1::2])  # fmt: skip
    weights = [w for w, _ in parse_data_spec(data)]
    assert weights == pytest.approx([s.num_tokens / gpt.num_tokens for s in gpt.shards])
    assert args[args.index("--split") + 1] == "969,30,1"
    tokenizer = args[args.index("--tokenizer-type") :]
    assert tokenizer == ["--tokenizer-type", "GPT2BPETokenizer",
                         "--vocab-file", str(GPT2_VOCAB / "vocab.json"),
                         "--merge-file", str(GPT2_VOCAB / "merges.txt")]  # fmt: skip
    bert = ShardSet(make_bert_shards(tmp_path, 20, num_shards=1))
    bert_args = megatron_args(bert.directory)
    assert bert_args[bert_args.index("--tokenizer-type") :] == [
        "--tokenizer-type", "BertWordPieceLowerCase", "--vocab-file", bert.tokenizer_path,
    ]  # fmt: skip
