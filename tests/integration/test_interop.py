"""The tests of tests/unit/dataset_format/test_interop.py that start a process or run a Beam pipeline (that file
holds the in-process ones and says what they cover)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from dataset_format import FormatError, IndexedDatasetWriter, ShardSet
from dataset_format.interop import (
    import_nanogpt,
    megatron_args,
    read_llmc,
)
from tests.conftest import GPT2_VOCAB, REPO
from tests.helpers.interop import write_llmc_file
from tests.shard_fixtures import gpt_documents

CONVERT = [sys.executable, str(REPO / "tools" / "convert")]


@pytest.fixture(scope="module")
def documents():
    """Real GPT-2 ids of 200 Moby-Dick paragraphs, each ending with EOT like nanoGPT's prepare."""
    return [doc.astype(np.uint16) for doc in gpt_documents(200)]


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
