"""What the unit and the integration tests of pipeline_dataflow share."""

from __future__ import annotations

from tests.conftest import REPO

CORPORA = REPO.parent / "shared" / "corpora"
GPT2 = str(CORPORA / "vocab" / "gpt2")


def dataflow_argv(**overrides: str | None) -> list[str]:
    flags = {
        "runner": "DataflowRunner",
        "project": "my-project",
        "region": "us-central1",
        "temp_location": "gs://my-bucket/tmp",
        "setup_file": str(REPO / "pyproject.toml"),
        "source": "books",
        "input": str(CORPORA / "books" / "pg1080.txt"),
        "output": "gs://my-bucket/shards/books",
        "tokenizer": GPT2,
        "num-buckets": "4",
        **overrides,
    }
    return [f"--{k}={v}" for k, v in flags.items() if v is not None] + ["--append-eod"]
