"""tools/dump --megatron-args names only tokenizer files that exist: without a folder holding
the files Megatron-LM reads (the set keeps tokenizer.json only) it says what to pass, in one
line and exit 1, where it printed made-up paths (gpt2/vocab.json) as if they were real."""

from __future__ import annotations

import pytest

from tests.conftest import GPT2_VOCAB


@pytest.fixture(scope="module")
def gpt_set(tmp_path_factory) -> str:
    from tests.shard_fixtures import make_gpt_shards

    return make_gpt_shards(tmp_path_factory.mktemp("megatron-args"), 20)


def test_a_folder_without_the_files_is_refused_and_one_with_them_is_named(gpt_set, tmp_path):
    from dataset_format import FormatError
    from dataset_format.interop import megatron_args

    with pytest.raises(FormatError, match=r"no vocab.json or merges.txt there"):
        megatron_args(gpt_set, str(tmp_path))
    args = megatron_args(gpt_set, str(GPT2_VOCAB))
    assert args[args.index("--vocab-file") + 1] == str(GPT2_VOCAB / "vocab.json")
    assert args[args.index("--merge-file") + 1] == str(GPT2_VOCAB / "merges.txt")
