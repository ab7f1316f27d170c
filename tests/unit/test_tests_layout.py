"""The tests' own layout: no test module imports another.

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


def imported_test_modules(source: str, relpath: str, tests: set[str]) -> list[str]:
    """Where the file `relpath` (relative to the repository, holding `source`) imports one of
    the test modules `tests` (tests/test_*.py stems) other than itself."""
    package = ".".join(relpath.split("/")[:-1])
    stem = relpath.rsplit("/", 1)[-1].removesuffix(".py")
    found = set()
    for node in ast.walk(ast.parse(source, relpath)):
        for module in _named_modules(node, package):
            parts = module.split(".")
            # tests.test_x (or a name in it), or a bare test_x that pytest's rootdir insertion finds
            name = parts[1] if parts[0] == "tests" and len(parts) > 1 else parts[0]
            if name in tests and name != stem:
                found.add(f"{relpath}:{node.lineno} imports tests.{name}")
    return sorted(found)


def test_no_test_module_imports_another():
    files = sorted(TESTS.glob("**/*.py"))
    tests = {p.stem for p in TESTS.glob("test_*.py")}
    assert "test_build" in tests and "test_tests_layout" in tests
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
    tests = {"test_build", "test_probe"}
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
