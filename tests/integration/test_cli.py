"""The tests of tests/unit/test_cli.py that start a process or run a Beam pipeline (that file
holds the in-process ones and says what they cover)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.helpers.cli import GPT2, two_lines


@pytest.mark.parametrize(
    ("tool", "argv", "error"),
    [
        ("dump", [GPT2, "--doc", "first"], "argument --doc: invalid int value: 'first'"),
        ("convert", ["bin2shards"], "argument command: invalid choice: 'bin2shards' (choose "
         "from 'import-nanogpt', 'import-llmc', 'export-nanogpt', 'export-llmc', "
         "'checkpoint-to-torch', 'checkpoint-to-hf')"),
        ("generate", ["ckpt"], "the following arguments are required: --prompt"),
    ],
)  # fmt: skip
def test_the_tools_print_two_lines_too(tool, argv, error):
    done = subprocess.run([sys.executable, str(REPO / "tools" / tool), *argv], cwd=REPO,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2 and done.stdout == ""
    two_lines(done.stderr, f"tools/{tool}", error)


@pytest.mark.parametrize(
    ("module", "argv", "error"),
    [
        ("pipelines.tokenize.train_tokenizer", ["--kind", "bpe"],
         "argument --kind: invalid choice: 'bpe'"),
        ("pipelines.dedup", ["--dedup-threshold", "high"],
         "argument --dedup-threshold: invalid float value: 'high'"),
    ],
    ids=["train_tokenizer", "dedup"],
)  # fmt: skip
def test_a_pipeline_command_in_a_fresh_process_prints_no_beam_import_warning(module, argv, error):
    """Beam logs "apitools not found" through the root logger while it is imported; in a fresh
    interpreter that line came before every train_tokenizer and dedup command's own output
    (the demo's first step printed it)."""
    done = subprocess.run([sys.executable, "-m", module, *argv], cwd=REPO, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2 and done.stdout == ""
    assert "apitools" not in done.stderr
    assert done.stderr.splitlines()[0].startswith(f"python -m {module}: error: {error}")
