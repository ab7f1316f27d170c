"""The tests of tests/unit/pipelines/dedup/test_dedup_minhash.py that start a process or run a Beam pipeline (that file
holds the in-process ones and says what they cover)."""

from __future__ import annotations

import subprocess
import sys

from pipelines.dedup import shingles
from pipelines.dedup.minhash import MinHasher
from tests.conftest import REPO
from tests.helpers.dedup_minhash import BOOKS, book


def test_signatures_are_identical_in_another_process():
    code = (
        "import sys; sys.path.insert(0, {!r})\n"
        "from pipelines.dedup import shingles, minhash\n"
        "text = open({!r}, encoding='utf-8-sig').read()[:20000]\n"
        "sig = minhash.MinHasher(112, 1).signatures(shingles.shingle_batch([text]))\n"
        "print(sig[0].tobytes().hex())\n"
    ).format(str(REPO), str(BOOKS / "1952-0.txt"))
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    text = book("1952-0.txt")[:20000]
    mine = MinHasher(112, 1).signatures(shingles.shingle_batch([text]))[0].tobytes().hex()
    assert other.stdout.strip() == mine
    # Pinned: a change here changes which documents every existing run called duplicates.
    assert mine[:32] == PINNED_SIGNATURE_PREFIX


PINNED_SIGNATURE_PREFIX = "a1e80500d88e0d00098d0f0090f50000"
