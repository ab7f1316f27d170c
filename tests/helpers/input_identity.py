"""What the unit and the integration tests of input identity share."""

from __future__ import annotations

import shutil

from tests.conftest import CORPORA

WEBTEXT = CORPORA / "web" / "text" / "webtext_train_10"


def webtext_with_a_linked_folder(tmp_path):
    """corpus/own holds web texts 0-4; corpus/linked is a link to a folder holding 5-9."""
    (tmp_path / "corpus" / "own").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    for i in range(10):
        folder = tmp_path / ("corpus/own" if i < 5 else "elsewhere")
        shutil.copy(WEBTEXT / f"{i}.txt", folder / f"{i}.txt")
    (tmp_path / "corpus" / "linked").symlink_to(tmp_path / "elsewhere")
    return tmp_path / "corpus"
