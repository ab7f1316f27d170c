"""What the unit and the integration tests of recipes share."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from tests.conftest import REPO

RECIPES = REPO / "recipes"
RECIPE_FILES = sorted(p.name for p in RECIPES.glob("*.sh") if p.name != "lib.sh")


def load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


make_scaling = load("make_scaling", RECIPES / "make_scaling.py")
