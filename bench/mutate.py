"""Mutation testing of one module against its own tests: how many small changes to what the code
means (a comparison flipped, an operator swapped, a constant moved by one, a `not` dropped, an
`and` made `or`) make at least one of the tests fail. Type annotations are no sites in a module
with `from __future__ import annotations`, which never evaluates them.

    python bench/mutate.py dataset_format/indexed.py tests/unit/dataset_format/test_dataset_format.py \\
        [--limit 60 --seed 1] [--results bench/results/mutation.md]

Each mutant is written into a private copy of the repository (never into the working tree:
nothing here can leave a mutant behind), and the test files are run there with `pytest -x`; a
failure or a timeout (3x the unmutated run, plus 30 s) kills it. `--limit` draws that many
mutants at random (seeded) instead of all. The score is killed / mutants; survivors are listed
by line so a test of the behaviour they change can be written. CPU-heavy: run one module at a
time, with that module's own test files only.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_COMPARE_SWAPS = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
                  ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In,
                  ast.Is: ast.IsNot, ast.IsNot: ast.Is}
_BINOP_SWAPS = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.FloorDiv,
                ast.FloorDiv: ast.Mult, ast.Div: ast.Mult, ast.Mod: ast.FloorDiv,
                ast.LShift: ast.RShift, ast.RShift: ast.LShift, ast.BitAnd: ast.BitOr,
                ast.BitOr: ast.BitAnd}


@dataclasses.dataclass(frozen=True)
class Mutant:
    index: int  # the site's number in walk order
    line: int
    what: str


class _Mutator(ast.NodeTransformer):
    """Walks a module's tree; lists every mutation site, or applies the one numbered `target`."""

    def __init__(self, target: int | None = None, *, lazy_annotations: bool = False) -> None:
        self.target = target
        self.lazy_annotations = lazy_annotations
        self.sites: list[Mutant] = []

    def _site(self, node: ast.AST, what: str) -> bool:
        index = len(self.sites)
        self.sites.append(Mutant(index, getattr(node, "lineno", 0), what))
        return index == self.target

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        for i, op in enumerate(node.ops):
            swap = _COMPARE_SWAPS.get(type(op))
            if swap and self._site(node, f"{type(op).__name__} -> {swap.__name__}"):
                node.ops[i] = swap()
        return node

    def _swap_operator(self, node, suffix: str = "") -> ast.AST:
        """`a + b` or `a += b` with its operator swapped (`suffix` "=" names the latter)."""
        self.generic_visit(node)
        swap = _BINOP_SWAPS.get(type(node.op))
        if swap and self._site(node, f"{type(node.op).__name__}{suffix} -> {swap.__name__}{suffix}"):
            node.op = swap()
        return node

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        return self._swap_operator(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        return self._swap_operator(node, "=")

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        self.generic_visit(node)
        swap = ast.Or if isinstance(node.op, ast.And) else ast.And
        if self._site(node, f"{type(node.op).__name__} -> {swap.__name__}"):
            node.op = swap()
        return node

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.Not) and self._site(node, "not x -> x"):
            return node.operand
        if isinstance(node.op, ast.USub) and self._site(node, "-x -> x"):
            return node.operand
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        value = node.value
        if isinstance(value, int) and not isinstance(value, bool):
            if self._site(node, f"{value} -> {value + 1}"):
                return ast.copy_location(ast.Constant(value + 1), node)
        elif isinstance(value, bool) and self._site(node, f"{value} -> {not value}"):
            return ast.copy_location(ast.Constant(not value), node)
        return node

    # Under `from __future__ import annotations` an annotation is a string nobody evaluates: a
    # mutant of one (`int | None` -> `int & None`) cannot change behaviour, so it is no site.
    def _visit_except(self, node: ast.AST, annotation: str) -> ast.AST:
        if not self.lazy_annotations:
            return self.generic_visit(node)
        for field, value in ast.iter_fields(node):
            if field == annotation:
                continue
            if isinstance(value, list):
                setattr(node, field, [self.visit(v) if isinstance(v, ast.AST) else v
                                      for v in value])
            elif isinstance(value, ast.AST):
                setattr(node, field, self.visit(value))
        return node

    def visit_arg(self, node: ast.arg) -> ast.AST:
        return self._visit_except(node, "annotation")

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST:
        return self._visit_except(node, "annotation")

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        return self._visit_except(node, "returns")

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Expr(self, node: ast.Expr) -> ast.AST:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return node  # a docstring: nothing to mutate
        return self.generic_visit(node)


