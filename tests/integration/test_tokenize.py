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
