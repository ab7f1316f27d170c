"""The README's main command: demo/run.sh on the corpus shipped in demo/corpus, end to end
(slow: it trains a tokenizer, preprocesses two shard sets, trains, evaluates and generates)."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow


def test_demo_runs_the_whole_path(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path / "demo")}
    done = subprocess.run(
        ["bash", "demo/run.sh"], cwd=REPO, env=env, capture_output=True, text=True, timeout=1800
    )
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    out = tmp_path / "demo"
    assert (out / "loss.png").stat().st_size > 0
    result = json.loads((out / "wikitext.json").read_text())
    assert result["task"] == "wikitext103" and result["scored_tokens"] > 1000
    # the tiny model trained 60 steps on other text: far better than uniform over 8,192 ids
    assert 1.0 < result["ppl"] < 8192
    sample = done.stdout.split("== 7/7")[1].split("\n", 1)[1].split("\ndone: ")[0]
    assert sample.startswith("The whale") and len(sample) > len("The whale") + 20
    # A user sees our progress and our numbers only (issue 19): no library's warning or
    # notice, which --verbose would show.
    noise = [
        line for line in (done.stdout + done.stderr).splitlines() if LIBRARY_NOISE.search(line)
    ]
    assert noise == []


# Python's warnings ("file.py:12: UserWarning: ..."), a logging WARNING or INFO line from any
# logger but ours, and what Beam and torch print on import or on a one-process save.
LIBRARY_NOISE = re.compile(
    r"\w+Warning: |^(WARNING|INFO|ERROR)[ :](?!pipelines\b)|apitools|bigquery|apache_beam"
    r"|torch\.distributed is disabled"
)
