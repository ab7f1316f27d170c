"""The tests' own layout: two tiers, and no test module imports another.

tests/unit/ mirrors the package tree (tests/unit/pipelines/clean/ tests pipelines/clean/) and
runs in this process only: tests/unit/conftest.py fails a test there that starts a process or
runs a Beam pipeline (tests/helpers/inprocess_guard.py). tests/integration/ holds the tests that
start processes, pipelines, clusters or commands. Every folder of both tiers is a package (an
`__init__.py`), so pytest imports each test file by its full dotted name: two tiers may hold a
file of the same name (a file split into its in-process and its process-starting tests), and no
tier folder (tests/unit/pipelines/) lands on sys.path where it would shadow the real package.

What two test modules share (helpers, constants, fixtures) lives in `tests/helpers/` or in
`tests/conftest.py`. A test module that imports another runs that module's import-time work (and,
where it imports test functions, runs them twice) and ties the two files' edits together. Imports
are read with ast: module-level ones and those inside functions, `import`, `from ... import`
(absolute and relative) and `importlib.import_module("...")` with a literal name.
"""

from __future__ import annotations

import ast

from tests.conftest import REPO

TESTS = REPO / "tests"


def _named_modules(node: ast.AST, package: str) -> list[str]:
    """The dotted modules an import node names, relative imports resolved against `package`
    (`tests` or `tests.helpers`); `from a import b` names a.b too, since b may be a module."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        module = node.module or ""
        if node.level:
            parts = package.split(".")
            base = parts[: max(len(parts) - (node.level - 1), 0)]
            module = ".".join(base + ([module] if module else []))
        return [module] + [f"{module}.{alias.name}" for alias in node.names]
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
            return [node.args[0].value]
    return []


def _test_module_named(module: str, tests: set[str]) -> str | None:
    """The test module (dotted, as in `tests`) that the imported name `module` is or lies in:
    tests.unit.x.test_y (or a name in it), or a bare test_y/x.test_y as a folder on sys.path
    would find it."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        if not parts[end - 1].startswith("test_"):
            continue
        name = ".".join(parts[:end])
        if name in tests:
            return name
        within = [t for t in tests if t.endswith("." + name)]
        if parts[0] != "tests" and within:
            return sorted(within)[0]
    return None


def imported_test_modules(source: str, relpath: str, tests: set[str]) -> list[str]:
    """Where the file `relpath` (relative to the repository, holding `source`) imports one of
    the test modules `tests` (dotted names: tests.test_x, tests.unit.train.test_y) other than
    itself."""
    package = ".".join(relpath.split("/")[:-1])
    itself = relpath.removesuffix(".py").replace("/", ".")
    found = set()
    for node in ast.walk(ast.parse(source, relpath)):
        for module in _named_modules(node, package):
            name = _test_module_named(module, tests)
            if name is not None and name != itself:
                found.add(f"{relpath}:{node.lineno} imports {name}")
    return sorted(found)


def _test_modules() -> set[str]:
    return {
        str(p.relative_to(REPO)).removesuffix(".py").replace("/", ".")
        for p in TESTS.glob("**/test_*.py")
    }


def test_no_test_module_imports_another():
    files = sorted(TESTS.glob("**/*.py"))
    tests = _test_modules()
    assert "tests.unit.test_build" in tests and "tests.unit.test_tests_layout" in tests
    violations = [
        v
        for p in files
        for v in imported_test_modules(p.read_text(), str(p.relative_to(REPO)), tests)
    ]
    assert not violations, (
        "shared test helpers belong in tests/helpers/ or tests/conftest.py:\n"
        + "\n".join(violations)
    )


