"""No production files import each other in a loop, directly or through others.

Every import counts, at module level and inside functions (a function-level import is still a
dependency, only a later one): the imports of every .py file under common/, dataset_format/,
pipelines/ and train/ are read with ``ast`` (nothing is imported), and the files that reach
each other are reported with one loop through them.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

PRODUCTION = ("common", "dataset_format", "pipelines", "train")


def module_name(path: Path, root: Path) -> str:
    name = ".".join(path.relative_to(root).with_suffix("").parts)
    return name.removesuffix(".__init__")


def imported_modules(path: Path, root: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that the file ``path`` imports anywhere in it. ``from pkg
    import mod`` imports ``mod`` (the package's own file only for names it defines); a name
    inside a module (``from pkg.mod import f``) counts as ``pkg.mod``."""
    me = module_name(path, root)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, up level - 1 packages
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            names = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                for alias in node.names
            ]
        else:
            continue
        for name in names:
            while name and name not in known:  # a name inside a module: the module
                name = name.rpartition(".")[0]
            if name and name != me:
                found.add(name)
    return found


def import_graph(root: Path, folders: tuple[str, ...]) -> dict[str, set[str]]:
    paths = [p for folder in folders for p in sorted((root / folder).rglob("*.py"))]
    known = {module_name(p, root) for p in paths}
    return {module_name(p, root): imported_modules(p, root, known) for p in paths}


def import_loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """One loop (a -> b -> ... -> a) through each group of modules that reach each other."""
    loops, done = [], set()
    for start in sorted(graph):
        if start in done:
            continue
        # the modules start reaches, each with the path it is reached by
        paths, todo = {start: [start]}, [start]
        while todo:
            module = todo.pop()
            for other in sorted(graph[module]):
                if other == start:
                    loops.append(paths[module] + [start])
                    done.update(paths[module])
                    todo = []
                    break
                if other not in paths:
                    paths[other] = paths[module] + [other]
                    todo.append(other)
        done.add(start)
    return loops


def test_no_production_files_import_each_other_in_a_loop() -> None:
    loops = import_loops(import_graph(REPO, PRODUCTION))
    assert not loops, "import loops: " + "; ".join(" -> ".join(loop) for loop in loops)


def test_a_loop_through_a_function_level_import_is_found(tmp_path: Path) -> None:
    """The check sees what the production check relies on: imports inside functions, relative
    ones, and ``from pkg import mod``."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text("from ..c import helper\n")
    (pkg / "c.py").write_text("def helper():\n    from pkg import a\n    return a\n")
    (pkg / "d.py").write_text("import pkg.a\n")  # reaches the loop, is not in it
    graph = import_graph(tmp_path, ("pkg",))
    assert graph["pkg.sub.b"] == {"pkg.c"}
    assert import_loops(graph) == [["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"]]
    (pkg / "c.py").write_text("def helper():\n    return None\n")
    assert import_loops(import_graph(tmp_path, ("pkg",))) == []
