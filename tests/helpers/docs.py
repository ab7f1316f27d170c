"""What the unit and the integration tests of docs share."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
import shlex
from pathlib import Path

from tests.conftest import REPO

GUIDES = ("pipelines/sources/README.md", "pipelines/dedup/README.md", "train/models/README.md",
          "bench/README.md")


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")),
            *(REPO / g for g in GUIDES)]


# -- runnable commands -------------------------------------------------------------------------


def runnable_lines(text: str) -> list[list[str]]:
    """The commands of every ```bash runnable block, a backslash-continued line as one, each
    split as the shell splits it, comments dropped."""
    commands = []
    for block in re.findall(r"^```bash runnable\n(.*?)^```", text, re.S | re.M):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words:
                commands.append(words)
    return commands


def load_docs_tool():
    """tools/docs (a script without .py) as a module."""
    loader = importlib.machinery.SourceFileLoader("_tool_docs", str(REPO / "tools" / "docs"))
    spec = importlib.util.spec_from_loader("_tool_docs", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module
