"""tools/dump --megatron-args names only tokenizer files that exist: without a folder holding
the files Megatron-LM reads (the set keeps tokenizer.json only) it says what to pass, in one
line and exit 1, where it printed made-up paths (gpt2/vocab.json) as if they were real."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import GPT2_VOCAB, REPO


@pytest.fixture(scope="module")
def gpt_set(tmp_path_factory) -> str:
    from tests.shard_fixtures import make_gpt_shards

    return make_gpt_shards(tmp_path_factory.mktemp("megatron-args"), 20)


def test_without_a_tokenizer_folder_it_says_what_to_pass(gpt_set):
    done = subprocess.run([sys.executable, str(REPO / "tools" / "dump"), gpt_set,
                           "--megatron-args"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == (
        f"tools/dump: {gpt_set}: Megatron-LM reads this tokenizer from vocab.json and "
        "merges.txt, which the set does not hold: pass the folder holding them, "
        "--megatron-args TOKENIZER_DIR\n"
    )


def test_a_folder_without_the_files_is_refused_and_one_with_them_is_named(gpt_set, tmp_path):
    from dataset_format import FormatError
    from dataset_format.interop import megatron_args

    with pytest.raises(FormatError, match=r"no vocab.json or merges.txt there"):
        megatron_args(gpt_set, str(tmp_path))
    args = megatron_args(gpt_set, str(GPT2_VOCAB))
    assert args[args.index("--vocab-file") + 1] == str(GPT2_VOCAB / "vocab.json")
    assert args[args.index("--merge-file") + 1] == str(GPT2_VOCAB / "merges.txt")
