from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from dataset_format.tokenizer import (
    TextTokenizer,
    load_tokenizer,
)
from tests.conftest import CORPORA, REPO
from tests.conftest import GPT2_VOCAB as GPT2

BOOKS = CORPORA / "books"


@pytest.fixture(scope="module")
def gpt2() -> TextTokenizer:
    return load_tokenizer(str(GPT2))


def test_identity_is_the_same_in_another_process(gpt2):
    code = (
        "import json, sys; from dataset_format.tokenizer import load_tokenizer; "
        "print(json.dumps(load_tokenizer(sys.argv[1]).identity()))"
    )
    env = {**os.environ, "RAYON_NUM_THREADS": "1", "PYTHONHASHSEED": "123"}
    out = subprocess.run(
        [sys.executable, "-c", code, str(GPT2)], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == gpt2.identity()


def test_preprocess_refuses_dev_zero_as_its_tokenizer_in_one_line(tmp_path, capsys):
    from pipelines.preprocess import main

    code = main(["--source=books", f"--input={BOOKS}/pg1080.txt", f"--output={tmp_path}/o",
                 "--tokenizer=/dev/zero", "--direct_running_mode=in_memory"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and err.strip().splitlines() == [
        "preprocess: error: tokenizer file /dev/zero is a character device, not a regular file"
    ]
