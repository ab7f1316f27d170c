"""The contenders bench_preprocess.py measures our pipeline against, each run the way its own
project runs it: a naive per-document loop (ftfy + HF encode), Megatron-LM's
tools/preprocess_data.py pattern (a multiprocessing.Pool of encoders, the main process writing),
and datatrove's JsonlReader + DocumentTokenizer from a throwaway venv. Each takes the corpus
folder, an output folder, a worker count and a time budget, and returns the bytes, documents and
tokens it got through; bench_preprocess.py does the timing.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GPT2 = REPO.parent / "shared" / "corpora" / "vocab" / "gpt2"


def corpus_files(corpus: Path) -> list[Path]:
    return sorted(corpus.glob("*.jsonl"))


def _hf_gpt2():
    from tokenizers import Tokenizer

    from dataset_format.tokenizer import load_tokenizer

    return Tokenizer.from_str(load_tokenizer(str(GPT2)).to_json())


def run_naive(corpus: Path, out: Path, workers: int, budget_s: float) -> dict:
    import ftfy
    import numpy as np

    from dataset_format import IndexedDatasetWriter

    tokenizer = _hf_gpt2()
    eod = tokenizer.token_to_id("<|endoftext|>")
    out.mkdir(parents=True, exist_ok=True)
    writer = IndexedDatasetWriter(str(out / "naive"), np.uint16)
    read_bytes = documents = tokens = 0
    deadline = time.monotonic() + budget_s
    complete = True
    for path in corpus_files(corpus):
        with open(path, encoding="utf-8") as f:
            for line in f:
                text = json.loads(line)["text"]
                read_bytes += len(text.encode("utf-8"))
                ids = tokenizer.encode(ftfy.fix_text(text), add_special_tokens=False).ids
                writer.add_document([np.array(ids + [eod], dtype=np.uint16)])
                documents += 1
                tokens += len(ids) + 1
                if time.monotonic() > deadline:
                    complete = False
                    break
        if not complete:
            break
    writer.finalize()
    return {"bytes": read_bytes, "documents": documents, "tokens": tokens, "complete": complete}


class MegatronEncoder:
    """Megatron-LM tools/preprocess_data.py's Encoder: a tokenizer per worker process."""

    def initializer(self) -> None:
        MegatronEncoder.tokenizer = _hf_gpt2()
        MegatronEncoder.eod = MegatronEncoder.tokenizer.token_to_id("<|endoftext|>")

    def encode(self, line: str):
        text = json.loads(line)["text"]
        ids = MegatronEncoder.tokenizer.encode(text, add_special_tokens=False).ids
        return ids + [MegatronEncoder.eod], len(text.encode("utf-8"))


def run_megatron(corpus: Path, out: Path, workers: int, budget_s: float) -> dict:
    import multiprocessing

    import numpy as np

    from dataset_format import IndexedDatasetWriter

    encoder = MegatronEncoder()
    out.mkdir(parents=True, exist_ok=True)
    writer = IndexedDatasetWriter(str(out / "megatron"), np.uint16)
    read_bytes = documents = tokens = 0
    deadline = time.monotonic() + budget_s
    stopped = []

    def lines():
        # The budget stops the input, not the pool: Pool.terminate() while imap's feeder
        # thread was writing to a worker hung (a 58 MB run at load 10); the documents in
        # flight are finished and counted.
        for path in corpus_files(corpus):
            with open(path, encoding="utf-8") as f:
                for line in f:
                    if time.monotonic() > deadline:
                        stopped.append(True)
                        return
                    yield line

    with multiprocessing.Pool(workers, initializer=encoder.initializer) as pool:
        for ids, size in pool.imap(encoder.encode, lines(), 32):
            writer.add_document([np.array(ids, dtype=np.uint16)])
            read_bytes += size
            documents += 1
            tokens += len(ids)
    writer.finalize()
    complete = not stopped
    return {"bytes": read_bytes, "documents": documents, "tokens": tokens, "complete": complete}


_DATATROVE_RUN = """
import sys
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.tokens import DocumentTokenizer

corpus, out, tokenizer, workers = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
LocalPipelineExecutor(
    pipeline=[
        JsonlReader(corpus, glob_pattern="*.jsonl"),
        DocumentTokenizer(out, tokenizer_name_or_path=tokenizer, eos_token="<|endoftext|>",
                          shuffle_documents=False),
    ],
    tasks=workers, workers=workers, logging_dir=out + "-logs",
).run()
"""


def run_datatrove(corpus: Path, out: Path, workers: int, budget_s: float) -> dict:
    """datatrove's tokenizer (JsonlReader + DocumentTokenizer, `workers` tasks on as many
    processes, GPT-2 from the same vocabulary, EOS appended, no cleaning) in the Python given by
    --datatrove-python: a throwaway venv, never one of ours."""
    from dataset_format.tokenizer import load_tokenizer

    out.mkdir(parents=True, exist_ok=True)
    tokenizer = out / "gpt2-tokenizer.json"
    tokenizer.write_text(load_tokenizer(str(GPT2)).to_json(), encoding="utf-8")
    subprocess.run(
        [
            DATATROVE_PYTHON[0],
            "-c",
            _DATATROVE_RUN,
            str(corpus),
            str(out / "tokens"),
            str(tokenizer),
            str(workers),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    text_bytes = documents = 0
    for path in corpus_files(corpus):
        with open(path, encoding="utf-8") as f:
            for line in f:
                text_bytes += len(json.loads(line)["text"].encode("utf-8"))
                documents += 1
    # uint16 ids in the .ds files it wrote
    tokens = sum(p.stat().st_size for p in (out / "tokens").rglob("*.ds")) // 2
    return {"bytes": text_bytes, "documents": documents, "tokens": tokens, "complete": True}


# Set from --datatrove-python: the interpreter of a venv with datatrove installed.
DATATROVE_PYTHON: list[str] = []
