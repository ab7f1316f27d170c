"""What the unit and the integration tests of build share."""

from __future__ import annotations

import glob as globlib
import os

from tests.conftest import REPO


def glob_files(patterns, exclude=()):
    found = set()
    for pattern in patterns:
        found.update(
            os.path.relpath(p, REPO)
            for p in globlib.glob(str(REPO / pattern), recursive=True)
            if os.path.isfile(p)
        )
    for pattern in exclude:
        found.difference_update(
            os.path.relpath(p, REPO) for p in globlib.glob(str(REPO / pattern), recursive=True)
        )
    return sorted(found)