def _lazy_annotations(tree: ast.Module) -> bool:
    return any(isinstance(node, ast.ImportFrom) and node.module == "__future__"
               and any(alias.name == "annotations" for alias in node.names)
               for node in tree.body)


def mutants(source: str) -> list[Mutant]:
    tree = ast.parse(source)
    mutator = _Mutator(lazy_annotations=_lazy_annotations(tree))
    mutator.visit(tree)
    return mutator.sites


def mutated(source: str, mutant: Mutant) -> str:
    tree = ast.parse(source)
    tree = _Mutator(mutant.index, lazy_annotations=_lazy_annotations(tree)).visit(tree)
    return ast.unparse(ast.fix_missing_locations(tree))


def _copy_repo(scratch: Path) -> Path:
    """A copy of the repository's sources and tests in `scratch`/repo, with `scratch`/shared
    linked to the real ../shared the tests read their corpora from."""
    copy = scratch / "repo"
    ignore = shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.egg-info", ".pytest_cache")
    shutil.copytree(REPO, copy, ignore=ignore, symlinks=True)
    shared = REPO.parent / "shared"
    if shared.exists():
        os.symlink(shared.resolve(), scratch / "shared")
    return copy


def _run_tests(copy: Path, tests: list[str], timeout: float) -> tuple[bool, float]:
    """(did every test pass, seconds) for the test files in the copy."""
    env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}
    started = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
            cwd=copy, env=env, capture_output=True, timeout=timeout,
        )  # fmt: skip
        passed = done.returncode == 0
    except subprocess.TimeoutExpired:
        passed = False  # a mutant that hangs a test is caught by it
    return passed, time.monotonic() - started


def run(module: str, tests: list[str], limit: int | None, seed: int) -> dict:
    source = (REPO / module).read_text(encoding="utf-8")
    sites = mutants(source)
    chosen = sites if limit is None or limit >= len(sites) else sorted(
        random.Random(seed).sample(sites, limit), key=lambda m: m.index)
    with tempfile.TemporaryDirectory(prefix="shardsmith-mutate-") as scratch:
        copy = _copy_repo(Path(scratch))
        target = copy / module
        passed, baseline = _run_tests(copy, tests, timeout=3600)
        if not passed:
            raise SystemExit(f"error: {' '.join(tests)} fail on the unmutated {module}")
        survivors = []
        for number, mutant in enumerate(chosen, 1):
            target.write_text(mutated(source, mutant), encoding="utf-8")
            survived, _ = _run_tests(copy, tests, timeout=3 * baseline + 30)
            if survived:
                survivors.append(mutant)
            print(f"[{number}/{len(chosen)}] line {mutant.line}: {mutant.what}: "
                  f"{'SURVIVED' if survived else 'killed'}", flush=True)
        target.write_text(source, encoding="utf-8")
    killed = len(chosen) - len(survivors)
    return {"module": module, "tests": tests, "sites": len(sites), "mutants": len(chosen),
            "killed": killed, "score": killed / len(chosen) if chosen else 1.0,
            "survivors": survivors, "baseline_s": baseline}


def _markdown(result: dict, label: str) -> str:
    lines = [f"### {result['module']} ({label})", "",
             f"tests: {', '.join(result['tests'])}; {result['mutants']} mutants of "
             f"{result['sites']} sites; killed {result['killed']} "
             f"(**{result['score']:.0%}**); unmutated tests {result['baseline_s']:.0f} s", ""]
    if result["survivors"]:
        lines.append("Survivors: " + "; ".join(f"line {m.line} {m.what}"
                                                for m in result["survivors"]))
        lines.append("")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("module", help="the module's path, relative to the repository root")
    parser.add_argument("tests", nargs="+", help="its test files")
    parser.add_argument("--limit", type=int, help="mutants drawn at random (default: all)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--label", default="", help="a note for the results, e.g. 'before'")
    parser.add_argument("--results", help="a markdown file the result is appended to")
    args = parser.parse_args(argv)
    # a SIGTERM unwinds like an exception, so that the private copy is deleted
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    result = run(args.module, args.tests, args.limit, args.seed)
    text = _markdown(result, args.label or time.strftime("%Y-%m-%d"))
    print(text)
    if args.results:
        with open(args.results, "a", encoding="utf-8") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
