"""A worker's memory per document is a stated bound: `max_document_bytes` x the measured bytes
per document byte, and the default cap keeps two workers well inside a 24 GB machine.

The document is a real book (tinyshakespeare from ../shared/corpora) repeated to 8 MB and
compressed with xz, measured by bench/bench_worker_memory.py in a fresh process: read, clean,
MinHash signatures, tokenize (GPT-2), spill.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pipelines.sources.sizes import DEFAULT_MAX_DOCUMENT_BYTES, WORKER_BYTES_PER_DOCUMENT_BYTE
from tests.conftest import REPO

# What a worker holds whatever its documents: interpreter, Beam, tokenizer, MinHash tables
# (RSS before the document ~0.2 GB, first-use buffers ~0.1 GB; bench/results/worker_memory.md).
WORKER_BASE_BYTES = 512 << 20


def test_two_workers_at_the_default_cap_fit_in_24_gb_with_room():
    per_worker = DEFAULT_MAX_DOCUMENT_BYTES * WORKER_BYTES_PER_DOCUMENT_BYTE + WORKER_BASE_BYTES
    assert 2 * per_worker <= 16e9  # a third of the machine left for the OS and the launcher


@pytest.mark.slow
def test_peak_memory_per_document_byte_is_within_the_stated_factor(tmp_path):
    size = 8_000_000
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "bench_worker_memory.py"), "--child", str(size),
         "--workdir", str(tmp_path)],
        capture_output=True, text=True, timeout=600, cwd=REPO,
        env={**os.environ, "RAYON_NUM_THREADS": "1"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    measured = json.loads(result.stdout.strip().splitlines()[-1])
    assert measured["document_bytes"] == size and measured["tokens"] > size // 5
    grown = measured["peak_rss"] - measured["base_rss"]
    assert grown <= WORKER_BYTES_PER_DOCUMENT_BYTE * size + (128 << 20), measured
