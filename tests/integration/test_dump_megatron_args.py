"""The tests of tests/unit/tools/test_dump_megatron_args.py that start a process or run a Beam pipeline (that file
holds the in-process ones and says what they cover)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO


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
