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


# -- floors: the units of pipelines/ and train/ ---------------------------------------------------
# Each sub-folder of these packages is one unit (a stage, the runner, train's models), and so is
# each of their top-level files (pipelines/stage.py, train/loop.py); another package is one unit.
FLOORED = ("pipelines", "train")
# The most units one chain of imports inside pipelines/ passes: the commands on top, graph and
# options, the stages side by side, then the services every stage stands on.
MAX_PIPELINES_CHAIN = 8


def unit_of(module: str, floored: tuple[str, ...] = FLOORED) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] in floored else parts[0]


def unit_graph(graph: dict[str, set[str]], floored: tuple[str, ...] = FLOORED):
    """Unit -> the other units its modules import."""
    units: dict[str, set[str]] = {}
    for module, imported in graph.items():
        mine = units.setdefault(unit_of(module, floored), set())
        mine.update(unit_of(other, floored) for other in imported)
    for unit, imported in units.items():
        imported.discard(unit)
    return units


def _paths_from(units: dict[str, set[str]], start: str) -> dict[str, list[str]]:
    """Each unit `start` reaches, with one chain of imports that gets there."""
    paths, todo = {start: [start]}, [start]
    while todo:
        unit = todo.pop()
        for other in sorted(units.get(unit, ())):
            if other not in paths:
                paths[other] = paths[unit] + [other]
                todo.append(other)
    return paths


def units_reaching_each_other(units: dict[str, set[str]]) -> list[list[str]]:
    """For each two units that reach each other, the loop through them (a -> ... -> b -> ...
    -> a): an import that runs back up."""
    reach = {unit: _paths_from(units, unit) for unit in units}
    return [
        reach[a][b] + reach[b][a][1:]
        for a in sorted(units)
        for b in sorted(units)
        if a < b and b in reach[a] and a in reach.get(b, {})
    ]


def longest_chain(units: dict[str, set[str]], prefix: str) -> list[str]:
    """The longest chain of imports among the units named `prefix`..., one unit after another
    (a loop is not followed round)."""
    inside = {unit for unit in units if unit.startswith(prefix)}
    best: dict[str, list[str]] = {}

    def chain(unit: str, above: frozenset) -> list[str]:
        if unit in best:
            return best[unit]
        longest = [unit]
        for other in sorted(units.get(unit, ()) & inside - above):
            below = chain(other, above | {unit})
            if 1 + len(below) > len(longest):
                longest = [unit] + below
        best[unit] = longest
        return longest

    return max((chain(unit, frozenset()) for unit in sorted(inside)), key=len, default=[])


def test_no_two_units_of_pipelines_or_train_reach_each_other() -> None:
    loops = units_reaching_each_other(unit_graph(import_graph(REPO, PRODUCTION)))
    assert not loops, "units that reach each other: " + "; ".join(map(" -> ".join, loops))


def test_the_longest_chain_inside_pipelines_passes_at_most_8_units() -> None:
    chain = longest_chain(unit_graph(import_graph(REPO, PRODUCTION)), "pipelines.")
    assert len(chain) <= MAX_PIPELINES_CHAIN, " -> ".join(chain)


def _floored_package(root: Path) -> None:
    """pkg/: two sub-folders (stage_a/, stage_b/) and three top-level files; service.py at the
    bottom, cmd.py on top."""
    pkg = root / "pkg"
    for folder in ("stage_a", "stage_b"):
        (pkg / folder).mkdir(parents=True)
        (pkg / folder / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "service.py").write_text("")
    (pkg / "stage_a" / "one.py").write_text("from pkg import service\nfrom pkg.stage_a import two\n")
    (pkg / "stage_a" / "two.py").write_text("from . import one\n")  # a loop inside one unit
    (pkg / "stage_b" / "read.py").write_text("from pkg.stage_a.one import run\n")
    (pkg / "cmd.py").write_text("from pkg.stage_b import read\n")


def test_units_that_reach_each_other_are_found(tmp_path: Path) -> None:
    """A loop between files of one sub-folder is no loop of units; an import back from one
    sub-folder to another, inside a function and relative, is."""
    _floored_package(tmp_path)
    units = unit_graph(import_graph(tmp_path, ("pkg",)), ("pkg",))
    assert units["pkg.stage_a"] == {"pkg.service"}
    assert units_reaching_each_other(units) == []
    (tmp_path / "pkg" / "stage_a" / "two.py").write_text(
        "def later():\n    from ..stage_b import read\n    return read\n"
    )
    units = unit_graph(import_graph(tmp_path, ("pkg",)), ("pkg",))
    assert units_reaching_each_other(units) == [["pkg.stage_a", "pkg.stage_b", "pkg.stage_a"]]


def test_the_longest_chain_of_units_is_measured(tmp_path: Path) -> None:
    _floored_package(tmp_path)
    units = unit_graph(import_graph(tmp_path, ("pkg",)), ("pkg",))
    assert longest_chain(units, "pkg.") == ["pkg.cmd", "pkg.stage_b", "pkg.stage_a", "pkg.service"]
    (tmp_path / "pkg" / "stage_b" / "read.py").write_text("from pkg import service\n")
    units = unit_graph(import_graph(tmp_path, ("pkg",)), ("pkg",))
    assert len(longest_chain(units, "pkg.")) == 3  # the stages side by side
