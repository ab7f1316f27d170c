"""pipelines/sources/ is grouped by family (wikipedia/, books/, web/, files/); the shared readers
at its top import no family and a family imports no other family (docs/architecture.md)."""

from __future__ import annotations

import ast

from tests.conftest import REPO

SOURCES = REPO / "pipelines" / "sources"
PREFIX = "pipelines.sources."


def _imported_families(path) -> set[str]:
    """The families (first name after pipelines.sources.) whose modules `path` imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        found.update(name[len(PREFIX):].split(".")[0] for name in names if name.startswith(PREFIX))
    return found


def test_families_and_shared_readers_import_one_way():
    families = {p.name for p in SOURCES.iterdir() if (p / "__init__.py").is_file()}
    assert families == {"wikipedia", "books", "web", "files"}
    arrows = []
    for path in sorted(SOURCES.glob("*.py")):
        arrows += [f"{path.name} -> {f}/" for f in _imported_families(path) & families]
    for family in sorted(families):
        for path in sorted((SOURCES / family).glob("*.py")):
            others = _imported_families(path) & (families - {family})
            arrows += [f"{family}/{path.name} -> {f}/" for f in others]
    assert arrows == []
