"""bench/mutate.py's mutation sites, on the source of a real module of the repository."""

from __future__ import annotations

import ast
import importlib.util
import sys

from tests.conftest import REPO

_spec = importlib.util.spec_from_file_location("mutate", REPO / "bench" / "mutate.py")
mutate = importlib.util.module_from_spec(_spec)
sys.modules["mutate"] = mutate  # its dataclasses look their module up there
_spec.loader.exec_module(mutate)


def test_annotations_are_no_sites_where_python_never_evaluates_them():
    """indexed.py's `dtype: np.dtype | type | str` (line of `IndexedDatasetWriter.__init__`) is a
    string under `from __future__ import annotations`: no site. Without the import Python
    evaluates it when the function is defined, and `|` -> `&` there is a real mutant."""
    source = (REPO / "dataset_format" / "indexed.py").read_text(encoding="utf-8")
    assert source.count("from __future__ import annotations\n") == 1
    line = next(i for i, text in enumerate(source.splitlines(), 1)
                if "def __init__(self, prefix: str, dtype: np.dtype | type | str)" in text)
    lazy = mutate.mutants(source)
    assert line not in {m.line for m in lazy}
    eager = mutate.mutants(source.replace("from __future__ import annotations\n", ""))
    at_line = [m.what for m in eager if m.line == line - 1]  # one line fewer above it
    assert at_line == ["BitOr -> BitAnd", "BitOr -> BitAnd"]
    assert len(eager) > len(lazy)


def test_each_mutant_changes_its_site_and_still_parses():
    source = (REPO / "train" / "optim.py").read_text(encoding="utf-8")
    original = ast.dump(ast.parse(source))
    sites = mutate.mutants(source)
    assert len(sites) > 100
    for mutant in sites[:: max(1, len(sites) // 25)]:
        changed = mutate.mutated(source, mutant)
        assert ast.dump(ast.parse(changed)) != original, mutant
