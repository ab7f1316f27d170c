"""A worker's memory per document is a stated bound: `max_document_bytes` x the measured bytes
per document byte, and the default cap keeps two workers well inside a 24 GB machine.

The document is a real book (tinyshakespeare from ../shared/corpora) repeated to 8 MB and
compressed with xz, measured by bench/bench_worker_memory.py in a fresh process: read, clean,
MinHash signatures, tokenize (GPT-2), spill.
"""

from __future__ import annotations

from pipelines.sources.sizes import DEFAULT_MAX_DOCUMENT_BYTES, WORKER_BYTES_PER_DOCUMENT_BYTE

# What a worker holds whatever its documents: interpreter, Beam, tokenizer, MinHash tables
# (RSS before the document ~0.2 GB, first-use buffers ~0.1 GB; bench/results/worker_memory.md).
WORKER_BASE_BYTES = 512 << 20


def test_two_workers_at_the_default_cap_fit_in_24_gb_with_room():
    per_worker = DEFAULT_MAX_DOCUMENT_BYTES * WORKER_BYTES_PER_DOCUMENT_BYTE + WORKER_BASE_BYTES
    assert 2 * per_worker <= 16e9  # a third of the machine left for the OS and the launcher
