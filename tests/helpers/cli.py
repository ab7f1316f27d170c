"""What the unit and the integration tests of cli share."""

from __future__ import annotations

from tests.conftest import REPO

CORPORA = REPO.parent / "shared" / "corpora"
GPT2 = str(CORPORA / "vocab" / "gpt2")


def two_lines(err: str, prog: str, error: str) -> None:
    assert err.splitlines() == [f"{prog}: error: {error}", f"run '{prog} --help' for usage"]
