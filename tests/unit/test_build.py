"""BUILD is checked against the tree, so it cannot go stale.

The BUILD file is evaluated here with small Python stand-ins for the Bazel rules it uses (it is
Starlark, which this subset of Python reads the same). Then: every source file belongs to one
target, every test file has its py_test, every import between first-party packages is a declared
dependency (the one-way rule: pipelines -> dataset_format <- train, all three on common), and, where Bazel is
installed, Bazel itself loads the targets and runs one test.
"""

from __future__ import annotations

import ast
import os

from tests.conftest import REPO
from tests.helpers.build import glob_files

FIRST_PARTY = ("common", "dataset_format", "pipelines", "train", "tools")


def evaluate_build() -> dict[str, dict]:
    targets: dict[str, dict] = {}

    def rule(kind):
        def record(name, **attrs):
            assert name not in targets, f"BUILD declares {name} twice"
            targets[name] = {"kind": kind, **attrs}

        return record

    namespace = {
        "glob": glob_files,
        "package": lambda **_: None,
        "load": lambda *_: None,
        **{k: rule(k) for k in ("py_library", "py_binary", "py_test", "sh_binary")},
    }
    exec(compile((REPO / "BUILD").read_text(), "BUILD", "exec"), namespace)
    return targets


def first_party_imports(path: str) -> set[str]:
    tree = ast.parse((REPO / path).read_text(), path)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found & set(FIRST_PARTY)


def package_of(path: str) -> str:
    return path.split("/")[0]


def test_every_source_file_is_in_exactly_one_target():
    targets = evaluate_build()
    owners: dict[str, list[str]] = {}
    for name, target in targets.items():
        if target["kind"] == "py_test":
            continue
        for src in target.get("srcs", []):
            if not src.startswith("//"):
                owners.setdefault(src, []).append(name)
    tree = glob_files([f"{p}/**/*.py" for p in ("common", "dataset_format", "pipelines", "train")])
    unowned = [f for f in tree if f not in owners]
    assert not unowned, f"source files no BUILD target owns: {unowned}"
    twice = {f: o for f, o in owners.items() if len(o) > 1}
    assert not twice, f"files in more than one target: {twice}"
    missing = [f for f in owners if not (REPO / f).exists()]
    assert not missing, f"BUILD names files that do not exist: {missing}"
    tools = sorted(os.path.basename(p) for p in glob_files(["tools/*"]) if os.access(REPO / p, os.X_OK))
    declared = sorted(n for n, t in targets.items() if t["kind"] == "sh_binary")
    assert tools == declared, f"tools/ executables {tools} vs BUILD sh_binary targets {declared}"


def test_every_test_file_has_a_py_test():
    targets = evaluate_build()
    tests = {n for n, t in targets.items() if t["kind"] == "py_test"}
    files = {p[len("tests/") : -len(".py")] for p in glob_files(["tests/**/test_*.py"])}
    assert "unit/test_build" in files and "integration/test_build" in files
    assert tests == files


def test_every_support_file_of_the_tests_is_in_test_support():
    """What test files import from tests/ and tests/helpers/ is in :test_support, on which every
    py_test depends; test files themselves are not."""
    support = set(evaluate_build()["test_support"]["srcs"])
    files = set(glob_files(["tests/**/*.py"], exclude=["tests/**/test_*.py"]))
    assert "tests/helpers/checkpoints.py" in files
    assert support == files, (sorted(files - support), sorted(support - files))


def test_imports_follow_declared_dependencies():
    targets = evaluate_build()
    libraries = {n: t for n, t in targets.items() if t["kind"] == "py_library" and n in FIRST_PARTY}
    assert set(libraries) == {"common", "dataset_format", "pipelines", "train"}
    # The library a first-party package's files belong to, and what each may import.
    allowed = {
        name: {name} | {d.lstrip(":") for d in lib.get("deps", [])}
        for name, lib in libraries.items()
    }
    assert allowed == {
        "common": {"common"},
        "dataset_format": {"dataset_format", "common"},
        "pipelines": {"pipelines", "dataset_format", "common"},
        "train": {"train", "dataset_format", "common"},
    }, "the one-way rule: pipelines and train build on dataset_format and common, never on each other"
    violations = []
    for name, target in targets.items():
        if target["kind"] not in ("py_library", "py_binary") or name == "test_support":
            continue
        for src in target.get("srcs", []):
            package = package_of(src)
            for imported in first_party_imports(src) - allowed.get(package, {package}):
                violations.append(f"{src} imports {imported}")
    assert not violations, violations


def _module_of(path: str) -> str:
    module = path[: -len(".py")].replace("/", ".")
    return module[: -len(".__init__")] if module.endswith(".__init__") else module


def imported_modules(path: str) -> set[str]:
    """Every first-party module `path` imports by name (`from a.b import c` counts a.b and
    a.b.c, since c may be a module)."""
    found = set()
    for node in ast.walk(ast.parse((REPO / path).read_text(), path)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {m for m in found if m.split(".")[0] in FIRST_PARTY}


def test_no_module_imports_a_commands_main_file():
    """A py_binary's own source is in no library, so under Bazel a module importing it would
    not find it: what two commands share lives in a library module (dedup reuses preprocess's
    unknown-flag rule from pipelines.runner.runners, not from pipelines.preprocess)."""
    targets = evaluate_build()
    mains = {
        _module_of(src): name
        for name, target in targets.items()
        if target["kind"] == "py_binary"
        for src in target.get("srcs", [])
    }
    violations = [
        f"{src} imports {module} (the main file of {mains[module]})"
        for target in targets.values()
        if target["kind"] in ("py_library", "py_binary")
        for src in target.get("srcs", [])
        for module in imported_modules(src) & set(mains)
        if module != _module_of(src)
    ]
    assert not violations, violations


def test_no_production_module_reads_a_test_only_variable():
    """Issue 20: tests inject faults through hook objects or monkeypatching, never through
    SHARDSMITH_TEST_* environment variables read by the code they test."""
    sources = glob_files([f"{p}/**/*.py" for p in ("common", "dataset_format", "pipelines", "train")])
    sources += [p for p in glob_files(["tools/*"]) if (REPO / p).read_bytes()[:2] == b"#!"]
    readers = [p for p in sources if "SHARDSMITH_TEST_" in (REPO / p).read_text(errors="replace")]
    assert not readers, readers