def test_the_check_sees_every_spelling_of_such_an_import():
    tests = {"tests.test_build", "tests.test_probe"}
    spellings = {
        "from tests.test_build import evaluate_build": True,
        "import tests.test_build": True,
        "import tests.test_build as b": True,
        "from tests import test_build": True,
        "from tests import conftest, test_build": True,
        "from .test_build import evaluate_build": True,
        "from . import test_build": True,
        "import test_build": True,
        "importlib.import_module('tests.test_build')": True,
        "def f():\n    from tests.test_build import evaluate_build": True,
        "class C:\n    def f(self):\n        import tests.test_build": True,
        "from tests.conftest import REPO": False,
        "from tests.helpers import checkpoints": False,
        "from tests.helpers.checkpoints import trained": False,
        "import tests.test_probe": False,  # itself
        "from pipelines import test_build_x": False,
        "import pytest": False,
    }
    for source, counted in spellings.items():
        found = imported_test_modules(source, "tests/test_probe.py", tests)
        assert bool(found) is counted, (source, found)
        if counted:
            assert len(found) == 1 and found[0].endswith(" imports tests.test_build"), found
    # from a helper module, `from .. import test_build` reaches the tests package as well
    assert imported_test_modules("from .. import test_build", "tests/helpers/x.py", tests)
    assert not imported_test_modules("from . import test_build", "tests/helpers/x.py", tests)


def test_the_check_sees_imports_between_the_tiers():
    tests = {
        "tests.unit.train.test_optim",
        "tests.unit.train.test_plan",
        "tests.integration.test_optim",
        "tests.unit.test_x",
    }
    unit = "tests/unit/train/test_optim.py"
    spellings = {
        "from tests.integration.test_optim import run": "tests.integration.test_optim",
        "from tests.integration import test_optim": "tests.integration.test_optim",
        "from ...integration import test_optim": "tests.integration.test_optim",
        "from .. import test_x": "tests.unit.test_x",
        "import tests.unit.test_x": "tests.unit.test_x",
        "from train import test_plan": "tests.unit.train.test_plan",  # a tier folder on sys.path
        "from tests.unit.train.test_optim import run": None,  # itself
        "from tests.unit.train import helpers": None,
        "from tests.helpers import checkpoints": None,
    }
    for source, named in spellings.items():
        found = imported_test_modules(source, unit, tests)
        if named is None:
            assert not found, (source, found)
        else:
            assert found == [f"{unit}:1 imports {named}"], (source, found)


TIERS = ("unit", "integration")


def test_every_test_file_is_in_a_tier_and_every_tier_folder_is_a_package():
    """A test file directly under tests/ still runs (pytest's testpaths is tests/), but it has no
    tier: this names it and the command that finds its tier."""
    untiered = sorted(p.name for p in TESTS.glob("test_*.py"))
    assert not untiered, (
        f"test files directly under tests/: {untiered}. Run each under the unit guard, "
        "`.venv/bin/python -m pytest -p tests.helpers.inprocess_guard -q tests/FILE`: a file "
        "none of whose tests fails with 'unit tier:' moves (git mv) to tests/unit/<package path "
        "it tests>/, one whose tests all fail so moves to tests/integration/, and one with both "
        "is split in two files of the same name, one in each tier"
    )
    folders = {p.parent for tier in TIERS for p in (TESTS / tier).glob("**/*.py")}
    not_packages = sorted(str(f.relative_to(REPO)) for f in folders if not (f / "__init__.py").exists())
    assert not not_packages, f"tier folders without __init__.py: {not_packages}"


def test_the_unit_tier_mirrors_the_package_tree():
    """tests/unit/A/B/test_x.py tests the package folder A/B/ of the repository (the project-wide
    checks, such as this file, lie at tests/unit/ itself)."""
    stray = sorted(
        str(p.relative_to(REPO))
        for p in (TESTS / "unit").glob("**/test_*.py")
        if not (REPO / p.parent.relative_to(TESTS / "unit")).is_dir()
    )
    assert not stray, f"unit test folders that mirror no folder of the repository: {stray}"


def test_the_unit_tier_is_guarded():
    """tests/unit/conftest.py takes the guard's hooks, so a unit test cannot start a process."""
    from tests.helpers import inprocess_guard

    conftest = (TESTS / "unit" / "conftest.py").read_text()
    hooks = [n for n in dir(inprocess_guard) if n.startswith("pytest_")]
    assert len(hooks) == 3
    assert all(hook in conftest for hook in hooks), hooks
